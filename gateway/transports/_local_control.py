"""The control file of a local namespace: down/up and injected faults.

``DATA_DIR/NAME.control.json`` holds ``{"down": bool, "latency": float,
"lost_replies": float}``. Any process may write it (``geogateway namespace down
primary``); every operation of every client checks it first. Writes are atomic
(temporary file + ``os.replace``), so a reader sees the old or the new state,
never half of one. Reads are cheap: one ``os.stat`` per operation, and the file is
parsed again only when its identity (inode, mtime, size) changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass

from replication import ConfigError

__all__ = ["ControlFile", "ControlState"]


@dataclass(frozen=True, kw_only=True)
class ControlState:
    """What the control file says: whether the namespace is down, and its faults."""

    down: bool = False
    latency: float = 0.0
    lost_replies: float = 0.0


_UP = ControlState()


def validate_faults(*, latency: float, lost_replies: float) -> None:
    """Raise ``ConfigError`` for a negative latency or a probability outside 0..1."""
    if not latency >= 0.0:  # also rejects NaN
        raise ConfigError(f"latency must be >= 0 seconds, got {latency!r}")
    if not 0.0 <= lost_replies <= 1.0:
        raise ConfigError(f"lost_replies is a probability from 0 to 1, got {lost_replies!r}")


class ControlFile:
    """Reads (cached by ``os.stat``) and writes one namespace's control file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._state = _UP

    def read(self) -> ControlState:
        """The current state; a missing or unreadable file means "up, no faults"."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return _UP
        except OSError:
            return self._state
        # os.replace gives every write a new inode, so this changes on every write
        # even where mtime has a coarse resolution.
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with self._lock:
                self._state = self._load()
                self._stamp = stamp
        return self._state

    def _load(self) -> ControlState:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
            return ControlState(
                down=bool(raw.get("down", False)),
                latency=max(0.0, float(raw.get("latency", 0.0))),
                lost_replies=min(1.0, max(0.0, float(raw.get("lost_replies", 0.0)))),
            )
        except (OSError, ValueError, TypeError, AttributeError):
            # A hand-edited, broken control file must not take the namespace down
            # (or up) by accident: keep the last state we understood.
            return self._state

    def write(self, state: ControlState) -> None:
        """Replace the control file atomically with ``state``."""
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        payload = json.dumps(
            {"down": state.down, "latency": state.latency, "lost_replies": state.lost_replies}
        )
        # mkstemp creates the file 0600 in the same directory, so os.replace is atomic.
        fd, tmp = tempfile.mkstemp(prefix=".control-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(payload)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
