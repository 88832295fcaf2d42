"""The control file of a local namespace: down/up and injected faults.

``DATA_DIR/NAME.control.json`` holds ``{"down": bool, "latency": float,
"lost_replies": float, "hang": bool}`` (``hang``: the namespace accepts connections and
never answers, the shape of a frozen front end). Any process may write it
(``geogateway namespace down primary``); every operation of every client checks it
first. Writes are atomic (temporary file + ``os.replace``), so a reader sees the old
or the new state, never half of one. Reads are cheap: one ``os.stat`` per operation, and the file is
parsed again only when its identity (inode, mtime, size) changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass

from replication import ConfigError

__all__ = [
    "NAME",
    "ControlFile",
    "ControlState",
    "default_data_dir",
    "namespace_files",
    "prepare_data_dir",
]

#: What a local namespace may be called (its name is part of its files' names).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def default_data_dir() -> str:
    """Where local namespaces live when no ``data_dir`` is given.

    Returns:
        ``$GEOGATEWAY_DATA_DIR`` when set, else
        ``platformdirs.user_data_dir("geogateway")/namespaces``.
    """
    from_env = os.environ.get("GEOGATEWAY_DATA_DIR")
    if from_env:
        return from_env
    import platformdirs  # only when needed: the CLI's start-up time

    return os.path.join(platformdirs.user_data_dir("geogateway"), "namespaces")


def prepare_data_dir(data_dir: str | os.PathLike[str] | None = None) -> str:
    """Check (and create when it can) the directory of local namespaces; return it.

    A directory that cannot be used is a configuration mistake, reported before any
    send: left to the first operation, it would look like an outage of both
    namespaces, and a sender would buffer everything. A missing directory is created
    when its parent exists (or when it is the platform's default); a missing parent
    means a mistyped path.

    Raises:
        ConfigError: the path is not a directory, is read-only, or neither it nor its
            parent exists.
    """
    explicit = data_dir is not None or bool(os.environ.get("GEOGATEWAY_DATA_DIR"))
    path = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    where = "--data-dir / $GEOGATEWAY_DATA_DIR / data_dir"
    if not os.path.isdir(path):
        if os.path.lexists(path):
            raise ConfigError(f"data directory {path} is not a directory: fix {where}")
        parent = os.path.dirname(os.path.abspath(path))
        if explicit and not os.path.isdir(parent):
            raise ConfigError(f"data directory {path} does not exist, nor does {parent}: "
                              f"create it, or fix {where}")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create data directory {path}: {exc.strerror}; fix {where}"
            ) from None
    # access() also answers "no" on a read-only file system, even for root.
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"data directory {path} is read-only for this user: make it "
                          f"writable, or fix {where}")
    return path


def namespace_files(name: str, data_dir: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """The namespace file and the control file of local namespace ``name``.

    Raises:
        ConfigError: a bad name.
    """
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(f"bad local namespace name {name!r}: use letters, digits, "
                          "'.', '_' or '-' (at most 100, starting with a letter or digit)")
    directory = os.fspath(data_dir) if data_dir is not None else default_data_dir()
    base = os.path.join(directory, name)
    return base + ".db", base + ".control.json"


@dataclass(frozen=True, kw_only=True)
class ControlState:
    """What the control file says: whether the namespace is down, and its faults.

    ``hang``: the namespace accepts connections but answers nothing until cleared (a
    hung namespace is not down: nothing fails fast).
    """

    down: bool = False
    latency: float = 0.0
    lost_replies: float = 0.0
    hang: bool = False


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
                hang=bool(raw.get("hang", False)),
            )
        except (OSError, ValueError, TypeError, AttributeError):
            # A hand-edited, broken control file must not take the namespace down
            # (or up) by accident: keep the last state we understood.
            return self._state

    def update(self, **changes: float | bool) -> ControlState:
        """Change some of ``down``, ``latency``, ``lost_replies``, ``hang``; keep the rest.

        Raises:
            ConfigError: an unknown field, a negative latency or a probability outside 0..1.
        """
        unknown = set(changes) - {"down", "latency", "lost_replies", "hang"}
        if unknown:
            raise ConfigError(f"unknown control field {sorted(unknown)[0]!r}")
        state = self.read()
        merged = {"down": state.down, "latency": state.latency,
                  "lost_replies": state.lost_replies, "hang": state.hang, **changes}
        validate_faults(latency=float(merged["latency"]),
                        lost_replies=float(merged["lost_replies"]))
        new = ControlState(down=bool(merged["down"]), latency=float(merged["latency"]),
                           lost_replies=float(merged["lost_replies"]),
                           hang=bool(merged["hang"]))
        self.write(new)
        return new

    def write(self, state: ControlState) -> None:
        """Replace the control file atomically with ``state``."""
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        payload = json.dumps(
            {"down": state.down, "latency": state.latency, "lost_replies": state.lost_replies,
             "hang": state.hang}
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
