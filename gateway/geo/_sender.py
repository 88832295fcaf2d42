"""The sender core (async). ``GeoSender`` in ``gateway._support.portal`` drives this same core.

Decisions come from the pure functions in :mod:`replication`; this module does
the I/O they ask for: sends with tenacity retries, durable-queue writes, probes
and replays.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import anyio
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from durable_queue import DurableQueue, Replayer
from gateway.geo._buffering import check_size, owner_of
from gateway.geo._factory import NamespaceLike, check_entity, default_state_dir, open_transport
from gateway.geo._hooks import GatewayHooks, emit
from gateway.stores import RoleStore
from gateway.transports.base import Transport
from replication import (
    ANY_NAMESPACE,
    ConfigError,
    DurableQueueError,
    GatewayError,
    Message,
    MessageRejected,
    Mode,
    NamespaceUnavailable,
    QueueCorrupt,
    ReplicationPolicy,
    RoleState,
    TransportError,
    destination,
    parse_destination,
    plan_send,
    replayable,
    should_fail_back,
)

# How long aclose() waits for links being opened ahead of sends.
_PREPARE_WAIT = 5.0

__all__ = ["AsyncGeoSender", "MessageLike", "SendResult"]

logger = logging.getLogger("geogateway")

MessageLike = Message | bytes | str


@dataclass(frozen=True, kw_only=True)
class SendResult:
    """What happened to one ``send`` / ``send_batch``.

    ``namespaces``: where the messages were accepted now. ``buffered``: durable queue
    destinations they were written to for later replay. Either may be empty, not both.
    """

    message_ids: tuple[str, ...]
    namespaces: tuple[str, ...]
    buffered: tuple[str, ...]
    failed_over: bool = False


class _BacklogCleared(Exception):
    """A send waited to join a backlog that the replayer emptied meanwhile."""


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
        policy: retry bounds, failback and probe interval (``mode`` and ``failback``
            given here override it).
        hooks: observability callbacks.
        data_dir: the directory of local namespaces (default ``$GEOGATEWAY_DATA_DIR``).
        state_dir: where role state is persisted (default ``$GEOGATEWAY_STATE_DIR``).
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
        recovery: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        policy = policy or ReplicationPolicy()
        self.policy = ReplicationPolicy(
            mode=Mode.parse(mode) if mode is not None else policy.mode,
            failback=policy.failback if failback is None else failback,
            retry=policy.retry,
            probe_interval=policy.probe_interval,
        )
        self.entity = check_entity(entity)
        self._hooks = [hooks] if isinstance(hooks, GatewayHooks) else list(hooks)
        self._clock = clock
        self._sleep = sleep or anyio.sleep
        self._owned: list[Transport] = []
        self._transports: dict[str, Transport] = {}
        for ns in (primary, secondary):
            transport, owned = open_transport(ns, data_dir=data_dir)
            if transport.namespace in self._transports:
                raise ValueError(f"primary and secondary are both {transport.namespace!r}")
            self._transports[transport.namespace] = transport
            if owned:
                self._owned.append(transport)
        names = list(self._transports)
        self._roles_store = RoleStore(
            Path(state_dir or default_state_dir()) / f"roles-{names[0]}-{names[1]}.json"
        )
        self._roles = self._roles_store.load(names[0], names[1])
        self._queue_owned = durable_queue is not None and not isinstance(
            durable_queue, DurableQueue
        )
        self._queue = (
            DurableQueue(durable_queue)
            if durable_queue is not None and not isinstance(durable_queue, DurableQueue)
            else durable_queue
        )
        self._down: dict[str, float] = {}
        self._backlog: set[str] = self._existing_backlog()
        self._gates: dict[str, asyncio.Lock] = {}
        # One recovery round at a time (the background task and replay() calls):
        # two rounds would drain the same destination at once and send it twice.
        self._recovering: asyncio.Lock | None = None
        # Destinations whose replay hit a damaged queue file (or messages buffered
        # for other namespaces): sends that would be buffered behind them raise it.
        self._broken: dict[str, QueueCorrupt | ConfigError] = {}
        # Destinations whose owner (these namespaces) is recorded in the queue file.
        self._claimed: set[str] = set()
        self._owner = f"sender-{uuid.uuid4().hex[:12]}"
        self._recovery = recovery
        # A plain asyncio task, not a task group: start() and aclose() may run in
        # different tasks (the sync driver calls each through its portal).
        self._task: asyncio.Task[None] | None = None
        # Opening links ahead of sends (prepare_send); awaited, not cancelled, by aclose():
        # an SDK client cancelled halfway through opening can leave its socket open.
        self._preparing: set[asyncio.Task[None]] = set()
        self._warmed = False
        self._closed = False

    # -- public API ---------------------------------------------------------------

    @property
    def roles(self) -> RoleState:
        """Which namespace is active now."""
        return self._roles

    @property
    def down(self) -> frozenset[str]:
        """Namespaces currently marked down (skipped until a probe succeeds)."""
        return frozenset(self._down)

    @property
    def backlog(self) -> frozenset[str]:
        """Durable queue destinations of this entity that still hold messages."""
        return frozenset(self._backlog)

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
        """Start the background recovery task (probe, replay, failback), and open both
        namespaces' connections in the background, so that a failover does not wait
        for the standby's."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if self._recovery and self._task is None:
            self._task = loop.create_task(self._recovery_loop())
        if not self._warmed:
            self._warmed = True
            self._prepare_soon(*self._transports)

    async def send(self, message: MessageLike) -> SendResult:
        """Send one message. See :meth:`send_batch`."""
        return await self.send_batch([message])

    async def send_batch(self, messages: Sequence[MessageLike]) -> SendResult:
        """Send messages as one batch (all land in the same place).

        Returns once the messages were accepted by a namespace, or are on the client's
        disk in the durable queue.

        Raises:
            MessageRejected: a namespace refused them for good, or one is larger than
                the namespace it would be buffered for takes (never buffered).
            NamespaceUnavailable: no namespace took them and no durable queue is set.
            QueueFull: they had to be buffered and the durable queue is full.
        """
        if self._closed:
            raise RuntimeError("this sender is closed")
        batch = [_coerce(m) for m in messages]
        if not batch:
            return SendResult(message_ids=(), namespaces=(), buffered=())
        while True:
            plan = plan_send(
                mode=self.policy.mode,
                roles=self._roles,
                entity=self.entity,
                down=self._down,
                backlog=self._backlog,
            )
            try:
                if self.policy.mode is Mode.PASSIVE:
                    return await self._send_passive(batch, plan.attempt, plan.buffer)
                return await self._send_active(batch, plan.attempt, plan.buffer)
            except _BacklogCleared:
                continue  # the replayer caught up while we waited: plan again

    async def replay(self, *, progress: Callable[[str, int], None] | None = None) -> int:
        """Probe down namespaces and replay what can be replayed now; return the count.

        A replay running in the background is waited for first, so no message is
        sent twice by this process.

        Args:
            progress: called as ``progress(destination, replayed_so_far)`` after each
                batch, for long replays.

        Raises:
            QueueCorrupt: the durable queue file is damaged; the messages before
                the damage were sent. ``on_replay_failed`` is called too.
            ConfigError: the queue file holds this entity's messages for other
                namespaces (another data dir, another host); nothing was sent.
            DurableQueueError: the durable queue could not be read or written.
        """
        if self._closed:
            raise RuntimeError("this sender is closed")
        return await self._recover_once(progress, raise_errors=True)

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
        if self._preparing:
            _, late = await asyncio.wait(self._preparing, timeout=_PREPARE_WAIT)
            for task in late:
                task.cancel()
        for transport in self._owned:
            await transport.aclose()
        if self._queue is not None and self._queue_owned:
            self._queue.close()

    # -- sending --------------------------------------------------------------------

    async def _send_passive(
        self, batch: list[Message], attempt: Sequence[str], buffer: Sequence[str]
    ) -> SendResult:
        ids = tuple(m.message_id for m in batch)
        accepted, failed_over, last = await self._send_any(batch, attempt)
        if accepted is not None:
            return SendResult(
                message_ids=ids, namespaces=(accepted,), buffered=(), failed_over=failed_over
            )
        dest = buffer[0] if buffer else destination(ANY_NAMESPACE, self.entity)
        # Planned to buffer only because of a backlog (nothing was attempted)? When
        # nothing was attempted because both namespaces are down and there is no
        # backlog (a put failed with QueueFull), buffer now: replanning would spin.
        await self._buffer(
            dest, batch, cause=last, while_backlog=not attempt and dest in self._backlog
        )
        return SendResult(message_ids=ids, namespaces=(), buffered=(dest,))

    async def _send_any(
        self, batch: Sequence[Message], attempt: Sequence[str]
    ) -> tuple[str | None, bool, TransportError | None]:
        """Try namespaces in order until one takes the batch; swap roles if needed."""
        last: TransportError | None = None
        for ns in attempt:
            try:
                await self._send_to(ns, batch)
            except TransportError as exc:
                self._mark_down(ns, exc)
                last = exc
                continue
            failed_over = ns != self._roles.active
            if failed_over:
                self._set_roles(self._roles.swap(self._clock()))
            return ns, failed_over, last
        return None, False, last

    async def _send_active(
        self, batch: list[Message], attempt: Sequence[str], buffer: Sequence[str]
    ) -> SendResult:
        ids = tuple(m.message_id for m in batch)
        errors: dict[str, BaseException | None] = {}
        attempt, buffered = list(attempt), []
        for dest in buffer:
            ns, _ = parse_destination(dest)
            if ns in self._down:
                continue  # buffered below, with the copies that fail now
            try:
                await self._buffer(dest, batch, cause=None, while_backlog=True)
                buffered.append(dest)
            except _BacklogCleared:
                attempt.append(ns)
        buffer = [d for d in buffer if d not in buffered]

        async def one(ns: str) -> None:
            try:
                await self._send_to(ns, batch)
                errors[ns] = None
            except (TransportError, MessageRejected) as exc:
                errors[ns] = exc

        async with anyio.create_task_group() as tg:
            for ns in attempt:
                tg.start_soon(one, ns)
        rejected = [e for e in errors.values() if isinstance(e, MessageRejected)]
        if rejected:
            raise rejected[0]
        accepted = tuple(ns for ns in attempt if errors[ns] is None)
        to_buffer = list(buffer)
        last: TransportError | None = None
        for ns, exc in errors.items():
            if isinstance(exc, TransportError):
                self._mark_down(ns, exc)
                to_buffer.append(destination(ns, self.entity))
                last = exc
        if self._queue is None and not accepted:
            raise last or NamespaceUnavailable(
                "both namespaces are down and no durable queue is configured",
                namespace=ANY_NAMESPACE,
            )
        for dest in to_buffer:
            if self._queue is None:
                logger.warning("copy for %s not buffered: no durable queue configured", dest)
                continue
            await self._buffer(dest, batch, cause=last)
            buffered.append(dest)
        return SendResult(message_ids=ids, namespaces=accepted, buffered=tuple(buffered))

    async def _send_to(self, namespace: str, batch: Sequence[Message]) -> None:
        """Send with the retry policy: ``attempts`` tries at most, none begun after
        ``max_delay``, a random exponential backoff between them."""
        transport = self._transports[namespace]
        retry = self.policy.retry
        started = time.monotonic()
        try:
            # Most sends succeed at once: only one that failed pays for tenacity.
            await transport.send(self.entity, batch)
            return
        except TransportError:
            if retry.attempts <= 1 or time.monotonic() - started >= retry.max_delay:
                raise
        # The first backoff here, the later ones tenacity's: initial * 2**(n-1) before
        # attempt n + 1, as one AsyncRetrying over all the attempts would wait.
        await self._sleep(random.uniform(0, min(retry.initial_backoff, retry.max_backoff)))
        left = retry.max_delay - (time.monotonic() - started)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(retry.attempts - 1) | stop_after_delay(max(0.0, left)),
            wait=wait_random_exponential(multiplier=2 * retry.initial_backoff,
                                         max=retry.max_backoff),
            retry=retry_if_exception_type(TransportError),
            reraise=True,
            sleep=self._sleep,
        )
        await retrying(transport.send, self.entity, batch)

    async def _buffer(
        self,
        dest: str,
        batch: Sequence[Message],
        *,
        cause: BaseException | None,
        while_backlog: bool = False,
    ) -> None:
        if self._queue is None:
            reason = f" (last error: {cause})" if cause is not None else ""
            raise NamespaceUnavailable(
                f"no namespace accepted the message{reason} and no durable queue is "
                "configured to hold it",
                namespace=ANY_NAMESPACE,
            ) from cause
        check_size(self._transports, dest, batch)
        broken = self._broken.get(dest)
        if broken is not None:
            # Buffering behind a backlog that can never drain would lose the message
            # in all but name: the caller must know now.
            raise type(broken)(f"not buffered: {broken}") from broken
        queue = self._queue
        await self._claim(queue, dest)
        async with self._gate(dest):
            if while_backlog and dest not in self._backlog:
                raise _BacklogCleared()
            await anyio.to_thread.run_sync(queue.put_many, dest, list(batch))
            self._backlog.add(dest)
        emit(self._hooks, "on_buffered", destination=dest, count=len(batch))

    async def _claim(self, queue: DurableQueue, dest: str) -> None:
        """Record in the queue file that ``dest`` holds messages for these namespaces,
        once per sender; refuse (``ConfigError``) when it holds other namespaces'."""
        if dest in self._claimed:
            return
        owner = owner_of(self._transports, dest)
        before = await anyio.to_thread.run_sync(queue.bind, dest, owner)
        if before is None and dest in self._backlog:
            logger.warning(
                "queue file %s did not record which namespaces the messages of %s are "
                "for (an older geogateway wrote it); recorded %s", queue.path, dest, owner)
        self._claimed.add(dest)

    def _gate(self, dest: str) -> asyncio.Lock:
        # Puts into a destination and the replayer's final "it is empty now" check
        # exclude each other, so the hand-over from buffering back to direct sends
        # happens at a moment when nothing is on its way into the queue.
        gate = self._gates.get(dest)
        if gate is None:
            gate = self._gates[dest] = asyncio.Lock()
        return gate

    # -- health, roles and recovery -------------------------------------------------

    def _mark_down(self, namespace: str, error: BaseException) -> None:
        if namespace not in self._down:
            self._down[namespace] = self._clock()
            logger.warning("namespace %s is down: %s", namespace, error)
            emit(self._hooks, "on_namespace_down", namespace=namespace, error=error)

    def _set_roles(self, roles: RoleState) -> None:
        before = self._roles
        self._roles = roles
        self._roles_store.save(roles)
        logger.warning("failover: %s -> %s", before.active, roles.active)
        emit(
            self._hooks, "on_failover",
            from_namespace=before.active, to_namespace=roles.active, at=roles.changed_at,
        )

    def _existing_backlog(self) -> set[str]:
        if self._queue is None:
            return set()
        mine = {destination(ns, self.entity) for ns in (*self._transports, ANY_NAMESPACE)}
        return {d for d in self._queue.destinations() if d in mine}

    def _prepare_soon(self, *namespaces: str) -> None:
        task = asyncio.get_running_loop().create_task(self._prepare(*namespaces))
        self._preparing.add(task)
        task.add_done_callback(self._preparing.discard)

    async def _prepare(self, *namespaces: str) -> None:
        # Best effort: a namespace that cannot be prepared now is found out by a send.
        async def one(ns: str) -> None:
            try:
                await self._transports[ns].prepare_send(self.entity)
            except GatewayError as exc:
                logger.info("could not open %s ahead of a send: %s", ns, exc)

        await asyncio.gather(*(one(ns) for ns in namespaces if ns not in self._down))

    async def _recovery_loop(self) -> None:
        # Checked each round, not left to the cancellation alone: an SDK call can
        # swallow the cancel (turning it into a TransportError), and then only this
        # flag ends the loop that aclose() waits for.
        while not self._closed:
            try:
                await self._recover_once()
            except Exception:  # keep recovering; the next round may succeed
                logger.exception("recovery round failed")
            await self._sleep(self.policy.probe_interval)

    async def _recover_once(
        self, progress: Callable[[str, int], None] | None = None, *, raise_errors: bool = False
    ) -> int:
        if self._recovering is None:
            self._recovering = asyncio.Lock()
        async with self._recovering:
            await self._probe_down()
            replayed = 0
            ready = replayable(sorted(self._backlog), namespaces=self._transports,
                               down=self._down)
            for dest in ready:
                if dest in self._broken and not raise_errors:
                    continue  # reported once; only an explicit replay() tries again
                try:
                    replayed += await self._replay(dest, progress)
                except (DurableQueueError, ConfigError) as exc:
                    self._replay_failed(dest, exc, raised=raise_errors)
                    if raise_errors:
                        raise
                else:
                    self._broken.pop(dest, None)
            if should_fail_back(failback=self.policy.failback, roles=self._roles,
                                down=self._down):
                self._set_roles(self._roles.fail_back(self._clock()))
            return replayed

    async def _probe_down(self) -> None:
        for ns in list(self._down):
            try:
                await self._transports[ns].probe()
            except TransportError:
                continue
            if self._down.pop(ns, None) is None:
                continue  # marked up meanwhile
            logger.warning("namespace %s is back", ns)
            emit(self._hooks, "on_namespace_up", namespace=ns)
            self._prepare_soon(ns)

    def _replay_failed(
        self, dest: str, error: DurableQueueError | ConfigError, *, raised: bool
    ) -> None:
        if isinstance(error, (QueueCorrupt, ConfigError)):
            self._broken[dest] = error
        # In the background nobody else hears of it: an error line. A replay() call
        # raises it to its caller as well, so the log line is a warning there.
        level = logging.WARNING if raised else logging.ERROR
        logger.log(level, "replay of %s stopped: %s", dest, error)
        emit(self._hooks, "on_replay_failed", destination=dest, error=error)

    async def _replay(
        self, dest: str, progress: Callable[[str, int], None] | None = None
    ) -> int:
        assert self._queue is not None
        namespace, _ = parse_destination(dest)
        await self._claim(self._queue, dest)
        replayer = Replayer(self._queue, dest, owner=self._owner)
        if not replayer.acquire():
            return 0  # another sender process is draining this destination
        try:
            if namespace == ANY_NAMESPACE:
                async def send(batch: Sequence[Message]) -> None:
                    order = [ns for ns in self._roles.order if ns not in self._down]
                    accepted, _, last = await self._send_any(batch, order)
                    if accepted is None:
                        raise last or NamespaceUnavailable(
                            "no namespace is up", namespace=ANY_NAMESPACE
                        )
            else:
                async def send(batch: Sequence[Message]) -> None:
                    await self._send_to(namespace, batch)
            report = None if progress is None else functools.partial(progress, dest)
            result = await replayer.adrain(send, progress=report)
            replayed, seconds = result.replayed, result.seconds
            if result.stopped_by is None and result.remaining == 0:
                # Caught up: drain what arrived meanwhile with new puts held back,
                # then let sends go direct again.
                async with self._gate(dest):
                    result = await replayer.adrain(send)
                    replayed, seconds = replayed + result.replayed, seconds + result.seconds
                    if result.stopped_by is None and result.remaining == 0:
                        self._backlog.discard(dest)
        finally:
            replayer.release()
        if isinstance(result.stopped_by, TransportError) and namespace != ANY_NAMESPACE:
            self._mark_down(namespace, result.stopped_by)
        if replayed:
            emit(self._hooks, "on_replayed", destination=dest, count=replayed, seconds=seconds)
        return replayed
