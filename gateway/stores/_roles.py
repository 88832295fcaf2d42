"""Persisting role state so that a restarted sender keeps sending where it was."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from replication import ConfigError, RoleState

__all__ = ["RoleStore"]


class RoleStore:
    """Role state for one primary/secondary pair in a small JSON file (mode 0600).

    Writes are atomic (a temporary file renamed over the old one), so a crash
    leaves either the old state or the new one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

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
