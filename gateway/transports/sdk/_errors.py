"""What an SDK failure means to the gateway, and the project's error that says so.

An :class:`Outcome` comes from an AMQP condition, a status code or a built-in
exception; :func:`build_error` turns it into a :mod:`gateway.errors` error whose
message is one redacted line.
"""

from __future__ import annotations

import enum
import re
import socket
from collections.abc import Iterable, Iterator

from gateway._support.secrets import redact
from replication import (
    GatewayError,
    MessageRejected,
    MessageTooLarge,
    NamespaceMisconfigured,
    NamespaceRefused,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    SessionLockLost,
)

__all__ = [
    "Outcome",
    "build_error",
    "builtin_outcome",
    "condition_outcome",
    "find_status_code",
    "status_outcome",
    "walk",
]

#: The longest SDK text kept in a mapped error's message.
_MAX_DETAIL = 300


class Outcome(enum.Enum):
    """What an SDK failure means to the gateway."""

    UNAVAILABLE = "unavailable"  # transient: nothing happened; retry, fail over, buffer
    TIMEOUT = "timeout"  # transient: the outcome is unknown
    REJECTED = "rejected"  # permanent for this message or entity
    CREDENTIALS = "credentials"  # the namespace refused the credentials: it is unusable
    TOO_LARGE = "too_large"  # permanent for this message; a batch may go in parts
    LOCK_LOST = "lock_lost"  # permanent for this delivery; the message comes back
    SESSION_LOCK_LOST = "session_lock_lost"  # permanent for this session lock
    OWNERSHIP_LOST = "ownership_lost"  # a higher owner level took the partition


# AMQP error conditions by the part after the first ":" ("amqp:not-found" -> "not-found"),
# which is how azure-eventhub reports them (EventHubError.error).
_CONDITIONS: dict[str, Outcome] = {
    "not-found": Outcome.REJECTED,
    "unauthorized-access": Outcome.CREDENTIALS,
    "auth-failed": Outcome.CREDENTIALS,
    "decode-error": Outcome.REJECTED,
    "not-allowed": Outcome.REJECTED,
    "invalid-field": Outcome.REJECTED,
    "not-implemented": Outcome.REJECTED,
    "precondition-failed": Outcome.REJECTED,
    "resource-deleted": Outcome.REJECTED,
    "link:message-size-exceeded": Outcome.TOO_LARGE,
    "argument-error": Outcome.REJECTED,
    "argument-out-of-range": Outcome.REJECTED,
    "entity-already-exists": Outcome.REJECTED,
    "timeout": Outcome.TIMEOUT,
    "message-lock-lost": Outcome.LOCK_LOST,
    "session-lock-lost": Outcome.SESSION_LOCK_LOST,
    "message-not-found": Outcome.LOCK_LOST,
    "link:stolen": Outcome.OWNERSHIP_LOST,
    "server-busy": Outcome.UNAVAILABLE,
    "resource-limit-exceeded": Outcome.UNAVAILABLE,
    "entity-disabled": Outcome.UNAVAILABLE,
    "internal-error": Outcome.UNAVAILABLE,
    "connection:forced": Outcome.UNAVAILABLE,
    "link:detach-forced": Outcome.UNAVAILABLE,
    "socket-error": Outcome.UNAVAILABLE,
}


def condition_outcome(condition: object) -> Outcome | None:
    """The outcome of an AMQP error condition (``"amqp:not-found"``, ``b"..."``, ``"not-found"``).

    Returns:
        None for an unknown or missing condition.
    """
    if isinstance(condition, (bytes, bytearray)):
        condition = bytes(condition).decode("utf-8", "replace")
    if not isinstance(condition, str) or not condition:
        return None
    condition = condition.strip().lower()
    found = _CONDITIONS.get(condition)
    if found is None and ":" in condition:
        found = _CONDITIONS.get(condition.partition(":")[2])
    return found


def status_outcome(status: int | None) -> Outcome | None:
    """The outcome of an HTTP-like status code of a management or token request."""
    if status is None:
        return None
    if status == 408:
        return Outcome.TIMEOUT
    if status == 413:
        return Outcome.TOO_LARGE
    if status in (401, 403):
        return Outcome.CREDENTIALS
    if status in (400, 404, 409, 410):
        return Outcome.REJECTED
    if status == 429 or status >= 500:
        return Outcome.UNAVAILABLE
    return None


_STATUS_TEXT = re.compile(r"(?i)status[ _]code:?\s*'?(\d{3})\b")


