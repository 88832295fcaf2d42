"""The replayer: drains one destination of a durable queue, in order, under a lease.

One core, two drivers (the httpx ``auth_flow`` shape): ``Replayer._flow`` is a
generator that decides what to send next and settles each outcome in the queue;
it yields the messages to send and is sent back ``None`` (sent) or the exception
the send raised. ``drain`` and ``adrain`` are the only places that call ``send``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeVar

import anyio
import anyio.to_thread

from durable_queue._queue import DurableQueue
from durable_queue._records import ReplayResult, StoredMessage
from replication import (
    ConfigError,
    DurableQueueError,
    Message,
    MessageRejected,
    QueueCorrupt,
    TransportError,
)

__all__ = ["Replayer"]

# A drain reads the whole file first (DurableQueue.check) unless this handle found it
# sound this recently: a namespace that flaps restarts drains often, and a check
# costs about 0.7 s per GiB of file.
RECHECK_SECONDS = 60.0

# The flow yields a batch to send and receives None (sent) or what send raised.
_Flow = Generator[list[Message], "Exception | None", ReplayResult]
_Retry = Generator[list[Message], "Exception | None", None]
_T = TypeVar("_T")


@dataclass
class _Tally:
    replayed: int = 0
    dead_lettered: int = 0
    stopped_by: BaseException | None = None
    started: float = field(default_factory=time.perf_counter)
    # Vacuum (when due) on each ack; the async driver does it off the loop instead.
    shrink_inline: bool = True


class Replayer:
    """Drains one destination of a ``DurableQueue`` through a ``send`` callable.

    Only the holder of the destination's lease reads it, so two replayers (in any
    processes) never send the same batch at once. The lease is renewed while
    draining; a crashed replayer's lease expires and the next one resumes from the
    head, so delivery is at-least-once.

    A drain reads the whole file before it sends anything (``DurableQueue.check``;
    skipped when the handle did so in the last ``RECHECK_SECONDS``), so a damaged file
    raises ``QueueCorrupt`` with nothing sent and nothing written.

    Args:
        queue: the queue to drain.
        destination: the destination to drain.
        owner: this replayer's name in the lease table (default: host:pid:random).
        lease_seconds: how long a lease lasts without renewal.
        batch_size: messages per send.
        clock: the time source for leases; it must agree across every process
            that replays this file (hence wall-clock ``time.time`` by default:
            ``time.monotonic`` restarts with a reboot while the file persists).

    Raises:
        ConfigError: a bad ``lease_seconds`` or ``batch_size``.
    """

    def __init__(
        self,
        queue: DurableQueue,
        destination: str,
        *,
        owner: str | None = None,
        lease_seconds: float = 30.0,
        batch_size: int = 100,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(destination, str) or not destination:
            raise ConfigError(f"destination must be a non-empty str, not {destination!r}")
        if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, (int, float)):
            raise ConfigError(f"lease_seconds must be a number, not {lease_seconds!r}")
        if not lease_seconds > 0:
            raise ConfigError(f"lease_seconds must be positive, not {lease_seconds!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ConfigError(f"batch_size must be a positive int, not {batch_size!r}")
        self.queue = queue
        self.destination = destination
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease_seconds = float(lease_seconds)
        self.batch_size = batch_size
        self._clock = clock
        self._renewed_at: float | None = None

    # -- the lease ------------------------------------------------------------

    @property
    def holds_lease(self) -> bool:
        """Whether this replayer took the lease (it may have expired since)."""
        return self._renewed_at is not None

    def acquire(self) -> bool:
        """Take (or renew) the lease on the destination.

        Returns:
            Whether this replayer holds it now.
        """
        now = self._clock()
        if self.queue.acquire_lease(
            self.destination, self.owner, seconds=self.lease_seconds, now=now
        ):
            self._renewed_at = now
            return True
        self._renewed_at = None
        return False

    def release(self) -> None:
        """Give the lease up, so another replayer can start at once.

        On a damaged file nothing is written: the lease is left to expire.
        """
        if self._renewed_at is not None:
            self._renewed_at = None
            # The drain that found the damage raises it; writing to release the
            # lease would be a write into a damaged file.
            with contextlib.suppress(QueueCorrupt):
                self.queue.release_lease(self.destination, self.owner)

    def _busy_error(self) -> DurableQueueError:
        holder = self.queue.lease_owner(self.destination, now=self._clock())
        return DurableQueueError(
            f"another replayer ({holder or 'unknown'}) is draining {self.destination!r}"
        )

    def __enter__(self) -> Replayer:
        if not self.acquire():
            raise self._busy_error()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _keep_lease(self) -> bool:
        # Renew once a third of the lease has passed: cheap (one small write per
        # lease_seconds/3) and leaves two thirds of slack for a slow send.
        if self._renewed_at is None:
            return False
        if self._clock() - self._renewed_at < self.lease_seconds / 3:
            return True
        return self.acquire()

    # -- the core -------------------------------------------------------------

    def next_batch(self, limit: int | None = None) -> list[StoredMessage]:
        """The next batch to send, from the head of the destination.

        Args:
            limit: at most this many (default ``batch_size``).

        Raises:
            DurableQueueError: the lease is not held (or was lost to another replayer).
        """
        if not self._keep_lease():
            raise self._lost_lease()
        return self.queue.get_batch(self.destination, limit or self.batch_size)

    def _lost_lease(self) -> DurableQueueError:
        return DurableQueueError(f"replayer {self.owner} lost its lease on {self.destination!r}")

    def _flow(
        self,
        progress: Callable[[int], None] | None,
        max_messages: int | None,
        *,
        shrink_inline: bool = True,
    ) -> _Flow:
        tally = _Tally(shrink_inline=shrink_inline)
        while True:
            limit = self.batch_size
            if max_messages is not None:
                limit = min(limit, max_messages - tally.replayed - tally.dead_lettered)
                if limit <= 0:
                    break
            if not self._keep_lease():
                tally.stopped_by = self._lost_lease()
                break
            # A damaged file (QueueCorrupt) or any other queue error propagates:
            # a drain that cannot read its queue must not look like a pause.
            batch = self.queue.get_batch(self.destination, limit)
            if not batch:
                break
            outcome = yield [item.message for item in batch]
            if isinstance(outcome, MessageRejected):
                yield from self._one_by_one(batch, tally)
            else:
                self._settle(batch, outcome, tally)
            if tally.stopped_by is not None:
                break
            if progress is not None:
                progress(tally.replayed)
        remaining = self.queue.count(self.destination)
        return ReplayResult(
            replayed=tally.replayed,
            dead_lettered=tally.dead_lettered,
            remaining=remaining,
            stopped_by=tally.stopped_by,
            seconds=time.perf_counter() - tally.started,
            reason=_why_waiting(remaining, tally, max_messages),
        )

    def _settle(
        self, batch: Sequence[StoredMessage], outcome: Exception | None, tally: _Tally
    ) -> None:
        """Record the outcome of sending ``batch`` (never a ``MessageRejected``)."""
        if outcome is None:
            self.queue.ack(batch, shrink=tally.shrink_inline)
            tally.replayed += len(batch)
            return
        self.queue.nack(batch, error=f"{type(outcome).__name__}: {outcome}")
        if isinstance(outcome, TransportError):
            tally.stopped_by = outcome
            return
        raise outcome

    def _one_by_one(self, batch: Sequence[StoredMessage], tally: _Tally) -> _Retry:
        # The batch was rejected: send each message alone to find the bad ones;
        # dead-letter those, ack the rest, keep going unless the namespace fails.
        sent: list[StoredMessage] = []
        for index, item in enumerate(batch):
            outcome = yield [item.message]
            if isinstance(outcome, MessageRejected):
                self.queue.dead_letter(item, str(outcome) or type(outcome).__name__)
                tally.dead_lettered += 1
            elif outcome is None:
                sent.append(item)
            else:
                self._settle(sent, None, tally)
                self._settle(batch[index:], outcome, tally)
                return
        self._settle(sent, None, tally)

    # -- the drivers ----------------------------------------------------------

    def _start(self) -> bool:
        if self.holds_lease:
            return False
        if not self.acquire():
            raise self._busy_error()
        return True

    def drain(
        self,
        send: Callable[[Sequence[Message]], None],
        *,
        progress: Callable[[int], None] | None = None,
        max_messages: int | None = None,
    ) -> ReplayResult:
        """Send the destination's messages in order until it is empty.

        Takes the lease if not held (and then gives it back at the end).

        Args:
            send: sends one batch; raises ``MessageRejected`` (permanent) or
                ``TransportError`` (transient) on failure.
            progress: called after each batch with the number replayed so far.
            max_messages: stop after this many messages.

        Raises:
            DurableQueueError: another replayer holds the lease, or the queue
                cannot be read or written. ``QueueCorrupt`` for a damaged file:
                found before anything was sent (or, if the damage appeared during
                the drain, after the messages before it were sent and removed;
                nothing is written once it is found).
            Exception: any error from ``send`` other than ``MessageRejected`` and
                ``TransportError``, after the batch was put back at the head.

        Returns:
            What was done; ``stopped_by`` is set when a ``TransportError`` (or a
            lost lease) stopped the drain early, and ``reason`` says why messages
            still wait whenever some do.
        """
        # Checked before the lease is taken: taking it is a write.
        self.queue.check(max_age=RECHECK_SECONDS)
        took = self._start()
        try:
            flow = self._flow(progress, max_messages)
            batch = next(flow)
            while True:
                try:
                    send(batch)
                except Exception as exc:
                    batch = flow.send(exc)
                else:
                    batch = flow.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            if took:
                self.release()

    async def adrain(
        self,
        send: Callable[[Sequence[Message]], Awaitable[None]],
        *,
        progress: Callable[[int], None] | None = None,
        max_messages: int | None = None,
    ) -> ReplayResult:
        """The async twin of ``drain``: ``send`` is awaited; the rest is the same,
        except that ``progress`` is called in the worker thread that settles each batch.

        Every queue call (the check, the lease, reading a batch, settling it, giving
        freed space back) runs in a worker thread of this drain's own, never on the
        event loop: a SQLite write may wait up to the queue's ``busy_timeout`` for
        another process's lock, or for a stalled disk's fsync, and the loop must go
        on meanwhile (other sends, their deadlines and hedges).
        """
        limiter = anyio.CapacityLimiter(1)  # the flow is stepped by one thread at a time

        async def off_loop(fn: Callable[..., _T], *args: object) -> _T:
            return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)

        # Before the lease is taken (a write): reading the whole file may take a while.
        await off_loop(functools.partial(self.queue.check, max_age=RECHECK_SECONDS))
        took = await off_loop(self._start)
        try:
            flow = self._flow(progress, max_messages, shrink_inline=False)
            step = await off_loop(_first, flow)
            while isinstance(step, list):
                outcome: Exception | None = None
                try:
                    await send(step)
                except Exception as exc:
                    outcome = exc
                step = await off_loop(_resume, flow, outcome)
            result = step
        finally:
            if took:
                with anyio.CancelScope(shield=True):
                    await off_loop(self.release)
        await off_loop(self.queue.maybe_shrink)
        return result


# A StopIteration cannot cross a thread hand-over (a future refuses it): the flow's
# return value comes back as the step's result instead.
def _first(flow: _Flow) -> list[Message] | ReplayResult:
    try:
        return next(flow)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _resume(flow: _Flow, outcome: Exception | None) -> list[Message] | ReplayResult:
    try:
        return flow.send(outcome)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _why_waiting(remaining: int, tally: _Tally, max_messages: int | None) -> str:
    """Why ``remaining`` messages still wait after a drain ("" when none does)."""
    if not remaining:
        return ""
    if tally.stopped_by is not None:
        return f"stopped by {type(tally.stopped_by).__name__}: {tally.stopped_by}"
    if max_messages is not None and tally.replayed + tally.dead_lettered >= max_messages:
        return f"max_messages ({max_messages}) reached"
    return "they were put while the drain was ending: drain again"
