"""The outbox dispatcher: sends an outbox's committed rows through geo senders.

Each *round* lists the destinations that hold rows and, for each (up to
``concurrency`` at once), claims it, sends its oldest rows ``batch_size`` at a time,
one ``send_batch`` of that destination's sender each, and deletes them once their sends
returned (the messages were accepted by a namespace, or are on disk in the sender's
durable queue); full batches go on under the same claim (ten at most while other
destinations wait). Rows are read five batches at a time: while one read's batches are
sent, a worker thread deletes the read before (one statement, one commit) and reads the
next. A failed send deletes the batches sent before it and nothing after: the rest is
sent again later, in the same order, with the same MessageIds; so is what a crash
between a send and its delete left. The receive side removes the copies that arrive
twice, by MessageId.

A message the namespaces refuse for good (``MessageTooLarge``) is moved to the
outbox's dead rows, so it does not hold up the rest of its destination; any other
failure backs that destination off (``retry_interval``, doubling up to 30 s) and is
reported to ``on_error`` and the log, while the other destinations go on.

Between rounds that found nothing the dispatcher waits on the outbox
(``Outbox.wait``: a PostgreSQL notification at commit, a SQLite file's change
counter), at most ``poll_interval`` seconds.

:class:`AsyncOutboxDispatcher` is the core; :class:`OutboxDispatcher` drives the same
core from sync code, with sync ``GeoSender`` s.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.to_thread

from gateway.geo.receiver import StopFlag
from gateway.geo.sender import SendResult
from gateway.stores import DeadRow, Outbox, OutboxClaim
from replication import ConfigError, GatewayError, Message, MessageTooLarge

__all__ = ["AsyncOutboxDispatcher", "BatchSender", "DispatcherStats", "SenderSource"]

logger = logging.getLogger("geogateway")

_MAX_BACKOFF = 30.0
_STOP_CHECK = 0.2  # how often a waiting run() looks at its stop flag
_STORE = "*"  # the key of the outbox's own back-off (a failure to list its destinations)
#: Full batches of one destination in a row, before the others' turn (when there are others).
_ROUND_BATCHES = 10
#: Batches read from the store at once (and deleted at once once sent): the store's round
#: trips, transactions and thread hops are paid per read, not per send.
_READ_BATCHES = 5


class BatchSender(Protocol):
    """What the dispatcher sends through: an ``AsyncGeoSender`` (one per entity)."""

    @property
    def entity(self) -> str: ...

    async def send_batch(self, messages: Sequence[Message]) -> SendResult: ...


#: A sender, several (one per entity), or a function that makes the sender of an
#: entity on first use (the dispatcher then closes the senders it made).
SenderSource = (BatchSender | Iterable[BatchSender]
                | Callable[[str], BatchSender | Awaitable[BatchSender]])


def _check_async(sender: object) -> None:
    if not inspect.iscoroutinefunction(getattr(sender, "send_batch", None)):
        raise ConfigError(f"AsyncOutboxDispatcher sends through an AsyncGeoSender, not a "
                          f"{type(sender).__name__}: use OutboxDispatcher for a GeoSender")


@dataclass
class _Done:
    """A claim whose first ``sent`` rows were sent (in ``batches`` sends, and ``dead``
    refused): to delete."""

    claim: OutboxClaim
    sent: int
    dead: list[DeadRow]
    batches: int = 1
    failed: bool = False  # a send after these failed: the destination backs off


@dataclass
class _Step:
    """What one batch's send and the store work beside it came to."""

    ahead: OutboxClaim | None = None
    sent: int = 0  # rows of the claim sent, by the sends that returned
    batches: int = 0  # those sends
    send_error: Exception | None = None
    store_error: GatewayError | None = None


async def _send_side(step: _Step, sender: BatchSender, claim: OutboxClaim, size: int) -> None:
    """Send ``claim``'s rows in batches of ``size``, in order; stop at the first failure."""
    rows = claim.rows
    for start in range(0, len(rows), size):
        part = rows[start:start + size]
        try:
            await sender.send_batch([row.message for row in part])
        except Exception as exc:
            step.send_error = exc
            return
        step.sent = start + len(part)
        step.batches += 1


