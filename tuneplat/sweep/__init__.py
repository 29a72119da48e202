"""Sweep files: reading (YAML/TOML with positions), schema, overrides and the W&B sweep translation.

Private: the public entry is :mod:`tuneplat.config` (``load_sweep``, ``build``...) and the ``tuneplat`` command.
"""
