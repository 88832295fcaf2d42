"""Keeping connection strings, keys and tokens out of logs, reprs and errors."""

from __future__ import annotations

import re

__all__ = ["redact"]

# Key=value pairs of Azure connection strings and SAS tokens that are secret.
_SECRET_PAIRS = re.compile(
    r"(?i)\b(SharedAccessKey|SharedAccessSignature|AccountKey|sig|password|token)=([^;&\s\"']+)"
)


def redact(text: str) -> str:
    """Return ``text`` with every secret value replaced by ``***``."""
    return _SECRET_PAIRS.sub(lambda m: f"{m.group(1)}=***", text)
