"""The receiver core (async). ``GeoReceiver`` in ``gateway.geo._client`` drives it.

One pump task per namespace keeps up to ``prefetch`` messages received (peek-locked);
``receive()`` runs them through the de-duplicator:

- DELIVER: the first copy of a ``MessageId``; returned to the caller.
- DUPLICATE: the id is done; the copy is completed without being delivered.
- HOLD: the other copy is in flight; this one waits, still locked. When the first
  copy completes, the held one is completed as a duplicate; when it is abandoned,
  the held one goes back to the inbox and may be delivered.

The de-duplicator's SQLite work runs in worker threads, never on the event loop:
one check per received batch, and the done marks of the messages completed in a
row in one transaction (``gateway.geo.receiver._marks``), each copy settled only after
its mark committed. Where each copy is (the inbox, held, in flight) is one object's,
``gateway.geo.receiver._deliveries.Deliveries``, changed only by its named transitions.
The pumps and the namespaces' health live in ``gateway.geo.receiver._pumps``,
the ``run`` loop (one handler at a time or several, plain or inbox handlers) in
``gateway.geo.receiver._run``.

The store may be shared by a fleet (PostgreSQL). While it does not answer, nothing is
delivered past it and nothing settled: ``receive()`` raises ``StoreUnavailable`` (and
``run()`` waits), a done mark is tried again until it is written, and only then is its
copy settled (``gateway.geo._store_watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.to_thread

from gateway._support.deadlines import within_deadline
from gateway.geo._factory import NamespaceLike, check_entity, open_transport
from gateway.geo._hooks import GatewayHooks, dedup_call
from gateway.geo._store_watch import StoreWatch
from gateway.geo._tracing import find_tracer, messaging_system
from gateway.geo.receiver._deliveries import Deliveries
from gateway.geo.receiver._marks import DoneMarks
from gateway.geo.receiver._pumps import Pumps
from gateway.geo.receiver._run import (
    SETTLE_TIMEOUT,
    Handler,
    MessageInboxHandler,
    Runner,
    StopFlag,
)
from gateway.geo.receiver._settle import Settler
from gateway.stores import (
    DedupTarget,
    FallbackDedupStore,
    PostgresDedupStore,
    open_dedup_store,
)
from gateway.transports.base import ReceivedMessage, Transport
from replication import (
    RECEIVE_DEADLINES,
    DeadlineEstimator,
    DeadlinePolicy,
    Deduplicator,
    DedupWindow,
    GatewayError,
    MessageRejected,
    NamespaceMisconfigured,
    NamespaceUnavailable,
    Operation,
    StoreUnavailable,
    Verdict,
    scoped,
)

__all__ = ["AsyncGeoReceiver", "Handler", "MessageInboxHandler", "ReceiverStats", "StopFlag"]

logger = logging.getLogger("geogateway")


_RECHECK_SECONDS = 1.0
#: What a subscription's path holds (TOPIC/Subscriptions/SUB, any case).
_SUBSCRIPTION = "/subscriptions/"


@dataclass(frozen=True, kw_only=True)
class ReceiverStats:
    """Counters since the receiver started."""

    received: int
    delivered: int
    duplicates_suppressed: int
    held: int
    completed: int
    abandoned: int
    #: Copies whose settlement failed or got no answer within its deadline (they come
    #: back when their locks expire: suppressed if done, else delivered again).
    unsettled: int = 0


class AsyncGeoReceiver(Runner, Settler, Pumps):
    """Receives from both namespaces and delivers each ``MessageId`` once.

    Args:
        primary: ``local://NAME``, a connection string, a ``NamespaceConfig`` or a
            ``Transport``.
        secondary: the same for the secondary namespace.
        entity: the queue to receive from, or a topic's subscription,
            ``"TOPIC/Subscriptions/SUB"`` (its ids are de-duplicated within that
            subscription: see ``replication.scoped``).
        dedup_store: a path (a persistent SQLite window, shared by the processes of
            one machine), a PostgreSQL DSN (``postgresql://...``) or a
            ``psycopg_pool.ConnectionPool`` (one window for a fleet of machines, schema
            ``geogateway``), or a ``DedupStore`` (e.g. a ``PostgresDedupStore`` with a
            schema of its own). Closed by :meth:`aclose`.
        dedup_fallback: a SQLite file this receiver de-duplicates against while a
            shared store stays unreachable (``FallbackDedupStore``: at-least-once
            across machines meanwhile); None (the default): wait for the store.
        dedup_window: how long and how many ids are remembered (default 10 min, 1M).
        dedup_lease: seconds a delivered copy's claim holds the other copy back; a
            receiver that crashed with the copy leaves it to the others after this.
        prefetch: messages each namespace's pump keeps received ahead of the caller.
        hooks: observability callbacks (``on_duplicate``, ``on_namespace_down`` ...);
            a hook that traces (``gateway.observability.Tracing``) traces receives,
            ``run()``'s handler calls and settlements.
        data_dir: the directory of local namespaces.
        deadlines: how long a settlement, or a receive beyond its own wait, may take
            on a namespace before it counts as not answering (a hung namespace is
            then reported down; the other is still read). Default
            ``replication.RECEIVE_DEADLINES`` (1 to 3 s).
    """

    def __init__(
        self,
        *,
        primary: NamespaceLike,
        secondary: NamespaceLike,
        entity: str,
        dedup_store: DedupTarget,
        dedup_window: DedupWindow | None = None,
        dedup_fallback: str | os.PathLike[str] | None = None,
        dedup_lease: float = 60.0,
        prefetch: int = 100,
        hooks: GatewayHooks | Iterable[GatewayHooks] = (),
        data_dir: str | os.PathLike[str] | None = None,
        poll_wait: float = 0.25,
        clock: Callable[[], float] = time.time,
        deadlines: DeadlinePolicy | None = None,
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        self.entity = check_entity(entity)
        self._hooks = [hooks] if isinstance(hooks, GatewayHooks) else list(hooks)
        self._prefetch = prefetch
        self._poll_wait = poll_wait
        self._transports: dict[str, Transport] = {}
        self._owned: list[Transport] = []
        for ns in (primary, secondary):
            transport, owned = open_transport(ns, data_dir=data_dir)
            self._transports[transport.namespace] = transport
            if owned:
                self._owned.append(transport)
        store = open_dedup_store(dedup_store, window=dedup_window, fallback=dedup_fallback)
        # A PostgreSQL store connects when the receiver is opened (or first used).
        shared = store.shared if isinstance(store, FallbackDedupStore) else store
        self._connect = shared.open if isinstance(shared, PostgresDedupStore) else None
        if _SUBSCRIPTION in self.entity.lower():
            # The topic's copies in every subscription share their MessageIds: a store
            # shared by receivers of several subscriptions keeps one window for each.
            store = scoped(store, self.entity.lower())
        self._dedup = Deduplicator(store, window=dedup_window, clock=clock, lease=dedup_lease)
        self._closing = False
        self._watch = StoreWatch(store, hooks=self._hooks, stopping=lambda: self._closing)
        self._marks: DoneMarks[tuple[ReceivedMessage, bool]] = DoneMarks(
            self._dedup, self._on_marked, self._watch)
        self._tracer = find_tracer(self._hooks)
        self._systems = {ns: messaging_system(t) for ns, t in self._transports.items()}
        self._last_recheck = 0.0
        self._arrived = asyncio.Event()  # the inbox got copies, or a pump an outcome
        self._room = asyncio.Event()  # copies left the inbox: the pumps may receive more
        self._deliveries = Deliveries(arrived=self._arrived.set, room=self._room.set)
        self._down: set[str] = set()
        self._read: set[str] = set()
        self._refused: dict[str, MessageRejected | NamespaceMisconfigured] = {}
        self._answer = asyncio.Event()  # a pump got an outcome (messages, none, an error)
        self._fatal: Exception | None = None  # raised by receive() from now on
        self._pumps: list[asyncio.Task[None]] = []
        self._counts = dict.fromkeys(
            ("received", "delivered", "duplicates_suppressed", "completed", "abandoned",
             "unsettled"), 0
        )
        self._estimator = DeadlineEstimator(deadlines or RECEIVE_DEADLINES)
        self._settle_hung: set[str] = set()  # namespaces whose last settlement timed out

    @property
    def stats(self) -> ReceiverStats:
        return ReceiverStats(held=self._deliveries.held, **self._counts)

    async def __aenter__(self) -> AsyncGeoReceiver:
        await self.open()
        return self

    async def open(self) -> None:
        """Connect to a PostgreSQL dedup store and bring its tables up to date, in a
        worker thread (``async with`` does it; otherwise the first store call does).

        Raises:
            ConfigError: the store's server is unreachable, refuses the credentials,
                has no such database, or its tables cannot be made or are newer.
        """
        if self._connect is not None:
            await anyio.to_thread.run_sync(self._connect)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

    # -- receiving ------------------------------------------------------------------

    async def receive(
        self, max_messages: int = 10, max_wait: float = 5.0
    ) -> list[ReceivedMessage]:
        """Return up to ``max_messages`` first copies, waiting up to ``max_wait`` seconds.

        Settle each with :meth:`complete` or :meth:`abandon`.

        A namespace that refuses to be read for good (a wrong key, no such entity)
        is logged, reported to ``on_namespace_down`` and in :attr:`refused`, and
        left out; the other namespace is still read.

        Raises:
            NamespaceUnavailable: both namespaces are down (an outage is never
                reported as an empty queue).
            MessageRejected: both namespaces refused to be read.
            StoreUnavailable: the dedup store does not answer (reported once to the
                log and ``on_store_down``); the copies wait, nothing is delivered.
            Exception: a pump stopped on an error outside the gateway's error tree
                (a bug, logged once with its traceback); raised by every call after.
        """
        self._start_pumps()
        # Yield at least once per call: a caller that retries at once after
        # NamespaceUnavailable must not starve the pumps that notice the recovery.
        await anyio.lowlevel.checkpoint()
        deadline = time.monotonic() + max_wait
        out: list[ReceivedMessage] = []
        while True:
            if self._fatal is not None:
                raise self._fatal
            self._raise_mark_error()
            await self._sort_inbox(out, max_messages)
            if out:
                return out
            if len(self._down) == len(self._transports):
                raise NamespaceUnavailable(
                    "both namespaces are unavailable", namespace=",".join(sorted(self._down))
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            self._arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(remaining, self._poll_wait))

    async def _sort_inbox(self, out: list[ReceivedMessage], max_messages: int) -> None:
        state = self._deliveries
        self._recheck_foreign_holds()
        while state.waiting and len(out) < max_messages:
            # Take no more than there is room for: a claimed copy that did not fit
            # would be pushed back to the front, reversing the order of the rest.
            take: list[ReceivedMessage] = []
            for received in state.take(max_messages - len(out)):
                # A copy of an id in flight here (its handler runs, or its mark waits
                # for the store) is held without asking the store: even once its lease
                # ran out it must not be delivered twice by this receiver.
                if state.in_flight(received.message_id):
                    state.hold(received)
                else:
                    take.append(received)
            if take:
                await self._sort(take, out, max_messages)

    async def _sort(self, take: list[ReceivedMessage], out: list[ReceivedMessage],
                    max_messages: int) -> None:
        # Ask the store about copies whose ids are not in flight here, and deliver,
        # hold, or settle each as a duplicate.
        state = self._deliveries
        ids = [m.message_id for m in take]
        try:
            verdicts = await self._watch.once("checking ids", self._dedup.check_many,
                                              ids, timed="check", count=len(ids))
        except StoreUnavailable:
            state.put_back(take)  # kept, in order, for the next try
            raise
        again: list[ReceivedMessage] = []
        duplicates: list[ReceivedMessage] = []
        for received, verdict in zip(take, verdicts, strict=True):
            if verdict is Verdict.DUPLICATE:
                duplicates.append(received)
            elif verdict is not Verdict.DELIVER or state.in_flight(received.message_id):
                # Another copy is in flight, here or in another process (a copy in
                # flight here when the store claimed it for us again: held all the same).
                state.hold(received)
            elif len(out) < max_messages:
                out.append(received)
                state.deliver(received)
                self._counts["delivered"] += 1
            else:
                # Claimed but no room: give the claim back and keep it for later.
                with contextlib.suppress(StoreUnavailable):  # the lease runs out
                    await dedup_call(self._hooks, "release", 1, self._dedup.failed,
                                     received.message_id)
                again.append(received)
        state.put_back(again)
        await self._settle_duplicates(duplicates)

    def _recheck_foreign_holds(self) -> None:
        # A copy held because another *process* is handling its id is settled by
        # nothing here; look at it again now and then (the other process may have
        # finished, or died and let its claim expire).
        now = time.monotonic()
        if now - self._last_recheck < _RECHECK_SECONDS:
            return
        self._last_recheck = now
        self._deliveries.recall()

    async def complete(self, message: ReceivedMessage) -> None:
        """The handler succeeded: record the id as done, then settle every copy.

        Every copy is settled only after the id's done mark committed, so even if
        settling fails (the namespace went down, the lock expired) the redelivered
        copy is suppressed. The marks of messages completed in a row are written
        together, in one transaction of the dedup store: while the caller still holds
        other messages this returns at once, and the call that completes the last
        message out returns once every mark is written and every copy settled.

        Raises:
            GatewayError: the dedup store failed to record this or an earlier
                completion (those messages stay unsettled and come back).
        """
        self.complete_nowait(message)
        if self._deliveries.caller_holds_none:
            await self._marks.wait()
        self._raise_mark_error()

    async def abandon(self, message: ReceivedMessage) -> None:
        """The handler failed: release the id so a copy may be delivered again.

        With the dedup store unreachable the claim stays until its lease runs out (then
        a copy may be delivered again); the message is abandoned all the same.
        """
        self._counts["abandoned"] += 1
        await self._release(message, abandon=True)

    async def dead_letter(
        self, message: ReceivedMessage, *, reason: str, description: str = ""
    ) -> None:
        """Move the message to its namespace's dead-letter sub-queue; the id counts as done.

        The copy is dead-lettered first and its id marked done after: a dead-letter that
        fails (or gets no answer) leaves the id undone and its claim released, so the
        other copy, or this one when its lock expires, is delivered again and can be
        dead-lettered then (at worst both copies are dead-lettered; none is lost).

        Raises:
            OperationTimeout: the namespace did not answer within its settle deadline
                (the id is not done; the copy comes back when its lock expires).
            GatewayError: the dead-lettering failed (the id is not done), or the done
                mark could not be written (the copy is dead-lettered; the other one
                may be delivered once its claim runs out).
        """
        transport = self._transports[message.namespace]
        try:
            await within_deadline(
                self._estimator, message.namespace, Operation.SETTLE,
                lambda: transport.dead_letter(message, reason=reason,
                                              description=description),
                what=f"dead-letter {message.message_id!r}")
        except GatewayError:
            await self._release(message, abandon=False)
            raise
        try:
            await asyncio.shield(self._queue_done(message, settle=False))
        except GatewayError:
            self._marks.take_error()  # reported here
            raise

    async def _release(self, message: ReceivedMessage, *, abandon: bool) -> None:
        # Give the id's claim back (kept until its lease runs out while the store does
        # not answer) and its held copies back to the inbox; abandon the copy, or
        # leave it (its lock expires and it comes back).
        with contextlib.suppress(StoreUnavailable):
            await self._watch.once("releasing a claim", self._dedup.failed,
                                   message.message_id, timed="release")
        self._deliveries.release(message.message_id)
        if abandon:
            await self._settle_all([(message, "abandon")])

    async def aclose(self) -> None:
        """Wait for the marks and settlements in flight, stop the pumps, give back every
        message not delivered, close what was opened.

        Raises:
            GatewayError: a completion that no call waited for could not be marked done.
        """
        if self._closing:
            return
        self._closing = True
        self._room.set()
        with anyio.move_on_after(SETTLE_TIMEOUT):
            await self._marks.wait()
        if self._pumps:
            _, pending = await asyncio.wait(self._pumps, timeout=self._poll_wait + 2.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        leftovers = self._deliveries.drain()
        await self._settle_all([(received, "abandon") for received in leftovers])
        for transport in self._owned:
            await transport.aclose()
        try:
            await anyio.to_thread.run_sync(self._dedup.close)
        except GatewayError as exc:  # the claims could not be released: their leases run out
            logger.warning("closing the %s: %s", self._watch.store, exc)
        self._raise_mark_error()  # a completion nobody waited for could not be marked
