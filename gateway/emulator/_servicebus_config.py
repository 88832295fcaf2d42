"""The official Azure Service Bus emulator's configuration file (``Config.json``), read
unchanged, and the topics and subscriptions an emulator declares.

The file (schema: ``ServiceBus-Emulator/Schema/Config-schema.json`` of
Azure/azure-service-bus-emulator-installer) holds ``UserConfig.Namespaces[]``, each
with ``Queues[]`` and ``Topics[]`` (each with ``Subscriptions[]``, each with
``Rules[]``), every entity with its ``Properties``, and ``UserConfig.Logging.Type``
(``File``, ``Console`` or both). It is read into an :class:`OfficialConfig`, and
``load_config`` (``_config``) makes an emulator's configuration of it:

- its one namespace (the official emulator serves one, ``sbemulatorns``) is served
  under its name on port 5672, the official emulator's, unless the command line names
  the namespaces to serve: its entities are then declared in each of them (``--namespace
  primary=5672 --namespace secondary=5673``, two namespaces for a geo-redundant pair);
- ``LockDuration``, ``DefaultMessageTimeToLive`` and ``DuplicateDetectionHistoryTimeWindow``
  are ISO 8601 durations (``PT1M``, ``P1DT2H``, ``PT0.5S``); a property left out takes
  the official emulator's default (``LockDuration`` 1 minute, ``MaxDeliveryCount`` 3,
  ``DefaultMessageTimeToLive`` 1 hour), not Service Bus's;
- rules: ``FilterType`` ``Correlation`` (``CorrelationFilter``: ``ContentType``,
  ``CorrelationId``, ``Label``, ``MessageId``, ``ReplyTo``, ``ReplyToSessionId``,
  ``SessionId``, ``To``, ``Properties``) or ``Sql`` (``SqlFilter.SqlExpression``), and
  an optional ``Action.SqlExpression``; a subscription without rules has ``$Default``;
- ``Logging.Type``: ``Console`` logs the emulator's lines (INFO) to stderr, ``File`` to
  ``emulator.log`` in the data directory.

``RequiresDuplicateDetection: true`` drops a message whose MessageId the entity took
within ``DuplicateDetectionHistoryTimeWindow`` (default 20 seconds, the official
emulator's). What the file asks for that is not emulated is refused when it is read,
naming it, in one line (a :class:`~replication.ConfigError`): a non-empty
``ForwardDeadLetteredMessagesTo``, a property or key the schema does not have.
``RequiresSession: true`` makes the queue or subscription session-enabled
(``requires_session``): received a session at a time, as on Service Bus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.transports import CorrelationFilter, Rule, SqlFilter, SqlRuleAction
from replication import ConfigError

__all__ = ["OFFICIAL_PORT", "OfficialConfig", "SubscriptionSpec", "TopicSpec", "duration",
           "is_official", "load_official", "parse_official", "parse_topic"]

#: The port the official emulator listens on; a file's first namespace is served there.
OFFICIAL_PORT = 5672
_DURATION = re.compile(r"P(?!$)(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?"
                       r"(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


@dataclass(frozen=True, kw_only=True)
class SubscriptionSpec:
    """A subscription to declare: its rules and its queue settings.

    ``requires_session``: the subscription is session-enabled.
    """

    name: str
    rules: tuple[Rule, ...] = ()
    lock_duration: float = 30.0
    max_delivery_count: int = 10
    dead_lettering_on_message_expiration: bool = False
    default_message_time_to_live: float | None = None
    forward_to: str | None = None
    requires_session: bool = False


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    """A topic to declare, with its subscriptions."""

    name: str
    subscriptions: tuple[SubscriptionSpec, ...] = ()
    max_message_size: int = 1 << 20
    default_message_time_to_live: float | None = None
    duplicate_detection_window: float | None = None  # seconds; None: no detection


def duration(text: object, where: str) -> float:
    """Seconds in an ISO 8601 duration (``PT1M``; a year is 365 days, a month 30).

    Raises:
        ConfigError: not such a duration.
    """
    m = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ConfigError(f"{where}: {text!r} is not an ISO 8601 duration such as PT1M, "
                          "PT30S or P1DT2H")
    years, months, days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return (((years * 365 + months * 30 + days) * 24 + hours) * 60 + minutes) * 60 + seconds


# -- the official file -------------------------------------------------------------------


class _Reader:
    """Typed access to one JSON object of the file, naming where a bad value is."""

    def __init__(self, raw: object, where: str, known: Iterable[str]) -> None:
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected an object, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(f"{where}: {', '.join(unknown)} is not emulated by the geogateway "
                              f"emulator (it knows {', '.join(sorted(known))})")
        self.raw, self.where = raw, where

    def get(self, key: str, kind: type[Any] | tuple[type[Any], ...], default: Any = None) -> Any:
        value = self.raw.get(key, default)
        if value is not default and (not isinstance(value, kind) or (
                isinstance(value, bool) and kind is int)):
            raise ConfigError(f"{self.where}: {key} must be a "
                              f"{getattr(kind, '__name__', 'value')}, got {value!r}")
        return value

    def name(self) -> str:
        name = self.get("Name", str)
        if not name:
            raise ConfigError(f"{self.where}: Name (a non-empty string) is required")
        return str(name)

    def seconds(self, key: str, default: float) -> float:
        return duration(self.raw[key], f"{self.where} {key}") if key in self.raw else default

    def properties(self, known: Iterable[str]) -> _Reader:
        return _Reader(self.raw.get("Properties", {}), f"{self.where} Properties", known)


_QUEUE_PROPS = ("DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive",
                "DuplicateDetectionHistoryTimeWindow", "ForwardDeadLetteredMessagesTo",
                "ForwardTo", "LockDuration", "MaxDeliveryCount", "RequiresDuplicateDetection",
                "RequiresSession")
_TOPIC_PROPS = ("DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow",
                "RequiresDuplicateDetection")
_SUB_PROPS = ("DeadLetteringOnMessageExpiration", "DefaultMessageTimeToLive", "LockDuration",
              "MaxDeliveryCount", "ForwardDeadLetteredMessagesTo", "ForwardTo",
              "RequiresSession")
_CORRELATION = {"ContentType": "content_type", "CorrelationId": "correlation_id",
                "Label": "subject", "Subject": "subject", "MessageId": "message_id",
                "ReplyTo": "reply_to", "ReplyToSessionId": "reply_to_session_id",
                "SessionId": "session_id", "To": "to"}
#: The official emulator's defaults (its schema's), for properties a file leaves out.
_LOCK, _DELIVERIES, _TTL, _DUPLICATES = 60.0, 3, 3600.0, 20.0


def _common(p: _Reader) -> dict[str, Any]:
    """The settings queues and subscriptions share; refuses what is not emulated."""
    if p.get("ForwardDeadLetteredMessagesTo", str, ""):
        raise ConfigError(f"{p.where}: ForwardDeadLetteredMessagesTo is not emulated by the "
                          "geogateway emulator: leave it empty and read the dead-letter queue")
    lock, deliveries = p.seconds("LockDuration", _LOCK), p.get("MaxDeliveryCount", int,
                                                                _DELIVERIES)
    if not lock > 0 or deliveries < 1:
        raise ConfigError(f"{p.where}: LockDuration must be above 0 and MaxDeliveryCount at "
                          f"least 1, got {p.raw.get('LockDuration')!r} and {deliveries!r}")
    return {
        "lock_duration": lock,
        "max_delivery_count": deliveries,
        "dead_lettering_on_message_expiration": p.get(
            "DeadLetteringOnMessageExpiration", bool, False),
        "default_message_time_to_live": p.seconds("DefaultMessageTimeToLive", _TTL),
        "forward_to": p.get("ForwardTo", str, "") or None,
        "requires_session": p.get("RequiresSession", bool, False),
    }


def _duplicate_window(p: _Reader) -> float | None:
    """The window of the entity's duplicate detection, or None when it has none."""
    window = p.seconds("DuplicateDetectionHistoryTimeWindow", _DUPLICATES)
    return window if p.get("RequiresDuplicateDetection", bool, False) else None


