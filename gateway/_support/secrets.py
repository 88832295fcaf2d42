"""Keeping connection strings, keys and tokens out of logs, reprs and errors."""

from __future__ import annotations

import logging
import re

__all__ = ["RedactingFormatter", "redact"]

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


class RedactingFormatter(logging.Formatter):
    """A log formatter that passes every formatted record, tracebacks included, through
    :func:`redact`, so a library that logs a connection string or a SAS token (the Azure
    SDKs do at debug level) cannot put it on the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
