"""How a Service Bus session receiver link asks for its session, and how it is answered.

A session receiver attaches with the ``com.microsoft:session-filter`` source filter: a
session id, or null for the next available session. The service answers once the
session is locked, with the session id in the filter (the SDKs read it from there) and
the lock's expiry in the ``com.microsoft:locked-until-utc`` link property (.NET ticks).
A next-available attach waits up to the link's ``com.microsoft:timeout``
(milliseconds). The emulator and the proxy both answer it this way.
"""

from __future__ import annotations

from typing import Any

from gateway.amqp import Long
from gateway.amqp.server._links import Link

__all__ = ["LOCKED_UNTIL", "SESSION_FILTER", "accept_session_link", "asked_session",
           "attach_timeout", "raw_session_filter", "session_filter", "ticks"]

SESSION_FILTER = "com.microsoft:session-filter"
LOCKED_UNTIL = "com.microsoft:locked-until-utc"
_TIMEOUT = "com.microsoft:timeout"
_ARGUMENT_ERROR = "com.microsoft:argument-error"
#: .NET ticks (100 ns since 0001-01-01) at the Unix epoch.
_TICKS_AT_EPOCH = 621_355_968_000_000_000


def ticks(seconds: float) -> Long:
    """A time (seconds since the epoch) in .NET ticks, as Service Bus sends lock expiries."""
    return Long(_TICKS_AT_EPOCH + round(seconds * 10_000_000))


def raw_session_filter(link: Link) -> tuple[bool, object]:
    """Whether ``link`` carries a session filter, and its value as sent."""
    filters = link.source.filter if link.source is not None else None
    for key, value in (filters or {}).items():
        if str(key) == SESSION_FILTER:
            return True, value
    return False, None


def session_filter(link: Link) -> tuple[bool, str | None]:
    """Whether ``link`` asks for a session, and which one (``None``: the next available)."""
    found, value = raw_session_filter(link)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return found, None if value is None else str(value)


def asked_session(link: Link) -> tuple[bool, str | None]:
    """The session ``link`` asks for (``None``: the next available one); ``(False,
    None)`` once the link is refused because its filter is not a string.

    A session id is a string. What the service answers to another value
    (``session_id=1``) is not documented; an argument error is how it answers other
    malformed requests (the SDK raises a ``ServiceBusError``), and such a filter never
    matches a session id.
    """
    _, raw = raw_session_filter(link)
    if raw is not None and not isinstance(raw, str | bytes):
        link.refuse(_ARGUMENT_ERROR, f"the session filter must be a string session id, not "
                    f"{raw!r} ({type(raw).__name__})")
        return False, None
    return True, session_filter(link)[1]


def attach_timeout(link: Link, default: float) -> float:
    """Seconds a next-available attach may wait: the link's ``com.microsoft:timeout``
    (milliseconds), else ``default``."""
    timeout = link.properties.get(_TIMEOUT)
    return int(timeout) / 1000 if isinstance(timeout, int) else default


def accept_session_link(link: Link, session_id: str, locked_until: float) -> dict[str, Any]:
    """Write the locked session's id into the link's filter; the attach properties that
    carry its lock's expiry (seconds since the epoch)."""
    if link.source is not None:
        link.source.filter = {SESSION_FILTER: session_id}
    return {LOCKED_UNTIL: ticks(locked_until)}
