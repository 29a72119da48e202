"""Trainables: function, class and wrapped trainables, adapted to the one form the tuner runs.

Private: the public names are :class:`tuneplat.Trainable`, :func:`tuneplat.with_parameters`,
:func:`tuneplat.with_resources` and :class:`tuneplat.PlacementGroupFactory`.
"""
