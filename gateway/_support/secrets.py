"""Keeping connection strings, keys and tokens out of logs, reprs and errors.

The log formatter that applies :func:`redact` is in :mod:`gateway._support.logs`, so
that what only redacts (the CLI's one-line errors) does not import :mod:`logging`.
"""

from __future__ import annotations

import re

__all__ = ["redact"]

# Key=value pairs of Azure connection strings and SAS tokens that are secret.
_SECRET_PAIRS = re.compile(
    r"(?i)(?<![A-Za-z0-9])(SharedAccessKey|SharedAccessSignature|AccountKey|sig|password"
    r"|access_token|token)=([^;&\s\"']+)"
)
# Credentials inside a URL: scheme://user:password@host or scheme://token@host.
_URL_CREDENTIALS = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s;\"']+@")


def redact(text: str) -> str:
    """Return ``text`` with every secret value replaced by ``***``."""
    text = _SECRET_PAIRS.sub(lambda m: f"{m.group(1)}=***", text)
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}***@", text)

