"""What an emulator serves: namespaces and their entities, from options, a TOML file or
the official Service Bus emulator's ``Config.json`` (``_servicebus_config``).

A config file looks like::

    host = "127.0.0.1"            # optional
    key_name = "RootManageSharedAccessKey"   # optional; the key itself never goes here
    max_message_size = 262144     # bytes, every Service Bus message; optional (256 KiB)

    [namespaces]
    primary = 5672
    secondary = 5673

    [[queue]]
    name = "orders"
    lock_duration = 30.0          # seconds; optional
    max_delivery_count = 10       # optional
    max_message_size = 1048576    # bytes; optional (the namespace's limit caps it)
    dead_lettering_on_message_expiration = false   # optional
    requires_session = false      # a session-enabled queue; optional

    [[event_hub]]
    name = "telemetry"
    partitions = 4

    [[policy]]                    # a shared access policy besides the default one
    name = "listener"
    key = "bGlzdGVuZXIga2V5"      # a development key: this file is not a secret store
    rights = ["Listen"]           # Listen, Send, Manage (Manage implies the other two)
    entity = "orders"             # optional: an entity-level policy

Every entity and policy is declared in every namespace served.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gateway.amqp.server import Policy, parse_rights
from gateway.emulator._servicebus_config import TopicSpec, is_official, load_official
from replication import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["SERVICE_BUS_MAX_MESSAGE_SIZE", "EmulatorConfig", "EventHubSpec", "QueueSpec",
           "load_config", "parse_event_hub", "parse_namespace", "parse_size"]

#: The largest Service Bus message by default: the standard tier's 256 KiB.
SERVICE_BUS_MAX_MESSAGE_SIZE = 256 * 1024


@dataclass(frozen=True, kw_only=True)
class QueueSpec:
    """A Service Bus queue to declare (the local namespace's queue settings).

    The emulator accepts messages up to the smaller of ``max_message_size`` and its
    namespace's limit (:data:`SERVICE_BUS_MAX_MESSAGE_SIZE` unless configured).
    ``dead_lettering_on_message_expiration``: a message whose time to live is over
    moves to the dead-letter sub-queue instead of being dropped. ``requires_session``:
    a session-enabled queue (Service Bus ``RequiresSession``): every message needs a
    session id, and receivers lock a session at a time.
    """

    name: str
    lock_duration: float = 30.0
    max_delivery_count: int = 10
    max_message_size: int = 1 << 20
    dead_lettering_on_message_expiration: bool = False
    default_message_time_to_live: float | None = None  # seconds
    forward_to: str | None = None  # a queue or topic that takes what is sent here
    duplicate_detection_window: float | None = None  # seconds; None: no detection
    requires_session: bool = False


@dataclass(frozen=True, kw_only=True)
class EventHubSpec:
    """An event hub to declare (a partitioned entity of the local namespace)."""

    name: str
    partitions: int = 4
    max_message_size: int = 1 << 20


@dataclass(frozen=True, kw_only=True)
class EmulatorConfig:
    """The parts of an emulator's configuration a config file may hold."""

    namespaces: dict[str, int] = field(default_factory=dict)
    queues: tuple[QueueSpec, ...] = ()
    event_hubs: tuple[EventHubSpec, ...] = ()
    host: str | None = None
    key_name: str | None = None
    max_message_size: int | None = None
    topics: tuple[TopicSpec, ...] = ()
    #: Where the emulator's log lines go ("console", "file"): the official file's Logging.
    logging: tuple[str, ...] = ()
    #: Shared access policies besides the default one.
    policies: tuple[Policy, ...] = ()


def parse_size(value: object, where: str = "max_message_size") -> int:
    """A message size limit in bytes (1 KiB to 100 MiB, Service Bus premium's largest).

    Raises:
        ConfigError: not an integer in that range.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not (
            1024 <= value <= 100 << 20):
        raise ConfigError(f"{where} must be a number of bytes from 1024 to {100 << 20}, "
                          f"got {value!r} (Service Bus standard: {SERVICE_BUS_MAX_MESSAGE_SIZE})")
    return value


def parse_namespace(spec: str) -> tuple[str, int]:
    """``NAME=PORT`` (PORT 0 = any free port) → (name, port).

    Raises:
        ConfigError: not NAME=PORT, or a port outside 0..65535.
    """
    name, sep, port = spec.partition("=")
    if not sep or not name or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"bad namespace {spec!r}: expected NAME=PORT, e.g. primary=5672 "
                          "(port 0 picks a free one)")
    return name, int(port)


def parse_event_hub(spec: str) -> EventHubSpec:
    """``NAME:PARTITIONS`` → an :class:`EventHubSpec`.

    Raises:
        ConfigError: not NAME:PARTITIONS with 1 to 1024 partitions.
    """
    name, sep, count = spec.rpartition(":")
    if not sep or not name or not count.isdigit() or not 1 <= int(count) <= 1024:
        raise ConfigError(f"bad event hub {spec!r}: expected NAME:PARTITIONS with 1 to 1024 "
                          "partitions, e.g. telemetry:4")
    return EventHubSpec(name=name, partitions=int(count))


def _spec(cls: type[Any], raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ConfigError(f"{where}: 'name' (a non-empty string) is required")
    kinds = {"float": float, "int": int, "bool": bool, "float | None": float,
             "str | None": str}
    for key, value in raw.items():
        kind = kinds.get(str(known[key].type), str)
        ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
        if not ok or (isinstance(value, bool) and kind is not bool):
            raise ConfigError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
    return cls(**raw)


def load_config(path: str | Path) -> EmulatorConfig:
    """Read an emulator config file: TOML (see the module docstring), or the official
    Service Bus emulator's ``Config.json`` (see ``_servicebus_config``).

    Raises:
        ConfigError: a missing or malformed file, an unknown key, a bad value, or
            something the official file asks for that is not emulated.
    """
    if is_official(path):
        official = load_official(path)
        return EmulatorConfig(namespaces=official.namespaces, topics=official.topics,
                              queues=tuple(QueueSpec(**q) for q in official.queues),
                              logging=official.logging)
    try:
        with open(path, "rb") as fp:
            data = tomllib.load(fp)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    unknown = set(data) - {"namespaces", "queue", "event_hub", "host", "key_name",
                           "max_message_size", "policy"}
    if unknown:
        raise ConfigError(f"config file {path}: unknown keys {sorted(unknown)}")
    namespaces = data.get("namespaces", {})
    if not isinstance(namespaces, dict) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= 65535
            for p in namespaces.values()):
        raise ConfigError(f"config file {path}: [namespaces] maps names to ports (0..65535)")
    for key in ("host", "key_name"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"config file {path}: {key} must be a string")
    return EmulatorConfig(
        namespaces=dict(namespaces),
        queues=tuple(_spec(QueueSpec, q, f"{path} [[queue]]") for q in _list(data, "queue")),
        event_hubs=tuple(_spec(EventHubSpec, h, f"{path} [[event_hub]]")
                         for h in _list(data, "event_hub")),
        host=data.get("host"),
        key_name=data.get("key_name"),
        max_message_size=(parse_size(data["max_message_size"], f"config file {path}: "
                                     "max_message_size") if "max_message_size" in data else None),
        policies=tuple(_policy(p, f"{path} [[policy]]") for p in _list(data, "policy")),
    )


def _policy(raw: Any, where: str) -> Policy:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    known = {"name", "key", "rights", "entity"}
    if set(raw) - known or not {"name", "key", "rights"} <= set(raw):
        raise ConfigError(f"{where}: expected name, key, rights and optionally entity; "
                          f"got {sorted(raw)}")
    name, key, rights, entity = (raw.get(k) for k in ("name", "key", "rights", "entity"))
    if not isinstance(name, str) or not isinstance(key, str) or (
            entity is not None and not isinstance(entity, str)):
        raise ConfigError(f"{where}: name, key and entity must be strings")
    if not isinstance(rights, list):
        raise ConfigError(f"{where}: rights must be an array, e.g. [\"Listen\", \"Send\"]")
    return Policy(name=name, key=key, rights=parse_rights(rights, name), entity=entity)


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ConfigError(f"'{key}' must be an array of tables ([[{key}]])")
    return value
