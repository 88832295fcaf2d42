"""Collecting a :class:`GatewayStatus`: probe both namespaces, read the roles, the durable
queue and the checkpoint store, without writing any of them.

Each namespace is probed on a transport of its own (opened for the probe, closed
after it), bounded by a deadline: a hung namespace is an outage too, and a probe that
gets no answer says so instead of holding up the page. The queue file is read on a
read-only connection; the roles file and the checkpoint store are only read. A
:class:`StatusReader` keeps the last status for ``max_age`` seconds and lets
concurrent callers share one collection, so a scraper polling ``/readyz`` does not
multiply the probes.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio.to_thread

from durable_queue import read_stats, why_not_writable
from gateway.consumer import CheckpointStore
from gateway.geo import GatewayConfig, NamespaceConfig, default_state_dir, open_transport
from gateway.observability._partitions import consumer_status
from gateway.observability._status import (
    Backlog,
    ConsumerStatus,
    GatewayStatus,
    NamespaceHealth,
    QueueHealth,
)
from gateway.stores import RoleStore
from gateway.transports import ControlFile, Transport, namespace_files
from replication import GatewayError, MessageRejected, NamespaceMisconfigured, TransportError

__all__ = ["DEFAULT_PROBE_DEADLINE", "StatusReader", "StoreLike", "collect_status"]

logger = logging.getLogger("geogateway.observability")

DEFAULT_PROBE_DEADLINE = 2.0
"""Seconds a namespace has to answer a probe: the initial send deadline of the policy."""

#: The transport module each kind of Azure namespace needs (imported off the loop).
_SDK_MODULES = {"servicebus": "gateway.transports.servicebus",
                "eventhubs": "gateway.transports.eventhubs"}

StoreLike = CheckpointStore | str | os.PathLike[str]
"""A checkpoint store: an open one (the caller closes it), or a SQLite file's path."""


async def collect_status(
    config: GatewayConfig,
    *,
    checkpoint_store: StoreLike | None = None,
    consumer_group: str = "$Default",
    probe_deadline: float = DEFAULT_PROBE_DEADLINE,
    clock: Callable[[], float] = time.time,
    late: set[asyncio.Task[None]] | None = None,
) -> GatewayStatus:
    """Look at the gateway of ``config`` once (see the module docstring).

    A probe of an Azure namespace that has not answered at the deadline is reported
    as ``no answer`` but not cancelled (an SDK client cancelled while it opens can
    leave its socket open): it ends within the transport's own ``probe_timeout``, and
    its transport is closed then.

    Args:
        config: the gateway's configuration (namespaces, entity, queue, state dir).
        checkpoint_store: the partition consumers' store, for owners and lag.
        consumer_group: their consumer group.
        probe_deadline: seconds each namespace has to answer its probe.
        clock: wall-clock time, for ages.
        late: where to leave the probes still running at the deadline (each closes its
            transport when it ends); ``None``: wait for them before returning, so that
            nothing is left running.
    """
    names = (config.primary.name, config.secondary.name)
    roles, role_note = await anyio.to_thread.run_sync(_roles, config, names)
    running: set[asyncio.Task[None]] = set() if late is None else late
    probes = await asyncio.gather(*(
        _probe(ns, preferred, roles.get(ns.name, "unknown"), config, probe_deadline, running)
        for ns, preferred in ((config.primary, "primary"), (config.secondary, "secondary"))))
    queue = None
    if config.durable_queue is not None:
        queue = await anyio.to_thread.run_sync(_queue, config.durable_queue.path, clock())
    consumers = None
    if checkpoint_store is not None:
        consumers = await _consumers(checkpoint_store, config, names, consumer_group, clock())
    status = GatewayStatus(
        entity=config.entity, mode=config.policy.mode.value, checked_at=clock(),
        namespaces=tuple(probes), queue=queue, consumers=consumers,
        notes=(role_note,) if role_note else (),
    )
    if late is None and running:
        await asyncio.wait(running)
    return status


