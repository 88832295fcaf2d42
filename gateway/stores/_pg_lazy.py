"""A PostgreSQL store's connection, opened and migrated on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from gateway.stores._pg import PgTarget, migrate

__all__ = ["LazyTarget"]


class LazyTarget:
    """A store's connection, opened and migrated on first use (once, from any thread)
    and closed once.

    Args:
        open_target: opens the pool (``functools.partial(open_pool, ...)``).
        component: the migrated tables' name (:func:`migrate`).
        steps: their migrations.
        what: the store, for errors (``"roles store"``).
    """

    def __init__(self, open_target: Callable[[], PgTarget], component: str,
                 steps: Sequence[str], what: str) -> None:
        self._open = open_target
        self._component = component
        self._steps = steps
        self._what = what
        self._target: PgTarget | None = None
        self._lock = threading.Lock()
        self.closed = False

    def open(self) -> PgTarget:
        """The open connection: connect and migrate unless done already (blocking).

        Raises:
            ConfigError: as :func:`open_pool` and :func:`migrate` (the server's answer).
            RuntimeError: closed.
        """
        target = self._target
        if target is not None:
            return target
        with self._lock:
            if self.closed:
                raise RuntimeError(f"the {self._what} is closed")
            if self._target is None:
                target = self._open()
                try:
                    migrate(target, self._component, self._steps)
                except BaseException:
                    target.close()
                    raise
                self._target = target
            return self._target

    def close(self) -> None:
        """Close what :meth:`open` opened; later opens raise. Idempotent."""
        with self._lock:
            self.closed = True
            target, self._target = self._target, None
        if target is not None:
            target.close()
