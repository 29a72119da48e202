"""Signatures on the pickles tuneplat writes into an experiment folder, checked before anything is unpickled.

``tuner.pkl``, ``trainer.pkl`` and the journal's pickled configs (``config_pickle``)
hold Python objects that :meth:`Tuner.restore` and ``TorchTrainer.restore`` unpickle,
which runs code. An experiment folder can be written by someone else (a shared
results disk, a bucket, a colleague's copy), so each pickle carries an HMAC-SHA256
with a key of the user's own: ``~/.config/tuneplat/state.key`` (32 random bytes,
mode 0600, in a 0700 folder; ``TUNEPLAT_KEY_DIR`` names another folder). A pickle
whose HMAC does not match that key is never unpickled: restore says how to go on
with the settings passed again (see :mod:`tuneplat.core._replay`).

Files: ``MAGIC`` + 64 hex digits of the HMAC + ``\\n`` + the pickle. Journal
fields: ``"h1:" + HMAC hex + ":" + pickle hex``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets

__all__ = ["MAGIC", "SignatureError", "check_field", "check_file", "key_path", "sign_field", "sign_file"]

logger = logging.getLogger("tuneplat")

MAGIC = b"TUNEPLAT-HMAC-SHA256\n"
_FIELD = "h1:"
_KEY_FILE = "state.key"


class SignatureError(ValueError):
    """A pickle's signature does not match this user's key (changed, written by someone else, or unsigned)."""


def key_path() -> str:
    """The file holding this user's signing key (``$TUNEPLAT_KEY_DIR/state.key``, else ``~/.config/tuneplat``)."""
    folder = os.environ.get("TUNEPLAT_KEY_DIR", "").strip() or os.path.join(os.path.expanduser("~"), ".config",
                                                                               "tuneplat")
    return os.path.join(folder, _KEY_FILE)


def _key(create: bool) -> bytes | None:
    path = key_path()
    try:
        with open(path, "rb") as f:
            key = f.read()
        if len(key) >= 32:
            return key
    except FileNotFoundError:
        pass
    if not create:
        return None
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use that one
        with open(path, "rb") as f:
            return f.read()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
        f.flush()
        os.fsync(f.fileno())
    logger.info("tuneplat: made the key that signs your experiments' pickles: %s", path)
    return key


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def sign_file(data: bytes) -> bytes:
    """``data`` (a pickle) as it is written to a file: the signature header, then the pickle."""
    key = _key(create=True)
    assert key is not None
    return MAGIC + _mac(key, data).encode() + b"\n" + data


def check_file(path: str, data: bytes) -> bytes:
    """The pickle in ``data`` (read from ``path``) once its signature matches this user's key.

    Raises:
        SignatureError: naming ``path``; nothing was unpickled.
    """
    head = len(MAGIC) + 64 + 1
    why = None
    if not data.startswith(MAGIC) or len(data) < head or data[head - 1:head] != b"\n":
        why = "it carries no tuneplat signature (written by someone else, or by an older tuneplat that did not sign them)"
    else:
        key = _key(create=False)
        if key is None:
            why = f"there is no key to check it with ({key_path()} does not exist: another user or machine wrote it)"
        elif not hmac.compare_digest(data[len(MAGIC):head - 1].decode("ascii", "replace"), _mac(key, data[head:])):
            why = f"its signature does not match your key {key_path()} (it was changed, or written by someone else)"
    if why:
        raise SignatureError(f"{path} is refused: {why}; it is not unpickled")
    return data[head:]


def sign_field(data: bytes) -> str:
    """A pickle as a journal field (hex, signed)."""
    key = _key(create=True)
    assert key is not None
    return f"{_FIELD}{_mac(key, data)}:{data.hex()}"


def check_field(value: str) -> bytes | None:
    """The pickle in a journal field once its signature matches this user's key; None otherwise (not unpickled)."""
    if not isinstance(value, str) or not value.startswith(_FIELD):
        return None
    tag, _, body = value[len(_FIELD):].partition(":")
    key = _key(create=False)
    if key is None:
        return None
    try:
        data = bytes.fromhex(body)
    except ValueError:
        return None
    return data if hmac.compare_digest(tag, _mac(key, data)) else None
