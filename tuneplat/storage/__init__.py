"""Storage: checkpoints (local and fsspec stores, the crash-safe commit) and the experiment folder.

Private: the public names are :class:`tuneplat.Checkpoint` and ``RunConfig(storage_path=..., storage_filesystem=...)``.
"""
