"""The PostgreSQL stores' connections through a restart, a freeze or a half-open link.

- **Reconnecting in the background, at once.** A pool the store opens makes its
  connections with :func:`reconnecting_class`: a connection attempt that fails (the
  server is restarting, or gone) is tried again after 50 ms, then at most every
  250 ms, until it succeeds or the store closes. A caller waiting for a connection
  is handed the first one made, so the store is usable within a fraction of a second
  of the server being back (psycopg_pool's own backoff doubles from 1 s, and its
  waiting callers sit out their whole timeout once it gives up).
- **A deadline per call.** A call waits for a connection for what is left of its
  deadline, the server ends a statement or a lock wait at the call timeout
  (``statement_timeout``, ``lock_timeout``), and :class:`Watchdog` shuts the socket of a
  call still running at its deadline: a frozen server (its processes stopped) or a
  half-open connection (a failover, a network partition) is a broken connection, not
  a call that waits for minutes. TCP keepalives and ``tcp_user_timeout`` find a dead
  peer under an idle pooled connection.
- **One line per outage.** The pool's own warnings about the store's connections
  (broken, closed, failed attempts) are folded into the store's "unavailable" and
  "is back" lines (:class:`QuietPoolWarnings`); they are counted, never printed.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from gateway._support.secrets import redact

if TYPE_CHECKING:
    import psycopg

__all__ = ["QuietPoolWarnings", "Watchdog", "caller_deadline", "reconnecting_class",
           "session_options", "store_deadline"]

_FIRST_RETRY = 0.05  # seconds before a failed connection attempt is made again
_MOST_RETRY = 0.25  # the longest pause between attempts: the bound on "usable again"

#: The monotonic time a store call must be over by (set by async callers that have a
#: deadline of their own; a worker thread sees it through the copied context).
_DEADLINE: ContextVar[float] = ContextVar("geogateway_store_deadline", default=float("inf"))


@contextlib.contextmanager
def store_deadline(seconds: float) -> Iterator[None]:
    """Store calls made inside end within ``seconds`` (if sooner than their own
    timeout)."""
    token = _DEADLINE.set(min(_DEADLINE.get(), time.monotonic() + seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def caller_deadline() -> float:
    """The monotonic deadline set by :func:`store_deadline`, or infinity."""
    return _DEADLINE.get()


class Reconnecting:
    """What one pool's connection attempts share: when to stop, and the last reason."""

    def __init__(self) -> None:
        self.closing = threading.Event()
        self.last_error = ""


def reconnecting_class(state: Reconnecting) -> type[psycopg.Connection[Any]]:
    """A connection class whose ``connect`` keeps trying until it succeeds or
    ``state.closing`` is set (then it raises the last error)."""
    import psycopg

    class StoreConnection(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> StoreConnection:
            pause = _FIRST_RETRY
            while True:
                try:
                    conn = super().connect(conninfo, **kwargs)
                except psycopg.OperationalError as exc:
                    state.last_error = redact(" ".join(str(exc).split()))[:200]
                    if state.closing.wait(pause * random.uniform(0.8, 1.2)):
                        raise
                    pause = min(pause * 2, _MOST_RETRY)
                    continue
                state.last_error = ""
                return conn

    return StoreConnection


def session_options(call_timeout: float, existing: str) -> dict[str, Any]:
    """libpq keywords for the store's connections: server-side statement and lock
    timeouts a little inside ``call_timeout`` (so the server ends a slow call cleanly
    before the watchdog breaks it), TCP keepalives and a TCP user timeout."""
    millis = max(1, int(call_timeout * 1000))
    server = max(1, int(millis * 0.9))
    options = f"-c statement_timeout={server} -c lock_timeout={server}"
    return {
        "options": f"{existing} {options}" if existing else options,
        "keepalives": 1,
        "keepalives_idle": max(1, int(call_timeout)),
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "tcp_user_timeout": millis,
    }


class Watchdog:
    """Shuts the socket of a connection whose call outlived its deadline.

    libpq waits on the socket as long as it takes: a frozen server's kernel still
    acknowledges every packet, so neither keepalives nor a TCP timeout end the wait.
    Shutting the socket down wakes the waiting call with "server closed the
    connection" (the connection is then broken and the pool discards it). One thread
    for the process; ``arm``/``disarm`` cost a lock and a heap push.
    """

    _instance: Watchdog | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, psycopg.Connection[Any]] = {}
        self._tokens = itertools.count()
        threading.Thread(target=self._run, name="geogateway-pg-watchdog", daemon=True).start()

    @classmethod
    def shared(cls) -> Watchdog:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = Watchdog()
            return cls._instance

    def arm(self, conn: psycopg.Connection[Any], deadline: float) -> int:
        """Watch ``conn`` until :meth:`disarm`; at ``deadline`` (monotonic) break it."""
        token = next(self._tokens)
        with self._cond:
            self._armed[token] = conn
            heapq.heappush(self._heap, (deadline, token))
            if self._heap[0][1] == token:
                self._cond.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    if self._heap and self._heap[0][1] not in self._armed:
                        heapq.heappop(self._heap)  # disarmed: forget it
                        continue
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, token = heapq.heappop(self._heap)
                conn = self._armed.pop(token, None)
                if conn is not None:
                    _shut(conn)  # under the lock: disarm cannot race it


def _shut(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(Exception):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


class QuietPoolWarnings(logging.Filter):
    """Drops psycopg_pool's warnings about the stores' own pools and connections
    (the store reports the outage once itself); counts them in :attr:`folded`."""

    folded = 0
    _installed = False
    _lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        for arg in args:
            if _ours(arg):
                with QuietPoolWarnings._lock:
                    QuietPoolWarnings.folded += 1
                return False
        return True

    @classmethod
    def install(cls) -> None:
        with cls._lock:
            if not cls._installed:
                logging.getLogger("psycopg.pool").addFilter(cls())
                cls._installed = True


def _ours(arg: object) -> bool:
    if type(arg).__name__ == "StoreConnection":
        return True
    return "geogateway-" in (arg if isinstance(arg, str) else repr(arg)[:200])
