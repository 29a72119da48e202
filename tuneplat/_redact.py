"""Credentials out of messages, logs and files: ``scheme://user:secret@host`` -> ``scheme://***@host``."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["has_credentials", "redact", "strip_credentials"]

# userinfo of a URL (what precedes '@' in the authority), and secret-looking query parameters
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")
_QUERY = re.compile(r"(?P<key>[?&](?:access_token|token|password|passwd|secret|api_key|apikey|key)=)[^&\s'\"#]+",
                    re.IGNORECASE)


def redact(text: Any) -> str:
    """``text`` (any object, as str) with URL credentials and secret query parameters replaced by ``***``."""
    s = str(text)
    s = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", s)
    return _QUERY.sub(lambda m: f"{m.group('key')}***", s)


def has_credentials(url: str | None) -> bool:
    return bool(url) and redact(url) != url


def strip_credentials(url: str) -> str:
    """The URL without its userinfo (``http://user:pw@host`` -> ``http://host``) and secret query parameters."""
    s = _USERINFO.sub(lambda m: m.group("scheme"), url)
    return _QUERY.sub(lambda m: f"{m.group('key')}***", s)