def walk(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps (``inner_exception``, ``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo and len(seen) < 12:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for nxt in (getattr(current, "inner_exception", None), current.__cause__,
                    current.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def find_status_code(exc: BaseException) -> int | None:
    """A status code carried by ``exc`` or what it wraps (attribute, else its text)."""
    for item in walk(exc):
        value = getattr(item, "status_code", None)
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("ascii", "replace")
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    for item in walk(exc):
        match = _STATUS_TEXT.search(str(item))
        if match:
            return int(match.group(1))
    return None


def builtin_outcome(exc: BaseException) -> Outcome | None:
    """The outcome of a built-in exception raised through an SDK, or None."""
    # TimeoutError is an OSError: test it first.
    if isinstance(exc, TimeoutError):
        return Outcome.TIMEOUT
    if isinstance(exc, (OSError, EOFError)):
        return Outcome.UNAVAILABLE
    if isinstance(exc, (ValueError, TypeError)):
        # Client-side validation (a message or batch too large, a bad argument).
        return Outcome.REJECTED
    return None


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a connection the namespace refused.

    Nothing was sent, and the namespace said no now: a sender fails over at once
    instead of retrying it. A connection dropped or reset after it was open is not a
    refusal (its immediate retry may well work).
    """
    return any(isinstance(item, ConnectionRefusedError) for item in walk(exc))


#: getaddrinfo's "no such name" answers (a temporary failure, EAI_AGAIN, is an outage).
_NO_SUCH_HOST = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)}
_NO_SUCH_HOST_TEXT = re.compile(
    r"(?i)name or service not known|nodename nor servname|no address associated with hostname")


def _unresolved(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the host name does not resolve. The SDKs
    keep only the resolver's text in some of their errors: that is read too."""
    return any((isinstance(item, socket.gaierror) and item.errno in _NO_SUCH_HOST)
               or bool(_NO_SUCH_HOST_TEXT.search(str(item))) for item in walk(exc))


#: What to check when a namespace refuses the credentials.
CHECK_CREDENTIALS = ("check the key (or the SAS policy's rights: Send, Listen, Manage) "
                     "or the identity's role assignment on the namespace")
#: What to check when the namespace's host name does not resolve.
CHECK_HOST = "check the host name"


def _detail(exc: BaseException, secrets: Iterable[str]) -> str:
    text = " ".join(str(exc).split()) or "no details"
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = redact(text)
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 3] + "..."
    return f"{type(exc).__name__}: {text}"


def build_error(outcome: Outcome, exc: BaseException, *, namespace: str, action: str,
                secrets: Iterable[str] = ()) -> GatewayError:
    """The project's error for ``outcome``, with a one-line redacted message.

    Args:
        outcome: what the failure means.
        exc: the SDK's exception (its type and text are quoted, secrets removed).
        namespace: the namespace's name as the gateway knows it.
        action: what was attempted, e.g. ``"send to 'orders'"``.
        secrets: literal values (keys, signatures) to remove from the text.
    """
    detail = _detail(exc, secrets)
    where = f"{action} on namespace {namespace!r}"
    if outcome is Outcome.CREDENTIALS:
        return NamespaceMisconfigured(
            f"{where} failed: the namespace refused the credentials, it is unusable; "
            f"{CHECK_CREDENTIALS} ({detail})", namespace=namespace)
    if outcome is Outcome.UNAVAILABLE and _unresolved(exc):
        return NamespaceMisconfigured(
            f"{where} failed: the namespace's host name does not resolve, it is unusable; "
            f"{CHECK_HOST} ({detail})", namespace=namespace)
    if outcome is Outcome.UNAVAILABLE and _refused(exc):
        return NamespaceRefused(f"{where} failed: the namespace refused the connection "
                                f"({detail})", namespace=namespace)
    if outcome is Outcome.UNAVAILABLE:
        return NamespaceUnavailable(f"{where} failed: the namespace is unavailable ({detail})",
                                    namespace=namespace)
    if outcome is Outcome.TIMEOUT:
        return OperationTimeout(
            f"{where} timed out: the outcome is unknown, a retry may deliver a duplicate "
            f"({detail})", namespace=namespace)
    if outcome is Outcome.LOCK_LOST:
        return MessageRejected(
            f"{where} failed: lock lost (expired, or settled already); do not retry, the "
            f"message is delivered again ({detail})")
    if outcome is Outcome.SESSION_LOCK_LOST:
        return SessionLockLost(
            f"{where} failed: the session's lock is lost (it expired, or another receiver "
            f"took the session); accept the session again ({detail})")
    if outcome is Outcome.OWNERSHIP_LOST:
        return OwnershipLost(
            f"{where} failed: a reader with a higher owner level took the partition; stop "
            f"reading it ({detail})")
    if outcome is Outcome.TOO_LARGE:
        return MessageTooLarge(f"{where} was refused for good: too large ({detail})")
    return MessageRejected(f"{where} was refused for good ({detail})")