def _roles(config: GatewayConfig, names: tuple[str, str]) -> tuple[dict[str, str], str | None]:
    store = RoleStore.of_pair(config.state_dir or default_state_dir(), *names)
    try:
        state = store.load(*names)
    except GatewayError as exc:
        return {}, str(exc)
    note = None if store.path.exists() else (
        f"no role state at {store.path} yet: the primary is active until a sender fails over")
    return {state.active: "active", state.standby: "standby"}, note


def _kind(ns: NamespaceConfig) -> str:
    return "local" if ns.is_local else ns.kind


async def _probe(ns: NamespaceConfig, preferred: str, role: str, config: GatewayConfig,
                 deadline: float, late: set[asyncio.Task[None]]) -> NamespaceHealth:
    def health(state: str, reason: str | None = None,
               seconds: float | None = None) -> NamespaceHealth:
        return NamespaceHealth(name=ns.name, preferred=preferred, url=ns.url, kind=_kind(ns),
                               role=role, state=state, reason=reason, probe_seconds=seconds)

    if ns.is_local:
        # A probe would create a missing namespace file (as a sender would); a status
        # page only looks: without a file, the control file says whether it is up.
        try:
            absent = await anyio.to_thread.run_sync(_absent, ns, config.data_dir)
        except GatewayError as exc:
            return health("error", str(exc))
        if absent is not None:
            return health(*absent)
    else:
        # The SDK's first import takes seconds: not on the event loop, which serves
        # /healthz meanwhile, nor inside the probe's deadline.
        await anyio.to_thread.run_sync(importlib.import_module, _SDK_MODULES[ns.kind])
    try:
        transport, owned = open_transport(ns, data_dir=config.data_dir)
    except GatewayError as exc:
        return health("error", str(exc))
    started = time.monotonic()
    probe = asyncio.ensure_future(transport.probe())
    await asyncio.wait({probe}, timeout=deadline)
    took = round(time.monotonic() - started, 3)
    if not probe.done():
        if ns.is_local:
            probe.cancel()  # a local probe waits without a socket: cancelling is safe
        finishing = asyncio.ensure_future(_finish(probe, transport if owned else None))
        late.add(finishing)
        finishing.add_done_callback(late.discard)
        return health("no answer", f"no answer within {deadline:g} s", took)
    if owned:
        await _close(transport.aclose)
    error = probe.exception()
    if error is None:
        return health("up", None, took)
    if isinstance(error, NamespaceMisconfigured):  # its key, rights or host: not an outage
        return health("refused", str(error), took)
    if isinstance(error, TransportError):
        return health("down", str(error), took)
    if isinstance(error, MessageRejected):  # it answered, and refuses this client for good
        return health("refused", str(error), took)
    if isinstance(error, GatewayError):
        return health("error", str(error), took)
    raise error


async def _finish(probe: asyncio.Future[None], transport: Transport | None) -> None:
    """Let a probe past its deadline end, then close its transport."""
    with contextlib.suppress(asyncio.CancelledError, GatewayError, OSError):
        await probe
    if transport is not None:
        await _close(transport.aclose)


def _absent(ns: NamespaceConfig, data_dir: Path | None) -> tuple[str, str | None] | None:
    """``None`` when the local namespace's file exists, else its state from the control
    file (up, down, no answer) and why."""
    path, control = namespace_files(ns.local_name, data_dir)
    if os.path.exists(path):
        return None
    state = ControlFile(control).read()
    if state.down:
        return "down", f"{ns.name} is taken down (geogateway namespace down)"
    if state.hang:
        return "no answer", f"{ns.name} hangs (geogateway namespace faults --hang)"
    return "up", None


async def _close(aclose: Callable[[], Awaitable[None]]) -> None:
    try:
        await asyncio.wait_for(aclose(), DEFAULT_PROBE_DEADLINE)
    except (asyncio.TimeoutError, GatewayError, OSError) as exc:
        logger.info("closing a probe's transport: %s", exc)


