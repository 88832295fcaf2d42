"""A log formatter that keeps secrets off the terminal (see :mod:`gateway._support.secrets`)."""

from __future__ import annotations

import logging

from gateway._support.secrets import redact

__all__ = ["RedactingFormatter"]


class RedactingFormatter(logging.Formatter):
    """A log formatter that passes every formatted record, tracebacks included, through
    :func:`~gateway._support.secrets.redact`, so a library that logs a connection string
    or a SAS token (the Azure SDKs do at debug level) cannot put it on the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
