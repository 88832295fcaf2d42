"""A shared de-duplication store with this machine's own window to fall back on.

By default a receiver whose shared (PostgreSQL) store is unreachable waits: it settles
nothing and delivers nothing new until the store is back, so the fleet never delivers
a message twice, and makes no progress meanwhile. :class:`FallbackDedupStore` is the
opt-in other choice: once the shared store has been unreachable for ``after``
seconds, claims and done marks go to a local SQLite window, which is logged (a
warning naming both) and passed to ``on_switch``. This machine then de-duplicates
only against itself: the copy another machine receives may be delivered there too
(**at-least-once until the store is back**). A background probe finds the shared store
again; the done marks written locally meanwhile are copied to it, and it is used
again (logged and passed to ``on_switch`` too).

The transactional inbox never falls back: its handler writes the application's tables
in the shared database, which is the one that is down; it waits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gateway.stores._dedup import SqliteDedupStore
from replication import (
    ConfigError,
    DedupStore,
    DedupWindow,
    StoreUnavailable,
    TransactionalDedupStore,
    Verdict,
)

__all__ = ["FallbackDedupStore"]

logger = logging.getLogger("geogateway")

T = TypeVar("T")

#: ``on_switch(active, error)``: True with the error when the fallback is taken, False
#: (and None) when the shared store is used again.
SwitchCallback = Callable[[bool, "BaseException | None"], None]


class FallbackDedupStore(DedupStore):
    """The shared ``store``, or ``fallback`` while the shared one stays unreachable.

    Args:
        store: the fleet's store (e.g. :class:`~gateway.stores.PostgresDedupStore`);
            an outage is its :class:`~replication.StoreUnavailable`.
        fallback: a SQLite file path (created 0600) or a ``SqliteDedupStore``: this
            machine's window while the shared one is away.
        after: seconds of unavailability before the fallback is used (until then the
            outage is raised, and receivers wait).
        probe_every: seconds between probes of the shared store while falling back.
        on_switch: called as ``on_switch(True, error)`` when the fallback is taken and
            ``on_switch(False, None)`` when the shared store is used again; from the
            thread that made the call that switched (more with :meth:`listen`).

    Raises:
        ConfigError: a bad option, or the fallback file cannot be opened.
    """

    def __init__(
        self,
        store: DedupStore,
        fallback: str | os.PathLike[str] | SqliteDedupStore,
        *,
        after: float = 5.0,
        probe_every: float = 2.0,
        on_switch: SwitchCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not after >= 0 or not probe_every > 0:
            raise ConfigError("after must be >= 0 and probe_every > 0")
        self.window: DedupWindow = store.window
        self._shared = store
        self._local = (fallback if isinstance(fallback, SqliteDedupStore)
                       else SqliteDedupStore(fallback, window=store.window))
        self._after = after
        self._probe_every = probe_every
        self._clock = clock
        self._listeners: list[SwitchCallback] = [on_switch] if on_switch else []
        self._lock = threading.Lock()
        self._failing_since: float | None = None
        self._local_since: float | None = None  # wall time the fallback was taken
        # The done marks written locally, to hand to the shared store once it is back.
        self._marked: list[tuple[float, list[str]]] = []
        self._copied = 0
        self._closed = threading.Event()
        self._prober: threading.Thread | None = None

    def listen(self, callback: SwitchCallback) -> None:
        """Call ``callback`` too at each switch (the receivers' hooks use it)."""
        self._listeners.append(callback)

    @property
    def falling_back(self) -> bool:
        """Whether claims and marks go to the local window now."""
        return self._local_since is not None

    @property
    def fallback_path(self) -> str:
        """The local window's file."""
        return self._local.path

    @property
    def shared(self) -> DedupStore:
        """The fleet's store."""
        return self._shared

    def __repr__(self) -> str:
        return f"FallbackDedupStore({self._shared!r}, fallback={self._local.path!r})"

    # -- switching --------------------------------------------------------------------

    def _call(self, op: Callable[[DedupStore], T]) -> T:
        with self._lock:
            if self._local_since is not None:
                return op(self._local)
            try:
                result = op(self._shared)
            except StoreUnavailable as exc:
                now = self._clock()
                if self._failing_since is None:
                    self._failing_since = now
                if now - self._failing_since < self._after:
                    raise
                self._leave(exc)
                return op(self._local)
            self._failing_since = None
            return result

    def _leave(self, exc: StoreUnavailable) -> None:
        self._local_since = time.time()
        logger.warning("the shared dedup store stayed unavailable for %.3g s (%s): using "
                       "the local window %s meanwhile; messages may be delivered more than "
                       "once across machines until it is back", self._after, exc,
                       self._local.path)
        self._prober = threading.Thread(target=self._probe, name="geogateway-dedup-probe",
                                        daemon=True)
        self._prober.start()
        self._tell(True, exc)

    def _probe(self) -> None:
        # Until the shared store answers again and takes the local marks: then it is
        # used again from the next call (an idle receiver hears of it at once too).
        while not self._closed.wait(self._probe_every):
            try:
                ping = getattr(self._shared, "ping", None)
                if ping is not None:
                    ping()
                else:
                    self._shared.peek("", now=time.time())
                with self._lock:
                    if self._closed.is_set():
                        return
                    self._return()
            except Exception:  # still away: probe again
                continue
            return

    def _return(self) -> None:
        while self._marked:
            done_at, ids = self._marked[0]
            self._shared.finish_many(ids, owner="", succeeded=True, now=done_at)
            self._marked.pop(0)
            self._copied += len(ids)
        marks, self._copied = self._copied, 0
        self._local_since = None
        self._failing_since = None
        logger.warning("the shared dedup store is back: %d done mark(s) of the local window "
                       "%s copied to it; using it again", marks, self._local.path)
        self._tell(False, None)

    def _tell(self, active: bool, error: BaseException | None) -> None:
        for listener in self._listeners:
            try:
                listener(active, error)
            except Exception:
                logger.exception("a dedup fallback listener failed")

    # -- the store --------------------------------------------------------------------

    def claim(
        self, message_ids: Sequence[str], *, owner: str, now: float, lease: float
    ) -> list[Verdict]:
        """See :meth:`replication.DedupStore.claim`."""
        return self._call(lambda s: s.claim(message_ids, owner=owner, now=now, lease=lease))

    def finish(self, message_id: str, *, owner: str, succeeded: bool, now: float) -> None:
        """See :meth:`replication.DedupStore.finish`."""
        self.finish_many([message_id], owner=owner, succeeded=succeeded, now=now)

    def finish_many(
        self, message_ids: Sequence[str], *, owner: str, succeeded: bool, now: float
    ) -> None:
        """See :meth:`replication.DedupStore.finish_many`."""
        def finish(store: DedupStore) -> None:
            store.finish_many(message_ids, owner=owner, succeeded=succeeded, now=now)
            if succeeded and store is self._local:
                self._marked.append((now, list(message_ids)))

        self._call(finish)

    def peek(self, message_id: str, *, now: float) -> Verdict:
        """See :meth:`replication.DedupStore.peek`."""
        return self._call(lambda s: s.peek(message_id, now=now))

    def prune(self, *, now: float, window: DedupWindow) -> int:
        """See :meth:`replication.DedupStore.prune` (of the store in use)."""
        return self._call(lambda s: s.prune(now=now, window=window))

    def finish_with_effect(
        self, message_id: str, *, owner: str, now: float, effect: Callable[[Any], None]
    ) -> bool:
        """The shared store's inbox, never the fallback's (see the module docstring).

        Raises:
            ConfigError: the shared store has no transactional inbox.
            StoreUnavailable: the shared store is unreachable.
        """
        shared = self._shared
        if not isinstance(shared, TransactionalDedupStore):
            raise ConfigError(f"{type(shared).__name__} has no finish_with_effect")
        return shared.finish_with_effect(message_id, owner=owner, now=now, effect=effect)

    def reserve(self, handlers: int) -> None:
        """The shared store's ``reserve`` (room for concurrent inbox handlers), if any."""
        reserve = getattr(self._shared, "reserve", None)
        if reserve is not None:
            reserve(handlers)

    def close(self) -> None:
        """Stop probing and close both stores."""
        self._closed.set()
        try:
            self._shared.close()
        finally:
            self._local.close()