def _queue(path: Path, now: float) -> QueueHealth:
    reason = why_not_writable(path)
    if not path.exists():
        return QueueHealth(path=str(path), exists=False, writable=reason is None, reason=reason)
    try:
        stats = read_stats(path)
    except GatewayError as exc:
        return QueueHealth(path=str(path), exists=True, writable=False, reason=str(exc))
    backlog = tuple(
        Backlog(destination=d.destination, waiting=d.count, bytes=d.bytes,
                oldest_age_seconds=None if d.oldest_enqueued_at is None
                else round(max(0.0, now - d.oldest_enqueued_at), 3),
                dead_letters=d.dead_letters, buffered_for=d.owner)
        for d in stats.destinations)
    return QueueHealth(path=str(path), exists=True, writable=reason is None, reason=reason,
                       destinations=backlog)


async def _consumers(store: StoreLike, config: GatewayConfig, names: tuple[str, str],
                     group: str, now: float) -> ConsumerStatus:
    where = getattr(store, "path", None) or type(store).__name__
    if not isinstance(store, CheckpointStore):
        where = os.fspath(store)
    try:
        if isinstance(store, CheckpointStore):
            found = await consumer_status(store, names, entity=config.entity,
                                          consumer_group=group, data_dir=config.data_dir,
                                          now=now)
        else:
            from gateway.consumer import SqliteCheckpointStore

            opened = await anyio.to_thread.run_sync(
                lambda: SqliteCheckpointStore(where, read_only=True, lock_timeout=1.0))
            async with opened:
                found = await consumer_status(opened, names, entity=config.entity,
                                              consumer_group=group, data_dir=config.data_dir,
                                              now=now)
    except GatewayError as exc:
        return ConsumerStatus(store=str(where), consumer_group=group, error=str(exc))
    return ConsumerStatus(store=str(where), consumer_group=group, namespaces=tuple(found))


class StatusReader:
    """Collects the status of one configuration, at most once per ``max_age`` seconds.

    Concurrent callers of :meth:`status` share the collection in progress; a status
    younger than ``max_age`` is returned as it is.

    Args:
        config: the gateway's configuration.
        checkpoint_store: the partition consumers' store (an open store, or a SQLite
            file opened read-only for each collection), for owners and lag.
        consumer_group: their consumer group.
        probe_deadline: seconds each namespace has to answer a probe.
        max_age: seconds a status is reused.
        clock: wall-clock time.
    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        checkpoint_store: StoreLike | None = None,
        consumer_group: str = "$Default",
        probe_deadline: float = DEFAULT_PROBE_DEADLINE,
        max_age: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not probe_deadline > 0 or max_age < 0:
            raise GatewayError("probe_deadline must be > 0 and max_age >= 0")
        self.config = config
        self._store = checkpoint_store
        self._group = consumer_group
        self._deadline = probe_deadline
        self._max_age = max_age
        self._clock = clock
        self._last: tuple[float, GatewayStatus] | None = None
        self._running: asyncio.Future[GatewayStatus] | None = None
        #: Probes past their deadline, still ending (see :func:`collect_status`).
        self.late: set[asyncio.Task[None]] = set()

    async def status(self) -> GatewayStatus:
        """The current status: a fresh one, or one younger than ``max_age``."""
        if self._last is not None and time.monotonic() - self._last[0] <= self._max_age:
            return self._last[1]
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._collect())
        # Shielded: one caller going away (a client that hung up) does not cancel the
        # collection the others wait for.
        return await asyncio.shield(self._running)

    async def aclose(self) -> None:
        """Wait for the probes still ending (each within its transport's probe timeout)."""
        if self.late:
            await asyncio.wait(set(self.late))

    async def _collect(self) -> GatewayStatus:
        status = await collect_status(
            self.config, checkpoint_store=self._store, consumer_group=self._group,
            probe_deadline=self._deadline, clock=self._clock, late=self.late)
        self._last = (time.monotonic(), status)
        return status
