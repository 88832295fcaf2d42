"""What ``/status``, ``/readyz`` and ``geogateway status`` report: frozen records.

A :class:`GatewayStatus` is one look at a gateway's configuration from outside: each
namespace's role and health, the durable queue's backlog, and, when a checkpoint
store is given, the partition owners and checkpoint lag. Its JSON form passes every
text through :func:`~gateway._support.secrets.redact`, so no key or token reaches a
page, whatever an error message held.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from gateway._support.secrets import redact
from gateway.observability._partitions import ConsumerNamespaceStatus

__all__ = ["Backlog", "ConsumerStatus", "GatewayStatus", "NamespaceHealth", "QueueHealth"]


@dataclass(frozen=True, kw_only=True)
class NamespaceHealth:
    """One namespace as a sender of this configuration sees it.

    Args:
        name: the name the gateway uses for it.
        preferred: ``"primary"`` or ``"secondary"``, as configured.
        url: where it is (``local://NAME``, ``sb://HOST``); never a key.
        kind: ``"local"``, ``"servicebus"`` or ``"eventhubs"``.
        role: ``"active"`` or ``"standby"`` from the roles store; ``"unknown"`` when
            the store cannot be read.
        state: ``"up"``; ``"down"`` (it refused: an outage, or taken down);
            ``"no answer"`` (no answer within the probe's deadline: a hung
            namespace); ``"refused"`` (it refuses this client: its key, the rights of
            its policy or role, its host name; the reason says what to check);
            ``"absent"`` (a local namespace whose file does not exist);
            ``"error"`` (the probe failed otherwise).
        reason: why it is not up, one line; ``None`` when it is.
        probe_seconds: how long the probe took.
    """

    name: str
    preferred: str
    url: str
    kind: str
    role: str
    state: str
    reason: str | None = None
    probe_seconds: float | None = None

    @property
    def usable(self) -> bool:
        """Whether a send to it can be expected to succeed now."""
        return self.state == "up"


@dataclass(frozen=True, kw_only=True)
class Backlog:
    """What waits in the durable queue for one destination (``namespace/entity``, or
    ``*/entity`` for whichever namespace comes back first)."""

    destination: str
    waiting: int
    bytes: int
    oldest_age_seconds: float | None
    dead_letters: int
    buffered_for: str | None = None


@dataclass(frozen=True, kw_only=True)
class QueueHealth:
    """The durable queue file: whether a put can be written, and its backlog.

    Args:
        path: the queue file.
        exists: whether the file exists (no file: nothing was ever buffered).
        writable: whether a put could be written now.
        reason: why not, one line; or why the backlog could not be read.
        destinations: the backlog per destination.
    """

    path: str
    exists: bool
    writable: bool
    reason: str | None = None
    destinations: tuple[Backlog, ...] = ()

    @property
    def waiting(self) -> int:
        """Messages waiting, over all destinations."""
        return sum(d.waiting for d in self.destinations)

    @property
    def oldest_age_seconds(self) -> float | None:
        """How long the oldest waiting message has waited (the data at risk)."""
        ages = [d.oldest_age_seconds for d in self.destinations if d.oldest_age_seconds is not None]
        return max(ages) if ages else None


@dataclass(frozen=True, kw_only=True)
class ConsumerStatus:
    """The partition owners and checkpoint lag of one consumer group, from its store.

    ``error`` says why the store could not be read (then ``namespaces`` is empty).
    """

    store: str
    consumer_group: str
    namespaces: tuple[ConsumerNamespaceStatus, ...] = ()
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class GatewayStatus:
    """One look at a gateway: namespaces, durable queue and consumers.

    Args:
        entity: the configured entity.
        mode: ``"passive"`` or ``"active"``.
        checked_at: when it was collected (seconds since the epoch).
        namespaces: the primary and the secondary.
        queue: the durable queue; ``None`` when none is configured.
        consumers: the consumer group; ``None`` when no checkpoint store is given.
    """

    entity: str
    mode: str
    checked_at: float
    namespaces: tuple[NamespaceHealth, ...]
    queue: QueueHealth | None = None
    consumers: ConsumerStatus | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def ready(self) -> bool:
        """At least one namespace is usable and the durable queue (if any) is writable."""
        return not self.not_ready

    @property
    def not_ready(self) -> list[str]:
        """Why it is not ready, one line each; empty when it is."""
        reasons = []
        if not any(ns.usable for ns in self.namespaces):
            reasons.append("no namespace is usable: " + "; ".join(
                f"{ns.name} {ns.state}" + (f" ({ns.reason})" if ns.reason else "")
                for ns in self.namespaces))
        if self.queue is not None and not self.queue.writable:
            reasons.append(f"the durable queue is not writable: {self.queue.reason}")
        return [redact(r) for r in reasons]

    @property
    def unusable(self) -> list[str]:
        """The namespaces that refuse this client (not an outage: a wrong key, missing
        rights, a host name that does not resolve), one line each with what to check."""
        return [redact(f"{ns.name} refused" + (f" ({ns.reason})" if ns.reason else ""))
                for ns in self.namespaces if ns.state == "refused"]

    def to_json(self) -> dict[str, Any]:
        """The status as JSON-ready data, every text redacted."""
        queue = None
        if self.queue is not None:
            q = self.queue
            queue = {
                "path": q.path, "exists": q.exists, "writable": q.writable, "reason": q.reason,
                "waiting": q.waiting, "bytes": sum(d.bytes for d in q.destinations),
                "dead_letters": sum(d.dead_letters for d in q.destinations),
                "oldest_age_seconds": q.oldest_age_seconds,
                "destinations": [vars(d).copy() for d in q.destinations],
            }
        consumers = None
        if self.consumers is not None:
            c = self.consumers
            consumers = {"store": c.store, "consumer_group": c.consumer_group,
                         "error": c.error, "namespaces": [n.as_json() for n in c.namespaces]}
        data = {
            "entity": self.entity, "mode": self.mode,
            "checked_at": dt.datetime.fromtimestamp(self.checked_at, dt.timezone.utc)
            .isoformat(timespec="milliseconds"),
            "ready": self.ready, "not_ready": self.not_ready, "unusable": self.unusable,
            "namespaces": [{**vars(ns), "usable": ns.usable} for ns in self.namespaces],
            "durable_queue": queue, "consumers": consumers, "notes": list(self.notes),
        }
        clean: dict[str, Any] = redacted(data)
        return clean


def redacted(value: Any) -> Any:
    """``value`` (JSON-ready data) with every string passed through ``redact``."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(v) for v in value]
    return value
