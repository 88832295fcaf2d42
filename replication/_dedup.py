"""The ``MessageId`` de-duplicator: deliver the first copy, hold or drop the other.

Both namespaces deliver a copy of every replicated message. For each copy the
receiver asks :meth:`Deduplicator.check` and gets a :class:`Verdict`:

* ``DELIVER``: this copy is now claimed by this deduplicator (in flight); run the
  handler, then report :meth:`~Deduplicator.succeeded` or :meth:`~Deduplicator.failed`.
* ``HOLD``: another copy is in flight (here or in another process); do not run the
  handler and do not complete this copy: abandon it / retry it later.
* ``DUPLICATE``: the id was handled successfully within the window; drop the copy.

An id is *done* only when its handler succeeded. A claim is a lease: a holder that
crashes (or overruns ``lease`` seconds) loses it, and the other copy can then be
delivered. State lives behind the small :class:`DedupStore` seam so that several
processes can share one persistent store (``gateway.SqliteDedupStore``); this
module has no I/O of its own and reads time only through the injected ``clock``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from replication._dedup_front import HashWindow
from replication._dedup_types import (
    DEFAULT_DEDUP_WINDOW,
    DedupStats,
    DedupStore,
    DedupWindow,
    TransactionalDedupStore,
    Verdict,
)
from replication._errors import ConfigError

__all__ = [
    "DEFAULT_DEDUP_WINDOW",
    "DedupStats",
    "DedupStore",
    "DedupWindow",
    "Deduplicator",
    "InMemoryDedupStore",
    "TransactionalDedupStore",
    "Verdict",
]


class InMemoryDedupStore(DedupStore):
    """A :class:`DedupStore` in plain dicts, for tests and single-process receivers.

    Not persistent and not shared across processes. State lives on the instance.
    Keeps full str ids, so it costs ~200 bytes per id; use the SQLite store for big
    windows.

    Args:
        window: the authoritative window (see :class:`DedupStore`).
    """

    def __init__(self, *, window: DedupWindow = DEFAULT_DEDUP_WINDOW) -> None:
        self.window = window
        # Insertion order is done order (a re-done id is moved to the end), so
        # pruning pops from the front in O(1) per id.
        self.done: dict[str, float] = {}
        self.claims: dict[str, tuple[str, float]] = {}
        self.closed = False

    def _verdict(self, message_id: str, now: float) -> Verdict:
        done_at = self.done.get(message_id)
        if done_at is not None and done_at > now - self.window.seconds:
            return Verdict.DUPLICATE
        claim = self.claims.get(message_id)
        if claim is not None and claim[1] > now:
            return Verdict.HOLD
        return Verdict.DELIVER

    def claim(
        self, message_ids: Sequence[str], *, owner: str, now: float, lease: float
    ) -> list[Verdict]:
        """See :meth:`DedupStore.claim`."""
        self._check_open()
        verdicts = []
        asked: set[str] = set()
        for message_id in message_ids:
            verdict = self._verdict(message_id, now)
            mine = self.claims.get(message_id, ("", 0.0))[0] == owner
            if verdict is Verdict.HOLD and mine and message_id not in asked:
                verdict = Verdict.DELIVER  # its own claim, whose answer it never got
            asked.add(message_id)
            if verdict is Verdict.DELIVER:
                self.claims[message_id] = (owner, now + lease)
            verdicts.append(verdict)
        return verdicts

    def finish(self, message_id: str, *, owner: str, succeeded: bool, now: float) -> None:
        """See :meth:`DedupStore.finish`."""
        self._check_open()
        claim = self.claims.get(message_id)
        if claim is not None and claim[0] == owner:
            del self.claims[message_id]
        if succeeded:
            self.done.pop(message_id, None)
            self.done[message_id] = now

    def peek(self, message_id: str, *, now: float) -> Verdict:
        """See :meth:`DedupStore.peek`."""
        self._check_open()
        return self._verdict(message_id, now)

    def prune(self, *, now: float, window: DedupWindow) -> int:
        """See :meth:`DedupStore.prune`."""
        self._check_open()
        cutoff, removed = now - window.seconds, 0
        while self.done:
            oldest = next(iter(self.done))
            if self.done[oldest] > cutoff and len(self.done) <= window.count:
                break
            del self.done[oldest]
            removed += 1
        expired = [mid for mid, (_, expires) in self.claims.items() if expires <= now]
        for message_id in expired:
            del self.claims[message_id]
        return removed + len(expired)

    def close(self) -> None:
        """Mark the store closed."""
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the dedup store is closed")


class Deduplicator:
    """De-duplicates received copies by ``MessageId`` over a :class:`DedupStore`.

    The in-memory front lives here: a :class:`~replication._dedup_front.HashWindow`
    of the ids this process marked done (64-bit keyed hashes, ~33 bytes per id), so
    that the second copy of a message this process handled is recognised without a
    store round trip, and a dict of this process's own in-flight claims so that the
    second copy of a message still in flight here short-circuits to ``HOLD``. A
    front hit is a hash match: the chance of dropping a new id as a duplicate is
    about ``n / 2**64`` with ``n`` ids in the window. Ids done by another process, or
    before a restart, are found in the store.

    The store is pruned at most every ``window.seconds / 10`` seconds (capped at
    60 s) or every ``window.count // 100`` successes, whichever comes first, so that
    pruning is amortized; between prunes the store may exceed ``window.count`` by
    that many rows. Thread-safe (one lock per instance).

    Args:
        store: where claims and done ids live; always passed explicitly.
        window: the window of the front and of pruning; defaults to ``store.window``.
        owner: this receiver's claim owner; a random id by default. Two deduplicators
            must not share an owner.
        lease: seconds a claim protects an in-flight copy before the other copy may
            be delivered (a crashed holder's copy is redelivered after this).
        clock: seconds since the epoch; shared with other processes of the store.

    Raises:
        ConfigError: ``window`` differs from ``store.window``, or ``lease`` <= 0.
    """

    def __init__(
        self,
        store: DedupStore,
        *,
        window: DedupWindow | None = None,
        owner: str | None = None,
        lease: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window is not None and window != store.window:
            raise ConfigError(f"window {window} differs from the store's {store.window}")
        if not lease > 0 or lease == float("inf"):
            raise ConfigError(f"lease must be > 0 and finite, not {lease}")
        self._store = store
        self._window = store.window
        self._owner = owner if owner is not None else uuid.uuid4().hex
        self._lease = float(lease)
        self._clock = clock
        self._front = HashWindow(seconds=self._window.seconds, count=self._window.count)
        self._inflight: dict[str, float] = {}  # id -> lease expiry of my claim
        self._lock = threading.Lock()
        self._checks = self._delivered = self._duplicates = self._held = 0
        self._prune_every = min(self._window.seconds / 10, 60.0)
        self._prune_after = max(1, self._window.count // 100)
        self._next_prune = float("-inf")
        self._done_since_prune = 0

    @property
    def window(self) -> DedupWindow:
        """The window in force."""
        return self._window

    @property
    def owner(self) -> str:
        """The owner this deduplicator claims ids as."""
        return self._owner

    @property
    def store(self) -> DedupStore:
        """The store behind this deduplicator."""
        return self._store

    def check(self, message_id: str) -> Verdict:
        """Decide about one received copy; ``DELIVER`` means it is claimed, in flight.

        Raises:
            GatewayError: the store failed (see the store's documentation).
        """
        return self.check_many([message_id])[0]

    def check_many(self, ids: Sequence[str]) -> list[Verdict]:
        """Decide about a received batch with at most one store round trip.

        Returns:
            One verdict per id, in order. A repeated id within the batch is ``HOLD``
            after the first occurrence (or ``DUPLICATE`` if it was done).
        """
        with self._lock:
            now = self._clock()
            self._maybe_prune(now)
            self._front.expire(now)
            verdicts: list[Verdict | None] = [None] * len(ids)
            ask: list[str] = []
            ask_at: list[int] = []
            for i, message_id in enumerate(ids):
                if self._front.hash(message_id) in self._front:
                    verdicts[i] = Verdict.DUPLICATE
                elif self._inflight.get(message_id, float("-inf")) > now:
                    verdicts[i] = Verdict.HOLD
                else:
                    # Repeats within the batch go to the store too, which answers
                    # HOLD for them because the first occurrence claimed the id.
                    ask.append(message_id)
                    ask_at.append(i)
            if ask:
                answers = self._store.claim(ask, owner=self._owner, now=now, lease=self._lease)
                for i, message_id, verdict in zip(ask_at, ask, answers, strict=True):
                    verdicts[i] = verdict
                    if verdict is Verdict.DELIVER:
                        self._inflight[message_id] = now + self._lease
            result = [v for v in verdicts if v is not None]
            self._count(result)
            return result

    def succeeded(self, message_id: str) -> None:
        """The handler succeeded: ``message_id`` is done and its other copy will be dropped.

        Raises:
            GatewayError: the store failed; the id is then not recorded as done.
        """
        self.succeeded_many([message_id])

    def succeeded_many(self, ids: Sequence[str]) -> None:
        """:meth:`succeeded` for several ids, in one store round trip where possible."""
        with self._lock:
            now = self._clock()
            self._store.finish_many(ids, owner=self._owner, succeeded=True, now=now)
            for message_id in ids:
                self._inflight.pop(message_id, None)
                self._front.add(self._front.hash(message_id), now)
            self._done_since_prune += len(ids)
            self._maybe_prune(now)

    @property
    def transactional(self) -> bool:
        """Whether the store supports :meth:`succeeded_with` (a transactional inbox)."""
        return isinstance(self._store, TransactionalDedupStore)

    def succeeded_with(self, message_id: str, effect: Callable[[Any], None]) -> bool:
        """Run the handler's ``effect`` and mark ``message_id`` done in ONE store transaction.

        The transactional inbox: ``effect(handle)`` gets the store's transactional
        handle (for ``SqliteDedupStore``, its ``sqlite3.Connection`` inside
        ``BEGIN IMMEDIATE``) and writes the application's data through it. Both commit
        together or neither does, so a crash between "the effect" and "the mark" cannot
        happen and the effect is exactly-once, not at-least-once as with
        :meth:`succeeded` after a handler with its own side effects. The store skips the
        effect when the id is already done (e.g. this claim's lease ran out and the
        other copy was handled meanwhile).

        The effect may be run again after a rollback (e.g. the store retries a
        transaction that found the file locked): it must act only through the handle.
        The store's transaction is held while it runs, so keep it short.

        Returns:
            True when the effect was committed; False when the id was already done
            and the effect was skipped (the caller should count a duplicate).

        Raises:
            ConfigError: the store has no ``finish_with_effect``.
            Exception: whatever ``effect`` raised (nothing was kept; the claim stays,
                so call :meth:`failed` to release it), or the store's error.
        """
        store = self._store
        if not isinstance(store, TransactionalDedupStore):
            raise ConfigError(f"{type(store).__name__} has no finish_with_effect: a "
                              "transactional inbox needs a store such as SqliteDedupStore")
        # The store serializes its own transactions; the effect runs outside this
        # deduplicator's lock, so that check() of other partitions is not blocked.
        now = self._clock()
        ran = store.finish_with_effect(message_id, owner=self._owner, now=now, effect=effect)
        with self._lock:
            self._inflight.pop(message_id, None)
            self._front.add(self._front.hash(message_id), now)
            if ran:
                self._done_since_prune += 1
            else:
                self._duplicates += 1
            self._maybe_prune(now)
        return ran

    def failed(self, message_id: str) -> None:
        """The handler failed: release the claim so that another copy may be delivered."""
        with self._lock:
            now = self._clock()
            self._inflight.pop(message_id, None)
            self._store.finish(message_id, owner=self._owner, succeeded=False, now=now)

    def is_done(self, message_id: str) -> bool:
        """Whether ``message_id`` was handled successfully within the window."""
        with self._lock:
            now = self._clock()
            self._front.expire(now)
            if self._front.hash(message_id) in self._front:
                return True
            return self._store.peek(message_id, now=now) is Verdict.DUPLICATE

    @property
    def stats(self) -> DedupStats:
        """Counters since creation; ``window_size`` counts the in-memory front."""
        with self._lock:
            return DedupStats(
                checks=self._checks,
                delivered=self._delivered,
                duplicates=self._duplicates,
                held=self._held,
                window_size=len(self._front),
            )

    def close(self) -> None:
        """Release this deduplicator's in-flight claims, then close the store.

        Releasing lets another receiver deliver the other copies at once instead of
        after the lease; a crash skips this and the leases expire instead.
        """
        with self._lock:
            try:
                if self._inflight:
                    ids = list(self._inflight)
                    self._inflight.clear()
                    now = self._clock()
                    self._store.finish_many(ids, owner=self._owner, succeeded=False, now=now)
            finally:
                self._store.close()

    def __enter__(self) -> Deduplicator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _count(self, verdicts: list[Verdict]) -> None:
        self._checks += len(verdicts)
        for verdict in verdicts:
            if verdict is Verdict.DELIVER:
                self._delivered += 1
            elif verdict is Verdict.DUPLICATE:
                self._duplicates += 1
            else:
                self._held += 1

    def _maybe_prune(self, now: float) -> None:
        if now < self._next_prune and self._done_since_prune < self._prune_after:
            return
        self._store.prune(now=now, window=self._window)
        self._next_prune = now + self._prune_every
        self._done_since_prune = 0
        # My leases that ran out are no longer mine to short-circuit on.
        for message_id in [m for m, exp in self._inflight.items() if exp <= now]:
            del self._inflight[message_id]