def _queue(raw: object, where: str) -> dict[str, Any]:
    r = _Reader(raw, where, ("Name", "Properties"))
    p = r.properties(_QUEUE_PROPS)
    return {"name": r.name(), **_common(p), "duplicate_detection_window": _duplicate_window(p)}


def _rule(raw: object, i: int, owner: str) -> Rule:
    """Rule ``i`` of a subscription (``owner`` says which, in errors)."""
    where = f"{owner} rule {_label(raw, i)}"
    try:
        return _read_rule(raw, where)
    except ConfigError as exc:
        # A rule's own errors name it already ("rule 'x': SQL filter: ..."): add whose.
        text = str(exc)
        raise ConfigError(text if text.startswith(owner) else f"{owner}: {text}") from None


def _read_rule(raw: object, where: str) -> Rule:
    r = _Reader(raw, where, ("Name", "Properties"))
    name = r.name()
    p = r.properties(("FilterType", "CorrelationFilter", "SqlFilter", "Action"))
    kind = p.get("FilterType", str)
    action = None
    if "Action" in p.raw:
        a = _Reader(p.raw["Action"], f"{p.where} Action", ("SqlExpression",))
        action = SqlRuleAction(a.get("SqlExpression", str, ""))
    if kind == "Sql":
        s = _Reader(p.raw.get("SqlFilter"), f"{p.where} SqlFilter", ("SqlExpression",))
        return Rule(name=name, filter=SqlFilter(s.get("SqlExpression", str, "")), action=action)
    if kind == "Correlation":
        c = _Reader(p.raw.get("CorrelationFilter"), f"{p.where} CorrelationFilter",
                    (*_CORRELATION, "Properties"))
        fields = {_CORRELATION[k]: c.get(k, str) for k in _CORRELATION if k in c.raw}
        return Rule(name=name, action=action, filter=CorrelationFilter(
            **fields, properties=c.get("Properties", dict, {})))
    raise ConfigError(f"{p.where}: FilterType must be Correlation or Sql, got {kind!r}")