@dataclass(frozen=True, kw_only=True)
class DispatcherStats:
    """Counters since the dispatcher started: rows sent (and deleted), batches, rows
    moved to the dead rows, failed sends, and store errors (a finish that failed after
    its send leaves rows that are sent again)."""

    sent: int
    batches: int
    dead: int
    send_errors: int
    store_errors: int


class AsyncOutboxDispatcher:
    """Sends an outbox's committed rows, in order per destination; see the module docstring.

    Args:
        outbox: a :class:`~gateway.stores.PostgresOutbox` or
            :class:`~gateway.stores.SqliteOutbox` (closed by its owner, not here).
        senders: an ``AsyncGeoSender``, several (one per entity: only their entities
            are dispatched), or ``factory(entity)`` returning one (every destination is
            dispatched; the senders made are closed by :meth:`aclose`).
        batch_size: rows per ``send_batch``, per destination and round.
        concurrency: destinations sent at the same time.
        poll_interval: the longest wait for new rows between rounds (default: the
            outbox's own, 1 s with PostgreSQL notifications, 0.5 s for SQLite).
        retry_interval: the first wait before a destination whose send failed is tried
            again (doubling, up to 30 s).
        name: this dispatcher's name in leases and logs (default: host, pid, random).
        on_error: called as ``on_error(entity, error)`` when a send or the store fails
            (``entity`` is ``"*"`` when the outbox itself could not be read).
    """

    def __init__(
        self, outbox: Outbox, senders: SenderSource, *, batch_size: int = 100,
        concurrency: int = 4, poll_interval: float | None = None, retry_interval: float = 1.0,
        name: str | None = None, on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        if batch_size < 1 or concurrency < 1:
            raise ConfigError("batch_size and concurrency must be >= 1")
        if not retry_interval > 0 or (poll_interval is not None and not poll_interval > 0):
            raise ConfigError("retry_interval and poll_interval must be > 0")
        self.outbox = outbox
        self.batch_size = batch_size
        self.concurrency = concurrency
        default_poll: float = getattr(outbox, "poll_interval", 1.0)
        self.poll_interval = float(poll_interval or default_poll)
        self.retry_interval = retry_interval
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._on_error = on_error
        self._senders: dict[str, BatchSender] = {}
        self._factory: Callable[[str], Any] | None = None
        self._made: list[BatchSender] = []
        if hasattr(senders, "send_batch"):
            self._senders[senders.entity] = senders  # type: ignore[union-attr,assignment]
        elif callable(senders):
            self._factory = senders
        else:
            self._senders.update((sender.entity, sender) for sender in senders)
            if not self._senders:
                raise ConfigError("give the dispatcher a sender (or a factory of senders)")
        for sender in self._senders.values():
            _check_async(sender)
        self._busy: set[str] = set()
        self._stop: StopFlag | None = None
        self._failures: dict[str, int] = {}
        self._not_before: dict[str, float] = {}
        self._counts = dict.fromkeys(("sent", "batches", "dead", "send_errors",
                                      "store_errors"), 0)
        self._closed = False

    @property
    def stats(self) -> DispatcherStats:
        return DispatcherStats(**self._counts)

    async def __aenter__(self) -> AsyncOutboxDispatcher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def run(self, *, stop: StopFlag | None = None) -> None:
        """Dispatch until ``stop`` (an ``asyncio.Event``, a ``threading.Event``:
        anything with ``is_set()``) is set, or the task is cancelled.

        Store outages and failed sends are logged (and given to ``on_error``) and
        waited out, never raised.
        """
        self._stop = stop
        while not (stop is not None and stop.is_set()):
            lost_until = self._not_before.get(_STORE, 0.0)
            if time.monotonic() < lost_until:  # the outbox failed: wait its back-off out
                await self._idle(stop, until=lost_until)
                continue
            try:
                sent = await self.dispatch_once()
            except GatewayError as exc:  # the store's destinations could not be listed
                self._report(_STORE, exc)
                continue
            self._failures.pop(_STORE, None)
            self._not_before.pop(_STORE, None)
            if sent == 0:
                await self._idle(stop)

    async def _idle(self, stop: StopFlag | None, *, until: float | None = None) -> None:
        """Until ``until``, or (by default) for the poll interval, cut short by new rows
        or by the end of a destination's back-off."""
        now = time.monotonic()
        deadline = until
        if deadline is None:
            backoffs = [t for e, t in self._not_before.items() if e != _STORE and t > now]
            deadline = min([now + self.poll_interval, *backoffs])
        while not (stop is not None and stop.is_set()):
            left = deadline - time.monotonic()
            if left <= 0 or (await self.outbox.wait(min(left, _STOP_CHECK)) and until is None):
                return  # time for a round, or woken: rows may be waiting

    async def dispatch_once(self) -> int:
        """One round: one batch from every destination that holds rows and is not
        backing off. Returns how many rows were sent (and deleted).

        Raises:
            StoreUnavailable: the outbox could not be read (nothing was sent).
        """
        if self._closed:
            raise RuntimeError("this dispatcher is closed")
        entities = None if self._factory is not None else set(self._senders)
        found = await anyio.to_thread.run_sync(self.outbox.destinations, entities)
        now = time.monotonic()
        ready = [e for e in found if e not in self._busy and self._not_before.get(e, 0) <= now]
        random.shuffle(ready)  # dispatchers sharing the outbox try different ones first
        before = self._counts["sent"]
        limiter = anyio.CapacityLimiter(self.concurrency)
        async with anyio.create_task_group() as group:
            for entity in ready:
                group.start_soon(self._one, entity, limiter, len(ready) > 1)
        return self._counts["sent"] - before

    async def _one(self, entity: str, limiter: anyio.CapacityLimiter, others: bool) -> None:
        async with limiter:
            self._busy.add(entity)
            try:
                sender = await self._sender(entity)
                limit = _ROUND_BATCHES if others else None
                want = self._read_size(limit)
                claim = await anyio.to_thread.run_sync(
                    lambda: self.outbox.claim(entity, want, owner=self.name))
                if claim is not None:
                    await self._drain(sender, claim, want, limit)
            except GatewayError as exc:
                self._report(entity, exc)
            finally:
                self._busy.discard(entity)

    def _read_size(self, batches_left: int | None) -> int:
        """Rows to read at once: ``_READ_BATCHES`` batches, or what is left of the round."""
        return self.batch_size * min(_READ_BATCHES, batches_left or _READ_BATCHES)

    async def _drain(self, sender: BatchSender, claim: OutboxClaim, want: int,
                     limit: int | None) -> None:
        """Send ``claim``'s rows (``want`` were asked for), batch after batch in order (up
        to ``limit`` batches, so that other destinations get their turn; until ``run``'s
        stop flag is set). Rows are read a few batches at a time; while one read's batches
        are sent, the read before it is deleted and the next one made, in a worker
        thread."""
        done: _Done | None = None  # the read before, sent: deleted beside this one's sends
        current: OutboxClaim | None = claim
        batches = 0
        while current is not None:
            batches += -(-len(current.rows) // self.batch_size)
            left = None if limit is None else limit - batches
            more = (len(current.rows) == want and (left is None or left > 0)
                    and not (self._stop is not None and self._stop.is_set()))
            want = self._read_size(left)
            step = _Step()
            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._store_side, step, done, current, want if more else 0)
                    group.start_soon(_send_side, step, sender, current, self.batch_size)
            except BaseException:  # cancelled: end the claim; what was not deleted stays
                await self._close(current, None)
                raise
            if step.store_error is not None:  # the claim broke: the rows sent are resent
                self._lost_delete(done, step.store_error)
                if step.sent:
                    self._lost_delete(_Done(current, step.sent, [], step.batches), None)
                await self._close(current, None)
                return
            if done is not None:
                self._deleted(done)
            done, ahead = self._after_send(current, step)
            if done is None:  # the first send failed: nothing to delete
                await self._close(current, None)
                return
            current = ahead  # None after a failed send: what was sent before it is deleted
        assert done is not None  # the loop ends only after a send that left rows to delete
        await self._close(done.claim, done)

    async def _store_side(self, step: _Step, done: _Done | None, claim: OutboxClaim,
                          ahead: int) -> None:
        def work() -> OutboxClaim | None:
            if done is not None:
                self.outbox.finish(done.claim, done.sent, done.dead, keep=True)
            return self.outbox.read_ahead(claim, ahead) if ahead else None

        try:
            step.ahead = await anyio.to_thread.run_sync(work)
        except GatewayError as exc:
            step.store_error = exc

    def _after_send(self, claim: OutboxClaim, step: _Step) -> tuple[_Done | None,
                                                                   OutboxClaim | None]:
        """What the sends of ``claim`` leave to delete (``None``: nothing, the claim is
        to be released), and the claim to send next (``None`` after a failed send)."""
        exc = step.send_error
        if exc is None:
            return _Done(claim, len(claim.rows), [], step.batches), step.ahead
        if isinstance(exc, MessageTooLarge):
            failed = claim.rows[step.sent:step.sent + self.batch_size]
            refused = [r for r in failed[exc.sent:] if r.message.message_id == exc.message_id]
            if refused:
                logger.error("outbox: message %s for %s refused for good, moved to the dead "
                             "rows: %s", exc.message_id, claim.entity, exc)
                return _Done(claim, step.sent + exc.sent, [DeadRow(refused[0].seq, str(exc))],
                             step.batches + 1), None
        self._counts["send_errors"] += 1
        self._report(claim.entity, exc)
        # The batches sent before the failed one are deleted; the claim ends.
        return (_Done(claim, step.sent, [], step.batches, failed=True) if step.sent
                else None), None

    async def _close(self, claim: OutboxClaim, done: _Done | None) -> None:
        """End ``claim``: finish ``done`` (its rows sent), or release it untouched;
        never cancelled halfway."""
        with anyio.CancelScope(shield=True):
            try:
                if done is None:
                    await anyio.to_thread.run_sync(self.outbox.release, claim)
                    return
                await anyio.to_thread.run_sync(
                    lambda: self.outbox.finish(claim, done.sent, done.dead))
            except GatewayError as exc:
                if done is not None:
                    self._lost_delete(done, exc)
                else:
                    self._report(claim.entity, exc)
                return
        assert done is not None
        self._deleted(done)

    def _deleted(self, done: _Done) -> None:
        self._counts["sent"] += done.sent
        self._counts["dead"] += len(done.dead)
        self._counts["batches"] += done.batches
        if done.failed:
            return
        self._failures.pop(done.claim.entity, None)
        self._not_before.pop(done.claim.entity, None)

    def _lost_delete(self, done: _Done | None, error: GatewayError | None) -> None:
        """Rows sent whose delete failed: they will be sent again."""
        if done is None:
            return
        self._counts["store_errors"] += 1
        logger.warning("outbox: %d rows for %s were sent but could not be deleted; they "
                       "will be sent again (same MessageIds)", done.sent, done.claim.entity)
        if error is not None:
            self._report(done.claim.entity, error)

    def _report(self, entity: str, error: BaseException) -> None:
        failures = self._failures[entity] = self._failures.get(entity, 0) + 1
        delay = min(self.retry_interval * 2 ** (failures - 1), _MAX_BACKOFF)
        self._not_before[entity] = time.monotonic() + delay
        logger.warning("outbox dispatcher %s: %s: %s; trying again in %.1f s", self.name,
                       "the outbox" if entity == _STORE else entity,
                       " ".join(str(error).split()) or type(error).__name__, delay)
        if self._on_error is not None:
            try:
                self._on_error(entity, error)
            except Exception:
                logger.exception("outbox dispatcher: on_error failed")

    async def _sender(self, entity: str) -> BatchSender:
        sender = self._senders.get(entity)
        if sender is not None:
            return sender
        assert self._factory is not None  # else destinations() was given the entities
        made: BatchSender = self._factory(entity)
        if inspect.isawaitable(made):
            made = await made
        _check_async(made)
        self._made.append(made)
        self._senders[entity] = made
        return made

    async def aclose(self) -> None:
        """Close the senders the factory made (senders passed in are the caller's)."""
        if self._closed:
            return
        self._closed = True
        for sender in self._made:
            close = getattr(sender, "aclose", None)
            if close is not None:
                await close()
