"""One shared store's outages, reported once: a warning when it goes away (no
traceback: a connection error says all there is), one when it is back, listeners
told both, and a count."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["StoreOutages"]

logger = logging.getLogger("geogateway.stores")

Listener = Callable[[bool, BaseException | None], None]


class StoreOutages:
    """The outages of one store (``name``: what the lines call it, no password).

    Args:
        name: e.g. ``checkpoint store at db.example.com:5432/orders as app``.
        meanwhile: what the "unavailable" line says happens until it is back.
    """

    def __init__(self, name: str, *, meanwhile: str) -> None:
        self.name = name
        self.down = False
        #: How many outages began (each one warning line).
        self.count = 0
        self._meanwhile = meanwhile
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def listen(self, listener: Listener) -> None:
        """Call ``listener(available, error)`` when the store goes away and comes back."""
        self._listeners.append(listener)

    def failed(self, doing: str, exc: BaseException) -> None:
        """A call found the store unavailable: the first one of an outage is reported."""
        with self._lock:
            if self.down:
                return
            self.down = True
            self.count += 1
        logger.warning("%s is unavailable (%s failed: %s); %s", self.name, doing, exc,
                       self._meanwhile)
        self._tell(False, exc)

    def answered(self) -> None:
        """A call succeeded: the end of an outage is reported."""
        if not self.down:
            return
        with self._lock:
            if not self.down:
                return
            self.down = False
        logger.warning("%s is back", self.name)
        self._tell(True, None)

    def _tell(self, available: bool, exc: BaseException | None) -> None:
        for listener in self._listeners:
            try:
                listener(available, exc)
            except Exception:  # a listener never stops the store
                logger.exception("a store outage listener failed")