def _subscription(raw: object, where: str) -> SubscriptionSpec:
    r = _Reader(raw, where, ("Name", "Properties", "Rules"))
    name = r.name()
    rules = r.get("Rules", list, [])
    return SubscriptionSpec(
        name=name, rules=tuple(_rule(x, i, where) for i, x in enumerate(rules)),
        **_common(r.properties(_SUB_PROPS)))


def _topic(raw: object, where: str) -> TopicSpec:
    r = _Reader(raw, where, ("Name", "Properties", "Subscriptions"))
    name = r.name()
    p = r.properties(_TOPIC_PROPS)
    subs = r.get("Subscriptions", list, [])
    return TopicSpec(
        name=name, default_message_time_to_live=p.seconds("DefaultMessageTimeToLive", _TTL),
        duplicate_detection_window=_duplicate_window(p),
        subscriptions=tuple(_subscription(s, f"{where} subscription {_label(s, i)}")
                            for i, s in enumerate(subs)))


@dataclass(frozen=True, kw_only=True)
class OfficialConfig:
    """What an official configuration file declares: its namespace (name → port), its
    queues (``QueueSpec`` keyword arguments), its topics, and where logs go."""

    namespaces: dict[str, int]
    queues: tuple[dict[str, Any], ...]
    topics: tuple[TopicSpec, ...]
    logging: tuple[str, ...]


def parse_official(data: object, path: str | Path) -> OfficialConfig:
    """What an official emulator configuration declares.

    Raises:
        ConfigError: a malformed file, or something it asks for that is not emulated.
    """
    top = _Reader(data, str(path), ("UserConfig",))
    user = _Reader(top.raw.get("UserConfig"), f"{path} UserConfig", ("Namespaces", "Logging"))
    namespaces = user.get("Namespaces", list, [])
    if not namespaces:
        raise ConfigError(f"{path}: UserConfig.Namespaces lists no namespace")
    if len(namespaces) > 1:
        raise ConfigError(f"{path}: UserConfig.Namespaces lists {len(namespaces)} namespaces; "
                          "list one (its entities are declared in every namespace served: "
                          "geogateway emulator --namespace primary=5672 --namespace "
                          "secondary=5673 --config FILE)")
    ns = _Reader(namespaces[0], f"{path} namespace", ("Name", "Queues", "Topics"))
    where = f"{path} namespace {ns.name()!r}"
    queues = tuple(_queue(q, f"{where} queue {_label(q, i)}")
                   for i, q in enumerate(ns.get("Queues", list, [])))
    topics = tuple(_topic(t, f"{where} topic {_label(t, i)}")
                   for i, t in enumerate(ns.get("Topics", list, [])))
    return OfficialConfig(namespaces={ns.name(): OFFICIAL_PORT}, queues=queues, topics=topics,
                          logging=_logging(user, path))


def _label(raw: object, i: int) -> str:
    name = raw.get("Name") if isinstance(raw, dict) else None
    return repr(name) if isinstance(name, str) else f"#{i + 1}"


def _logging(user: _Reader, path: str | Path) -> tuple[str, ...]:
    if "Logging" not in user.raw:
        return ()
    log = _Reader(user.raw["Logging"], f"{path} UserConfig.Logging", ("Type",))
    kinds = tuple(k.strip().lower() for k in str(log.get("Type", str, "")).split(","))
    if not kinds or not set(kinds) <= {"file", "console"}:
        raise ConfigError(f"{path} UserConfig.Logging.Type must be File, Console or "
                          f"File,Console, got {log.raw.get('Type')!r}")
    return kinds


def load_official(path: str | Path) -> OfficialConfig:
    """Read an official emulator configuration file (JSON).

    Raises:
        ConfigError: not JSON, or see :func:`parse_official`.
    """
    try:
        with open(path, encoding="utf-8-sig") as fp:
            data = json.load(fp)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    return parse_official(data, path)


def is_official(path: str | Path) -> bool:
    """Whether ``path`` looks like an official emulator configuration (JSON, not TOML)."""
    if str(path).lower().endswith(".json"):
        return True
    try:
        with open(path, "rb") as fp:
            head = fp.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False
    return head.startswith(b"{")


def parse_topic(spec: str) -> TopicSpec:
    """``NAME:SUB,SUB...`` (subscriptions with the ``$Default`` rule) → a :class:`TopicSpec`.

    Raises:
        ConfigError: no name, or an empty subscription name.
    """
    name, _, subs = spec.partition(":")
    names = [s.strip() for s in subs.split(",")] if subs else []
    if not name or any(not s for s in names):
        raise ConfigError(f"bad topic {spec!r}: expected NAME or NAME:SUB,SUB..., e.g. "
                          "orders:audit,billing")
    return TopicSpec(name=name, subscriptions=tuple(SubscriptionSpec(name=s) for s in names))
