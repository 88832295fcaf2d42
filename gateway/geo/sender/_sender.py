"""The sender core (async). ``GeoSender`` in ``gateway.geo._client`` drives this same core.

Decisions come from the pure functions in :mod:`replication`; this module routes each
send (passive failover and hedging, active fan-out) over the pieces that do the I/O:
the two namespaces (``_namespaces``: retried sends within their deadlines, roles,
probes; ``_hedge`` runs one send's attempts), the durable queue (``_buffering``) and
the background recovery rounds (``_recovery``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

import anyio

from durable_queue import DurableQueue
from gateway._support.blocking import run_blocking
from gateway.geo._factory import NamespaceLike, check_entity, default_state_dir
from gateway.geo._hooks import GatewayHooks, emit
from gateway.geo._tracing import find_tracer, messaging_system
from gateway.geo.sender._buffering import BacklogCleared, Buffer
from gateway.geo.sender._namespaces import NamespacePair
from gateway.geo.sender._recovery import Recovery, ReplayReport
from gateway.geo.sender._roles import RolesTarget
from gateway.geo.sessions import SessionStamper, needs_stamp
from replication import (
    ANY_NAMESPACE,
    Message,
    Mode,
    NamespaceUnavailable,
    ReplicationPolicy,
    RoleState,
    TransportError,
    destination,
    parse_destination,
    plan_send,
)

__all__ = ["AsyncGeoSender", "MessageLike", "SendResult"]

logger = logging.getLogger("geogateway")

MessageLike = Message | bytes | str


@dataclass(frozen=True, kw_only=True)
class SendResult:
    """What happened to one ``send`` / ``send_batch``.

    ``namespaces``: where the messages were accepted now. ``buffered``: durable queue
    destinations they were written to for later replay. Either may be empty, not both.
    ``failed_over``: the messages went to a namespace other than the one active when
    the send began (it failed, refused, is unusable, or did not answer in time); the
    roles were swapped, by this send or by one at the same time. ``hedged``: passive
    mode sent the batch to the other namespace too, because the one before it had not
    answered within its deadline (both may hold a copy; receivers remove the second).
    ``unanswered``: namespaces that had not answered within their deadline when the
    send returned (the outcome there is unknown: the copy may still land).
    """

    message_ids: tuple[str, ...]
    namespaces: tuple[str, ...]
    buffered: tuple[str, ...]
    failed_over: bool = False
    hedged: bool = False
    unanswered: tuple[str, ...] = ()


def _coerce(message: MessageLike) -> Message:
    return message if isinstance(message, Message) else Message(message)


class AsyncGeoSender:
    """Sends to a primary and a secondary namespace, passive or active.

    Args:
        primary: ``local://NAME``, a connection string, a ``NamespaceConfig`` or a
            ``Transport``.
        secondary: the same for the secondary namespace.
        entity: the queue or partitioned entity to send to.
        mode: ``"passive"`` (send to the active one, fail over) or ``"active"`` (both).
        durable_queue: a path or a ``DurableQueue``: where messages wait while the
            namespaces they belong to are down. ``None``: raise instead.
        policy: retry bounds, failback, probe interval and the per-operation
            deadlines after which a send is hedged (``mode`` and ``failback`` given
            here override it).
        hooks: observability callbacks (``on_sent``, ``on_failover``, ``on_buffered``
            ...); a hook that traces (``gateway.observability.Tracing``) traces each
            send and replay.
        data_dir: the directory of local namespaces (default ``$GEOGATEWAY_DATA_DIR``).
        state_dir: where role state and the sessions' next positions are persisted
            (default ``$GEOGATEWAY_STATE_DIR``).
        roles_store: keep the roles on PostgreSQL instead, shared by every sender of a
            fleet configured with the same pair: a DSN, a ``psycopg_pool.ConnectionPool``
            or a ``PostgresRoleStore`` (the caller closes a store or pool it passed).
            Role changes are compare-and-swaps, and the recovery task reads the roles
            again every ``refresh_interval`` (1 s), so a failover made by one sender is
            followed by all.
        recovery: run the background probe/replay/failback task.
    """

    def __init__(
        self,
        *,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        entity: str,
        mode: Mode | str | None = None,
        durable_queue: str | os.PathLike[str] | DurableQueue | None = None,
        policy: ReplicationPolicy | None = None,
        failback: bool | None = None,
        hooks: GatewayHooks | Iterable[GatewayHooks] = (),
        data_dir: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        roles_store: RolesTarget | None = None,
        recovery: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        policy = policy or ReplicationPolicy()
        self.policy = replace(
            policy,
            mode=Mode.parse(mode) if mode is not None else policy.mode,
            failback=policy.failback if failback is None else failback,
        )
        self.entity = check_entity(entity)
        self._hooks = [hooks] if isinstance(hooks, GatewayHooks) else list(hooks)
        self._sleep = sleep or anyio.sleep
        self._namespaces = NamespacePair(
            primary, secondary, entity=self.entity, retry=self.policy.retry,
            deadlines=self.policy.deadlines, hooks=self._hooks, data_dir=data_dir,
            state_dir=state_dir, clock=clock, sleep=self._sleep, roles_store=roles_store,
        )
        try:
            self._buffer = Buffer(durable_queue, transports=self._namespaces.transports,
                                  entity=self.entity, hooks=self._hooks)
        except BaseException:
            self._namespaces.role_keeper.close()  # a pool opened for the roles
            raise
        self._tracer = find_tracer(self._hooks)
        self._system = messaging_system(next(iter(self._namespaces.transports.values())))
        self._recovery = Recovery(self._namespaces, self._buffer,
                                  failback=self.policy.failback, hooks=self._hooks,
                                  tracer=self._tracer, system=self._system)
        self._recover = recovery
        names = list(self._namespaces.transports)
        # Each message of a session is stamped with its position (gateway.geo.sessions._stamp).
        self._stamper = SessionStamper(
            Path(state_dir or default_state_dir()) / f"session-positions-{names[0]}-{names[1]}.db",
            entity=self.entity)
        self._stamp_limiter = anyio.CapacityLimiter(1)
        # A plain asyncio task, not a task group: start() and aclose() may run in
        # different tasks (the sync driver calls each through its portal).
        self._task: asyncio.Task[None] | None = None
        self._warmed = False
        self._closed = False

    # -- public API ---------------------------------------------------------------

    @property
    def roles(self) -> RoleState:
        """Which namespace is active now."""
        return self._namespaces.roles

    @property
    def down(self) -> frozenset[str]:
        """Namespaces currently marked down (skipped until a probe succeeds)."""
        return frozenset(self._namespaces.down)

    @property
    def backlog(self) -> frozenset[str]:
        """Durable queue destinations of this entity that still hold messages."""
        return frozenset(self._buffer.pending)

    async def __aenter__(self) -> AsyncGeoSender:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Read the roles from a shared (PostgreSQL) roles store, connecting to it off
        the loop; start the background recovery task (probe, replay, failback), and
        open both namespaces' connections in the background, so that a failover does
        not wait for the standby's.

        Raises:
            ConfigError: the roles store cannot be reached or used (its server is
                unreachable, refuses the credentials, ...).
        """
        if self._closed:
            return
        await self._namespaces.role_keeper.ready()
        loop = asyncio.get_running_loop()
        if self._recover and self._task is None:
            self._task = loop.create_task(self._recovery_loop())
        if not self._warmed:
            self._warmed = True
            self._namespaces.prepare_soon(*self._namespaces.transports)

    async def send(self, message: MessageLike) -> SendResult:
        """Send one message. See :meth:`send_batch`."""
        return await self.send_batch([message])

    async def send_batch(self, messages: Sequence[MessageLike]) -> SendResult:
        """Send messages as one batch (all land in the same place).

        Returns once the messages were accepted by a namespace, or are on the client's
        disk in the durable queue. A namespace that has not answered within its
        deadline is not waited for: passive mode hedges to the other namespace, active
        mode buffers that namespace's copy (see :class:`SendResult`).

        A batch a namespace refuses for size is sent to it again in halves, in order
        (down to single messages), so a batch is refused only for a message that is
        too large on its own.

        Raises:
            MessageTooLarge: a message is over a namespace's limit, or larger than the
                namespace it would be buffered for takes (never buffered);
                ``message_id`` names it and ``sent`` counts the messages before it
                that the namespace took (0 when the message was found too large
                before anything was sent).
            MessageRejected: a namespace refused them for good.
            GatewayError: a namespace failed with an error that is neither transient
                nor a refusal (a ``ConfigError`` ...): raised as a refusal is (in active
                mode even when the other namespace took its copy), never buffered.
            NamespaceUnavailable: no namespace took them and no durable queue is set.
            QueueFull: they had to be buffered and the durable queue is full.
            GatewayError: messages of a session could not be stamped with their
                positions (the positions file under ``state_dir`` could not be
                written); nothing was sent.
        """
        if self._closed:
            raise RuntimeError("this sender is closed")
        batch = [_coerce(m) for m in messages]
        if not batch:
            return SendResult(message_ids=(), namespaces=(), buffered=())
        await self._namespaces.role_keeper.ready()  # without start(): the first send
        if not self._hooks:
            return await self._route(batch)
        return await self._observed(batch)

    async def _observed(self, batch: list[Message]) -> SendResult:
        # The send reported to the hooks (on_sent), and traced when a hook traces.
        started = time.perf_counter()
        result: SendResult | None = None
        error: Exception | None = None
        try:
            if self._tracer is None:
                result = await self._route(batch)
            else:
                with self._tracer.send(system=self._system, entity=self.entity,
                                       messages=batch) as trace:
                    result = await self._route(list(trace.messages))
                    trace.finished(namespaces=result.namespaces, buffered=result.buffered,
                                   failed_over=result.failed_over, hedged=result.hedged)
            return result
        except Exception as exc:
            error = exc
            raise
        finally:
            if result is not None or error is not None:
                emit(self._hooks, "on_sent", entity=self.entity, count=len(batch),
                     namespaces=result.namespaces if result else (),
                     buffered=result.buffered if result else (),
                     failed_over=result.failed_over if result else False,
                     seconds=time.perf_counter() - started, error=error)

    async def _route(self, batch: list[Message]) -> SendResult:
        if any(needs_stamp(m) for m in batch):
            batch = await run_blocking(functools.partial(self._stamper.stamp, batch),
                                       self._stamp_limiter)
        while True:
            # The roles this send is planned with: a role change it leads to is made
            # from them (not from the roles when it ends: other sends may have changed
            # them meanwhile).
            roles = self._namespaces.roles
            plan = plan_send(
                mode=self.policy.mode,
                roles=roles,
                entity=self.entity,
                down=self._namespaces.down,
                backlog=self._buffer.pending,
            )
            try:
                if self.policy.mode is Mode.PASSIVE:
                    return await self._send_passive(batch, plan.attempt, plan.buffer,
                                                    roles)
                return await self._send_active(batch, plan.attempt, plan.buffer)
            except BacklogCleared:
                continue  # the replayer caught up while we waited: plan again

    async def replay(
        self, *, progress: Callable[[str, int], None] | None = None
    ) -> ReplayReport:
        """Probe down namespaces and replay what can be replayed now.

        A replay running in the background is waited for first, so no message is
        sent twice by this process. Messages other processes buffered in the same
        queue file for this entity are replayed too.

        Args:
            progress: called as ``progress(destination, replayed_so_far)`` after each
                batch, for long replays.

        Returns:
            How many messages were sent (a ``ReplayReport`` is that ``int``), and
            for each destination where messages still wait, how many and why.

        Raises:
            QueueCorrupt: the durable queue file is damaged; it was found before
                anything was sent or written. ``on_replay_failed`` is called too.
            ConfigError: the queue file holds this entity's messages for other
                namespaces (another data dir, another host); nothing was sent.
            DurableQueueError: the durable queue could not be read or written.
        """
        if self._closed:
            raise RuntimeError("this sender is closed")
        await self._namespaces.role_keeper.ready()
        return await self._recovery.round(progress, raise_errors=True)

    async def aclose(self) -> None:
        """Stop the recovery task, then close what this sender opened."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._namespaces.aclose()
        self._buffer.close()
        self._stamper.close()

    # -- sending --------------------------------------------------------------------

    async def _send_passive(
        self, batch: list[Message], attempt: Sequence[str], buffer: Sequence[str],
        roles: RoleState,
    ) -> SendResult:
        ids = tuple(m.message_id for m in batch)
        sent = await self._namespaces.send_hedged(batch, attempt, mode=Mode.PASSIVE,
                                                  planned=roles)
        outcome = sent.outcome
        if sent.accepted:
            return SendResult(
                message_ids=ids, namespaces=sent.accepted, buffered=(),
                failed_over=sent.failed_over, hedged=outcome.hedged,
                unanswered=outcome.overdue,
            )
        if outcome.permanent is not None:
            raise outcome.permanent
        dest = buffer[0] if buffer else destination(ANY_NAMESPACE, self.entity)
        # Planned to buffer only because of a backlog (nothing was attempted)? When
        # nothing was attempted because both namespaces are down and there is no
        # backlog (a put failed with QueueFull), buffer now: replanning would spin.
        await self._buffer.put(
            dest, batch, cause=outcome.last_error,
            while_backlog=not attempt and dest in self._buffer.pending,
        )
        return SendResult(message_ids=ids, namespaces=(), buffered=(dest,),
                          hedged=outcome.hedged, unanswered=outcome.overdue)

    async def _send_active(
        self, batch: list[Message], attempt: Sequence[str], buffer: Sequence[str]
    ) -> SendResult:
        ids = tuple(m.message_id for m in batch)
        attempt, buffered = list(attempt), []
        for dest in buffer:
            ns, _ = parse_destination(dest)
            if ns in self._namespaces.down:
                continue  # buffered below, with the copies that fail now
            try:
                await self._buffer.put(dest, batch, cause=None, while_backlog=True)
                buffered.append(dest)
            except BacklogCleared:
                attempt.append(ns)
        buffer = [d for d in buffer if d not in buffered]
        # Each namespace within its deadline; a copy that is not answered in time is
        # buffered for its namespace like a failed one (the attempt goes on).
        outcome = (await self._namespaces.send_hedged(batch, attempt, mode=Mode.ACTIVE)).outcome
        if outcome.permanent is not None:
            raise outcome.permanent
        accepted = outcome.accepted
        to_buffer = list(buffer)
        last = outcome.last_error
        for ns, exc in outcome.errors.items():
            if isinstance(exc, TransportError):
                to_buffer.append(destination(ns, self.entity))
        if self._buffer.queue is None and not accepted:
            raise last or NamespaceUnavailable(
                "both namespaces are down and no durable queue is configured",
                namespace=ANY_NAMESPACE,
            )
        for dest in to_buffer:
            if self._buffer.queue is None:
                logger.warning("copy for %s not buffered: no durable queue configured", dest)
                continue
            await self._buffer.put(dest, batch, cause=last)
            buffered.append(dest)
        return SendResult(message_ids=ids, namespaces=accepted, buffered=tuple(buffered),
                          unanswered=outcome.overdue)

    # -- recovery -------------------------------------------------------------------

    async def _recovery_loop(self) -> None:
        # Checked each round, not left to the cancellation alone: an SDK call can
        # swallow the cancel (turning it into a TransportError), and then only this
        # flag ends the loop that aclose() waits for.
        while not self._closed:
            try:
                await self._recovery.round()
            except Exception:  # keep recovering; the next round may succeed
                logger.exception("recovery round failed")
            await self._sleep(self.policy.probe_interval)
