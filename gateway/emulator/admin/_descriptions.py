"""What a create or update of the Service Bus administration API sends: a queue's,
topic's or subscription's description, or a rule's, read into the store's terms.

Elements are found by their local names, whatever prefixes the client wrote
(azure-servicebus removes some, ``_xml_workaround_policy``). Durations are ISO 8601;
.NET's ``TimeSpan.MaxValue`` ("never") reads as None. A SQL filter's or action's
parameters and ``ForwardDeadLetteredMessagesTo`` are not emulated: refused with 400, as
what the service cannot take is (never taken and silently ignored).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from gateway.emulator._servicebus_config import duration
from gateway.emulator.admin._atom import DESCRIPTIONS, KEPT, NEVER_SECONDS, XSI, local_name
from gateway.emulator.admin._entities import Settings
from gateway.transports import (
    CorrelationFilter,
    EntityKind,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)
from replication import ConfigError

__all__ = ["BadRequest", "parse_rule", "parse_settings", "request_kind"]


class BadRequest(ValueError):
    """A request body the service would refuse with 400."""


def _seconds(text: str, what: str) -> float | None:
    try:
        value = duration(text.strip(), what)
    except ConfigError as exc:
        raise BadRequest(str(exc)) from None
    return None if value >= NEVER_SECONDS else value


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise BadRequest(f"{what} must be an integer, not {text!r}") from None


def _description(body: bytes, name: str) -> ET.Element | None:
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadRequest(f"the request body is not XML: {exc}") from None
    return next((e for e in root.iter() if local_name(e.tag) == name), None)


def request_kind(body: bytes) -> EntityKind:
    """Whether a PUT to a top-level name creates a queue or a topic.

    Raises:
        BadRequest: neither description is in the body.
    """
    for kind in (EntityKind.QUEUE, EntityKind.TOPIC):
        if _description(body, DESCRIPTIONS[kind]) is not None:
            return kind
    raise BadRequest("the body holds no QueueDescription or TopicDescription")


def parse_settings(body: bytes, kind: EntityKind, forward_to: Any = None) -> Settings:
    """The settings a create or update of a ``kind`` entity asks for.

    ``forward_to``: turns a ``ForwardTo`` URL into an entity name.

    Raises:
        BadRequest: no description of that kind, or a bad value.
    """
    element = _description(body, DESCRIPTIONS[kind])
    if element is None:
        raise BadRequest(f"the body holds no {DESCRIPTIONS[kind]}")
    values = {local_name(child.tag): (child.text or "") for child in element}
    if values.get("ForwardDeadLetteredMessagesTo"):
        raise BadRequest("ForwardDeadLetteredMessagesTo is not emulated by the geogateway "
                         "emulator (its Config.json refuses it too)")
    settings: dict[str, Any] = {}
    if "LockDuration" in values:
        settings["lock_duration"] = _seconds(values["LockDuration"], "LockDuration") or 60.0
    if "MaxDeliveryCount" in values:
        settings["max_delivery_count"] = _int(values["MaxDeliveryCount"], "MaxDeliveryCount")
    if values.get("MaxMessageSizeInKilobytes"):
        settings["max_message_size"] = 1024 * _int(values["MaxMessageSizeInKilobytes"],
                                                   "MaxMessageSizeInKilobytes")
    for key, name in (("dead_lettering_on_message_expiration",
                       "DeadLetteringOnMessageExpiration"), ("requires_session",
                                                              "RequiresSession")):
        if name in values:
            settings[key] = _bool(values[name])
    if "DefaultMessageTimeToLive" in values:
        settings["default_ttl"] = _seconds(values["DefaultMessageTimeToLive"],
                                           "DefaultMessageTimeToLive")
    if _bool(values.get("RequiresDuplicateDetection", "false")):
        window = values.get("DuplicateDetectionHistoryTimeWindow") or "PT10M"
        settings["duplicate_window"] = _seconds(window, "DuplicateDetectionHistoryTimeWindow")
    if values.get("ForwardTo"):
        target = values["ForwardTo"]
        settings["forward_to"] = forward_to(target) if forward_to else target
    settings["extras"] = {k: values[k] for k in KEPT[kind] if values.get(k)}
    rule = next((e for e in element if local_name(e.tag) == "DefaultRuleDescription"), None)
    if rule is not None:
        settings["rules"] = (_rule(rule, "$Default"),)
    try:
        return Settings(**settings)
    except ConfigError as exc:
        raise BadRequest(str(exc)) from None


def parse_rule(body: bytes, name: str) -> Rule:
    """The rule a create or update sends.

    Raises:
        BadRequest: no RuleDescription, a filter or action not emulated, or bad SQL.
    """
    element = _description(body, "RuleDescription")
    if element is None:
        raise BadRequest("the body holds no RuleDescription")
    return _rule(element, name)


def _child(element: ET.Element, name: str) -> ET.Element | None:
    return next((e for e in element if local_name(e.tag) == name), None)


def _xsi_type(element: ET.Element) -> str:
    return element.get(f"{{{XSI}}}type", "").rpartition(":")[2]


def _value(element: ET.Element) -> Any:
    kind, text = _xsi_type(element), element.text or ""
    if kind in ("int", "long"):
        return int(text)
    if kind == "double":
        return float(text)
    if kind == "boolean":
        return text.lower() == "true"
    return text


def _no_parameters(element: ET.Element, what: str) -> None:
    parameters = _child(element, "Parameters")
    if parameters is not None and len(parameters):
        raise BadRequest(f"{what} parameters are not emulated by the geogateway emulator")


def _rule(element: ET.Element, name: str) -> Rule:
    f = _child(element, "Filter")
    kind = "TrueFilter" if f is None else _xsi_type(f)
    rule_filter: Any
    if kind == "TrueFilter":
        rule_filter = TrueFilter()
    elif kind == "FalseFilter":
        rule_filter = FalseFilter()
    elif kind == "SqlFilter" and f is not None:
        _no_parameters(f, "SQL filter")
        rule_filter = SqlFilter(_text(f, "SqlExpression"))
    elif kind == "CorrelationFilter" and f is not None:
        fields = {"CorrelationId": "correlation_id", "MessageId": "message_id", "To": "to",
                  "ReplyTo": "reply_to", "Label": "subject", "SessionId": "session_id",
                  "ReplyToSessionId": "reply_to_session_id", "ContentType": "content_type"}
        given = {fields[local_name(c.tag)]: c.text or "" for c in f if local_name(c.tag) in fields}
        properties = _child(f, "Properties")
        pairs = {} if properties is None else {
            _text(kv, "Key"): _value(v) for kv in properties
            if (v := _child(kv, "Value")) is not None}
        try:
            rule_filter = CorrelationFilter(**given, properties=pairs)
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None
    else:
        raise BadRequest(f"filter type {kind!r} is not known")
    a = _child(element, "Action")
    action = None
    if a is not None and _xsi_type(a) == "SqlRuleAction":
        _no_parameters(a, "SQL action")
        action = SqlRuleAction(_text(a, "SqlExpression"))
    try:
        return Rule(name=name, filter=rule_filter, action=action)
    except ConfigError as exc:
        raise BadRequest(str(exc)) from None


def _text(element: ET.Element, name: str) -> str:
    child = _child(element, name)
    return "" if child is None or child.text is None else child.text
