"""Pure routing decisions: where a send goes, what is buffered, what may replay.

No I/O here: the sender driver asks these functions what to do, does it, and
feeds the results back (the shape of tenacity's ``iter()`` and its loops).

Buffered messages are kept per *destination*: ``"<namespace>/<entity>"`` for a
copy that belongs to one namespace (active mode), ``"*/<entity>"`` for a message
that may go to whichever namespace is active when it replays (passive mode).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from replication._errors import (
    MessageRejected,
    NamespaceRefused,
    OperationTimeout,
    TransportError,
)
from replication._policy import Mode
from replication._roles import RoleState

__all__ = [
    "ANY_NAMESPACE",
    "Failure",
    "SendPlan",
    "classify",
    "destination",
    "parse_destination",
    "plan_send",
    "replayable",
    "retry_in_namespace",
    "should_fail_back",
]

ANY_NAMESPACE = "*"
"""The namespace part of a durable queue destination that whichever namespace comes back first
may take (``*/orders``)."""


class Failure(enum.Enum):
    """What an error means for routing."""

    #: The namespace is unreachable: retry, then fail over or buffer.
    TRANSIENT = "transient"
    #: The namespace refused at once (connection refused, taken down): nothing was
    #: sent, and retrying it only delays the failover; fail over or buffer now.
    REFUSED = "refused"
    #: The outcome is unknown (the message may have landed): like TRANSIENT, and
    #: the receive side's de-duplication removes a copy that landed twice.
    UNKNOWN_OUTCOME = "unknown_outcome"
    #: The namespace refused the message for good: raise it to the caller.
    PERMANENT = "permanent"
    #: Not a gateway error at all (a bug, a cancellation): propagate.
    OTHER = "other"


def classify(exc: BaseException) -> Failure:
    """Map an exception onto what routing does with it."""
    if isinstance(exc, OperationTimeout):
        return Failure.UNKNOWN_OUTCOME
    if isinstance(exc, NamespaceRefused):
        return Failure.REFUSED
    if isinstance(exc, TransportError):
        return Failure.TRANSIENT
    if isinstance(exc, MessageRejected):
        return Failure.PERMANENT
    return Failure.OTHER


def retry_in_namespace(exc: BaseException) -> bool:
    """Whether a send that failed with ``exc`` is retried on the same namespace.

    A transient failure (a dropped connection, a lost reply) is retried there, so a
    single blip neither fails over nor swaps the roles. A refusal is not: the namespace
    already said no, and the send goes to the other one in the same round trip.
    """
    return classify(exc) in (Failure.TRANSIENT, Failure.UNKNOWN_OUTCOME)


def destination(namespace: str, entity: str) -> str:
    """The durable queue destination for ``entity`` on ``namespace`` (or ``"*"``)."""
    return f"{namespace}/{entity}"


def parse_destination(value: str) -> tuple[str, str]:
    """Split a destination into ``(namespace, entity)``; namespace may be ``"*"``."""
    namespace, sep, entity = value.partition("/")
    if not sep or not namespace or not entity:
        raise ValueError(f"not a destination: {value!r} (expected 'namespace/entity')")
    return namespace, entity


@dataclass(frozen=True)
class SendPlan:
    """What one send does before any I/O.

    ``attempt``: namespaces to send to, in order (passive: one after the other until
    one takes it; active: all of them). ``buffer``: destinations that take the
    message straight into the durable queue, without an attempt.
    """

    attempt: tuple[str, ...]
    buffer: tuple[str, ...]


def plan_send(
    *,
    mode: Mode,
    roles: RoleState,
    entity: str,
    down: Collection[str],
    backlog: Collection[str],
) -> SendPlan:
    """Decide where a send goes.

    Args:
        mode: the replication mode.
        roles: which namespace is active.
        entity: the queue or partitioned entity.
        down: namespaces known to be down (a probe will bring them back).
        backlog: destinations that still have buffered messages; new messages for
            them join the buffer so that each destination stays FIFO.
    """
    if mode is Mode.PASSIVE:
        anywhere = destination(ANY_NAMESPACE, entity)
        if anywhere in backlog:
            return SendPlan(attempt=(), buffer=(anywhere,))
        targets = tuple(ns for ns in roles.order if ns not in down)
        return SendPlan(attempt=targets, buffer=() if targets else (anywhere,))
    attempt: list[str] = []
    buffer: list[str] = []
    for ns in (roles.preferred, roles.standby_preferred):
        dest = destination(ns, entity)
        if ns in down or dest in backlog:
            buffer.append(dest)
        else:
            attempt.append(ns)
    return SendPlan(attempt=tuple(attempt), buffer=tuple(buffer))


def replayable(
    destinations: Iterable[str], *, namespaces: Collection[str], down: Collection[str]
) -> list[str]:
    """The destinations whose buffered messages can be replayed now.

    A namespace's own destination needs that namespace up; ``"*/entity"`` needs any.
    """
    any_up = any(ns not in down for ns in namespaces)
    ready = []
    for dest in destinations:
        namespace, _ = parse_destination(dest)
        if (namespace == ANY_NAMESPACE and any_up) or (
            namespace in namespaces and namespace not in down
        ):
            ready.append(dest)
    return ready


def should_fail_back(*, failback: bool, roles: RoleState, down: Collection[str]) -> bool:
    """Whether the preferred primary should become active again now."""
    return failback and roles.failed_over and roles.preferred not in down
