"""The sender's side of the durable queue: buffering into it, what it still holds for
the sender's entity, and draining one destination back in order.

Before it buffers a message the sender checks that the namespaces of its destination
would ever take it, and records in the file whose messages the destination holds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio

from durable_queue import DurableQueue, Replayer
from gateway.geo._hooks import GatewayHooks, emit
from gateway.transports.base import Transport
from replication import (
    ANY_NAMESPACE,
    ConfigError,
    DurableQueueError,
    Message,
    MessageTooLarge,
    NamespaceUnavailable,
    QueueCorrupt,
    destination,
    parse_destination,
)

__all__ = ["BacklogCleared", "Buffer", "check_size", "owner_of"]

logger = logging.getLogger("geogateway")


def _namespaces(transports: Mapping[str, Transport], dest: str) -> tuple[list[str], str]:
    namespace, entity = parse_destination(dest)
    return (list(transports) if namespace == ANY_NAMESPACE else [namespace]), entity


def owner_of(transports: Mapping[str, Transport], dest: str) -> str:
    """Whose messages ``dest`` holds, as the durable queue records it: the identities
    (kind and host or file, never a key) of the namespaces it may be sent to, sorted,
    and the entity."""
    names, entity = _namespaces(transports, dest)
    identities = sorted(transports[ns].identity for ns in names)
    return f"{' + '.join(identities)} entity {entity}"


def check_size(transports: Mapping[str, Transport], dest: str, batch: Sequence[Message]) -> None:
    """Refuse a message larger than the smallest limit among the namespaces ``dest``
    may be replayed to: buffered, it could only be dead-lettered at replay.

    Raises:
        MessageRejected: a message of ``batch`` is too large; nothing was buffered.
    """
    names, _ = _namespaces(transports, dest)
    limits = [limit for ns in names if (limit := transports[ns].max_message_size) is not None]
    if not limits:
        return
    limit = min(limits)
    for message in batch:
        if message.size > limit:
            raise MessageTooLarge(
                f"message {message.message_id!r} is {message.size} bytes, over the "
                f"{limit}-byte limit of {' and '.join(names)}; it was not sent or "
                f"buffered: make it smaller",
                message_id=message.message_id,
            )


class BacklogCleared(Exception):
    """A send waited to join a backlog that the replayer emptied meanwhile."""


class Buffer:
    """The durable queue as one sender uses it (or no queue: ``queue`` is ``None``).

    ``pending`` holds the destinations of the sender's entity that still hold
    messages: a send goes behind them (FIFO) until a drain empties them. A
    destination whose drain found the file damaged, or holding other namespaces'
    messages, is kept in ``broken``: buffering behind it raises that error.

    Args:
        queue: a path (opened here, closed by ``close``) or a ``DurableQueue``.
        transports: the sender's namespaces, by name.
        entity: the sender's entity.
        hooks: observability callbacks (``on_buffered``).
    """

    def __init__(
        self,
        queue: str | os.PathLike[str] | DurableQueue | None,
        *,
        transports: Mapping[str, Transport],
        entity: str,
        hooks: Sequence[GatewayHooks],
    ) -> None:
        self._owned = queue is not None and not isinstance(queue, DurableQueue)
        self.queue = (
            DurableQueue(queue)
            if queue is not None and not isinstance(queue, DurableQueue)
            else queue
        )
        self._transports = transports
        self._hooks = hooks
        self.pending: set[str] = set()
        #: The destinations this sender's messages may be buffered in.
        self.mine = frozenset(destination(ns, entity) for ns in (*transports, ANY_NAMESPACE))
        if self.queue is not None:
            self.pending = {d for d in self.queue.destinations() if d in self.mine}
        self._gates: dict[str, asyncio.Lock] = {}
        # Destinations whose replay hit a damaged queue file (or messages buffered
        # for other namespaces): sends that would be buffered behind them raise it.
        self.broken: dict[str, QueueCorrupt | ConfigError] = {}
        # Destinations whose owner (these namespaces) is recorded in the queue file.
        self._claimed: set[str] = set()
        self._owner = f"sender-{uuid.uuid4().hex[:12]}"
        # What each destination holds as this sender knows it, [count, oldest put
        # time], for the on_backlog hook: read from the file once (the first recovery
        # round), then kept up to date by puts and drains.
        self._tally: dict[str, tuple[int, float | None]] = {}

    async def put(
        self,
        dest: str,
        batch: Sequence[Message],
        *,
        cause: BaseException | None,
        while_backlog: bool = False,
    ) -> None:
        """Write ``batch`` to ``dest``; returns once it is on disk.

        Args:
            dest: the durable queue destination.
            batch: the messages.
            cause: why they are buffered (the last send error), for the message of
                the error raised when there is no queue.
            while_backlog: buffered only to stay behind a backlog: raise
                ``BacklogCleared`` if ``dest`` was emptied meanwhile.

        Raises:
            NamespaceUnavailable: there is no durable queue.
            MessageRejected: a message is larger than ``dest``'s namespaces take.
            QueueCorrupt, ConfigError: ``dest`` is in ``broken``.
            QueueFull: the durable queue is full.
        """
        if self.queue is None:
            reason = f" (last error: {cause})" if cause is not None else ""
            raise NamespaceUnavailable(
                f"no namespace accepted the message{reason} and no durable queue is "
                "configured to hold it",
                namespace=ANY_NAMESPACE,
            ) from cause
        check_size(self._transports, dest, batch)
        broken = self.broken.get(dest)
        if broken is not None:
            # Buffering behind a backlog that can never drain would lose the message
            # in all but name: the caller must know now.
            raise type(broken)(f"not buffered: {broken}") from broken
        queue = self.queue
        await self._claim(queue, dest)
        async with self._gate(dest):
            if while_backlog and dest not in self.pending:
                raise BacklogCleared()
            await anyio.to_thread.run_sync(queue.put_many, dest, list(batch))
            self.pending.add(dest)
            if self._hooks:
                # Within the gate: a drain's recount (below) sees a put whole or not
                # at all, so the tally neither loses it nor counts it twice.
                await self._count_put(queue, dest, len(batch))
        emit(self._hooks, "on_buffered", destination=dest, count=len(batch))

    async def _count_put(self, queue: DurableQueue, dest: str, added: int) -> None:
        tally = self._tally.get(dest)
        if tally is None:  # first time here: what the file holds, ours included
            self._tally[dest] = await anyio.to_thread.run_sync(self._read, queue, dest)
        else:
            count, oldest = tally
            # put_many stamped them a moment ago: the time now is as good.
            self._tally[dest] = (count + added, time.time() if oldest is None else oldest)
        self._report(dest)

    @staticmethod
    def _read(queue: DurableQueue, dest: str) -> tuple[int, float | None]:
        return queue.count(dest), queue.oldest(dest)

    async def report_backlog(self) -> None:
        """Read from the file what each pending destination not tallied yet holds (a
        backlog an earlier run left, or another process added) and report it
        (``on_backlog``). Only when a hook listens."""
        queue = self.queue
        if queue is None or not self._hooks:
            return
        new = sorted(self.pending - set(self._tally))
        if not new:
            return
        found = await anyio.to_thread.run_sync(
            lambda: {d: self._read(queue, d) for d in new})
        for dest, tally in found.items():
            self._tally[dest] = tally
            self._report(dest)

    def _report(self, dest: str) -> None:
        count, oldest = self._tally[dest]
        emit(self._hooks, "on_backlog", destination=dest, count=count,
             oldest_enqueued_at=oldest)

    async def refresh(self) -> None:
        """Add to ``pending`` the destinations of this entity that hold messages this
        sender did not put there (another process sharing the file did, after this
        sender started): a replay must not report nothing to do while they wait."""
        queue = self.queue
        if queue is None:
            return
        mine = sorted(self.mine - self.pending)
        found = await anyio.to_thread.run_sync(lambda: [d for d in mine if queue.has_waiting(d)])
        self.pending.update(found)

    async def waiting(self, dests: Sequence[str]) -> dict[str, int]:
        """How many messages wait for each of ``dests`` (those with none are left out)."""
        queue = self.queue
        if queue is None:
            return {}
        counts = await anyio.to_thread.run_sync(lambda: {d: queue.count(d) for d in dests})
        return {d: n for d, n in counts.items() if n}

    async def drain(
        self,
        dest: str,
        send: Callable[[Sequence[Message]], Awaitable[None]],
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, float, BaseException | None]:
        """Send what ``dest`` holds with ``send``, oldest first, under the file's lease.

        When it is caught up, what arrived meanwhile is drained with new puts held
        back, and ``dest`` leaves ``pending``: sends go direct again.

        Raises:
            ConfigError: the file holds ``dest``'s messages for other namespaces.
            DurableQueueError: the queue could not be read or written.

        Returns:
            How many were sent, in how many seconds, and the error that stopped the
            drain early (``None``: none): a ``TransportError``, or a
            ``DurableQueueError`` when another replayer holds the lease (nothing
            is sent then) or took it meanwhile.
        """
        assert self.queue is not None
        queue = self.queue
        await self._claim(queue, dest)
        replayer = Replayer(queue, dest, owner=self._owner)
        # Every queue call of a drain runs off the loop (a lock another process holds
        # may keep a write waiting for seconds): here, and in Replayer.adrain.
        if not await anyio.to_thread.run_sync(replayer.acquire):
            # Another sender (process) is draining this destination.
            holder = await anyio.to_thread.run_sync(
                functools.partial(queue.lease_owner, dest, now=time.time()))
            return 0, 0.0, DurableQueueError(
                f"another replayer ({holder or 'unknown'}) is draining it")
        if self._hooks or progress is not None:
            progress = self._tallying(queue, dest, progress)
        try:
            result = await replayer.adrain(send, progress=progress)
            replayed, seconds = result.replayed, result.seconds
            if result.stopped_by is None and result.remaining == 0:
                async with self._gate(dest):
                    result = await replayer.adrain(send)
                    replayed, seconds = replayed + result.replayed, seconds + result.seconds
                    if result.stopped_by is None and result.remaining == 0:
                        self.pending.discard(dest)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(replayer.release)
        if self._hooks:
            # What remains, counted again with puts held back: the replayer's own
            # count was taken before sends that buffered since (they are tallied).
            async with self._gate(dest):
                self._tally[dest] = await anyio.to_thread.run_sync(self._read, queue, dest)
                self._report(dest)
        return replayed, seconds, result.stopped_by

    def _tallying(self, queue: DurableQueue, dest: str,
                  progress: Callable[[int], None] | None) -> Callable[[int], None]:
        # Each batch a replay sent: the tally goes down, the oldest is read again (an
        # index seek, in the replayer's worker thread, where this is called); the
        # tally, the hooks and the caller's progress are then updated on the loop.
        done = [0]
        loop = asyncio.get_running_loop()
        hooks = bool(self._hooks)

        def on_loop(so_far: int, oldest: float | None) -> None:
            if hooks:
                count, _ = self._tally.get(dest, (0, None))
                left = max(0, count - (so_far - done[0])) if oldest is not None else 0
                self._tally[dest] = (left, oldest)
                self._report(dest)
                done[0] = so_far
            if progress is not None:
                progress(so_far)

        def step(so_far: int) -> None:
            loop.call_soon_threadsafe(on_loop, so_far, queue.oldest(dest) if hooks else None)

        return step

    def close(self) -> None:
        """Close the queue if it was opened here."""
        if self.queue is not None and self._owned:
            self.queue.close()

    async def _claim(self, queue: DurableQueue, dest: str) -> None:
        """Record in the queue file that ``dest`` holds messages for these namespaces,
        once per sender; refuse (``ConfigError``) when it holds other namespaces'."""
        if dest in self._claimed:
            return
        owner = owner_of(self._transports, dest)
        before = await anyio.to_thread.run_sync(queue.bind, dest, owner)
        if before is None and dest in self.pending:
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
