"""Checks of the arguments ``DurableQueue`` is given: loud errors, before any I/O."""

from __future__ import annotations

from collections.abc import Sequence

from durable_queue._records import StoredMessage
from replication import ConfigError

__all__ = ["busy_timeout", "cap", "destination", "ids", "limit", "synchronous", "where"]

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def cap(name: str, value: int | None) -> int | None:
    """A ``max_messages``/``max_bytes`` option: a positive int, or ``None`` for no cap."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive int or None, not {value!r}")
    return value


def synchronous(value: str) -> str:
    """SQLite's ``synchronous`` level, upper-cased."""
    if not isinstance(value, str) or value.upper() not in _SYNCHRONOUS:
        raise ConfigError(f"synchronous must be one of {_SYNCHRONOUS}, not {value!r}")
    return value.upper()


def busy_timeout(value: float) -> float:
    """Seconds to wait for another process's write lock: a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"busy_timeout must be a number of seconds, not {value!r}")
    if not value > 0:
        raise ConfigError(f"busy_timeout must be positive, not {value!r}")
    return float(value)


def ids(items: Sequence[StoredMessage] | Sequence[int]) -> list[int]:
    """Row ids of messages given as records or as ids."""
    return [item.id if isinstance(item, StoredMessage) else int(item) for item in items]


def destination(value: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a non-empty str."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"destination must be a non-empty str, not {value!r}")


def limit(name: str, value: int) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, not {value!r}")


def where(value: str | None) -> tuple[str, tuple[str, ...]]:
    """The ``WHERE`` clause and parameters selecting one destination (``None``: all)."""
    if value is None:
        return "", ()
    destination(value)
    return "WHERE destination = ?", (value,)
