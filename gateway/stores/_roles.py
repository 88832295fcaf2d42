"""Persisting role state so that a restarted sender keeps sending where it was."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Protocol

from replication import ConfigError, RoleState

__all__ = ["RoleStore", "RoleStoreLike"]


class RoleStoreLike(Protocol):
    """What a sender needs of a role store (:class:`RoleStore`, a file on one
    machine, or :class:`~gateway.stores.PostgresRoleStore`, shared by a fleet)."""

    #: Whether other processes change the state too (the sender then re-reads it
    #: every ``refresh_interval`` seconds).
    shared: bool
    refresh_interval: float

    def load(self, primary: str, secondary: str) -> RoleState:
        """The stored state for this pair, or the initial one (primary active)."""
        ...  # pragma: no cover

    def swap(self, expected: RoleState, new: RoleState) -> RoleState:
        """Store ``new`` if the stored state is still ``expected``; return the state
        in force afterwards (``new``, or the one stored meanwhile)."""
        ...  # pragma: no cover

    def close(self) -> None:
        """Release what the store opened."""
        ...  # pragma: no cover


class RoleStore:
    """Role state for one primary/secondary pair in a small JSON file (mode 0600).

    Writes are atomic (a temporary file renamed over the old one), so a crash
    leaves either the old state or the new one.
    """

    #: One process's file: nobody else changes it behind the sender's back.
    shared = False
    refresh_interval = 0.0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def swap(self, expected: RoleState, new: RoleState) -> RoleState:
        """Write ``new`` unless the file no longer holds ``expected``'s generation
        (another process sharing the file changed the roles since); return the
        state in force afterwards. Not locked: processes sharing one file may still
        both write in a narrow window (a fleet shares a ``PostgresRoleStore``)."""
        current = self.load(new.preferred, new.standby_preferred)
        if current.generation != expected.generation:
            return current
        self.save(new)
        return new

    def close(self) -> None:
        """Nothing to release (each call opens and closes the file)."""

    @classmethod
    def of_pair(cls, state_dir: str | os.PathLike[str], primary: str,
                secondary: str) -> RoleStore:
        """The store a sender of the namespaces ``primary`` and ``secondary`` (their
        names) keeps in ``state_dir``: ``roles-PRIMARY-SECONDARY.json``."""
        return cls(Path(state_dir) / f"roles-{primary}-{secondary}.json")

    def load(self, primary: str, secondary: str) -> RoleState:
        """The saved state for this pair, or the initial one (primary active).

        Raises:
            ConfigError: the file exists but cannot be read as role state.
        """
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return RoleState.initial(primary, secondary)
        except (OSError, ValueError) as exc:
            raise self._unreadable(exc) from None
        if not isinstance(data, dict):
            raise self._unreadable(f"a JSON {type(data).__name__}, not an object")
        if {data.get("preferred"), data.get("standby_preferred")} != {primary, secondary}:
            return RoleState.initial(primary, secondary)
        try:
            return RoleState(
                preferred=primary,
                standby_preferred=secondary,
                active=str(data.get("active", primary)),
                generation=int(data.get("generation", 0)),
                changed_at=float(data.get("changed_at", 0.0)),
            )
        except (ConfigError, TypeError, ValueError) as exc:
            raise self._unreadable(exc) from None

    def _unreadable(self, reason: object) -> ConfigError:
        return ConfigError(
            f"role state file {self.path} is unreadable ({reason}); delete it to start "
            "with the primary active"
        )

    def save(self, state: RoleState) -> None:
        """Write ``state`` atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps(
            {
                "preferred": state.preferred,
                "standby_preferred": state.standby_preferred,
                "active": state.active,
                "generation": state.generation,
                "changed_at": state.changed_at,
            }
        )
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".roles-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fp:
                fp.write(payload)
                fp.flush()
                os.fsync(fp.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
