"""Results: :class:`tuneplat.ResultGrid`, :class:`tuneplat.Result` and :class:`tuneplat.TrialError`.

Private: the public names are re-exported by :mod:`tuneplat` (and ``tuneplat.train.Result``).
"""
