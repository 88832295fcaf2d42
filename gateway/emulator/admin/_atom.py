"""The ATOM XML of the Service Bus administration API: the entries and feeds it answers
with, and the descriptions a create or update sends.

An entry is ``<entry xmlns="http://www.w3.org/2005/Atom">`` with ``title`` (the name)
and ``content type="application/xml"`` holding a ``QueueDescription``,
``TopicDescription``, ``SubscriptionDescription``, ``RuleDescription`` or
``NamespaceInfo`` in the ``.../2010/10/servicebus/connect`` namespace; message counts
are a ``CountDetails`` whose children are in ``.../2011/06/servicebus``; a list is a
``feed`` of entries, with a second ``link`` (``rel="next"``) when more follow. Durations
are ISO 8601 (``PT1M``); "never" is .NET's ``TimeSpan.MaxValue``. Requests are read by
local names, whatever prefixes the client wrote (azure-servicebus removes some).
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from gateway.emulator._servicebus_config import duration
from gateway.emulator.admin._entities import Described, Settings
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

__all__ = ["BadRequest", "entry", "error", "feed", "namespace_entry", "parse_rule",
           "parse_settings", "rule_entry"]

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
#: .NET's TimeSpan.MaxValue: what Service Bus writes for "never".
NEVER = "P10675199DT2H48M5.4775807S"
_NEVER_SECONDS = 10675199 * 86400.0
_DESCRIPTIONS = {EntityKind.QUEUE: "QueueDescription", EntityKind.TOPIC: "TopicDescription",
                 EntityKind.SUBSCRIPTION: "SubscriptionDescription"}
#: Properties kept as sent and given back, by kind (the emulator does not act on them).
_KEPT = {
    EntityKind.QUEUE: ("MaxSizeInMegabytes", "EnableBatchedOperations", "AutoDeleteOnIdle",
                       "EnablePartitioning", "EnableExpress", "UserMetadata", "Status",
                       "ForwardDeadLetteredMessagesTo"),
    EntityKind.TOPIC: ("MaxSizeInMegabytes", "EnableBatchedOperations", "AutoDeleteOnIdle",
                       "EnablePartitioning", "EnableExpress", "UserMetadata", "Status",
                       "SupportOrdering"),
    EntityKind.SUBSCRIPTION: ("EnableBatchedOperations", "AutoDeleteOnIdle", "UserMetadata",
                              "Status", "ForwardDeadLetteredMessagesTo",
                              "DeadLetteringOnFilterEvaluationExceptions"),
}
_DEFAULTS = {"MaxSizeInMegabytes": "1024", "EnableBatchedOperations": "true",
             "AutoDeleteOnIdle": NEVER, "EnablePartitioning": "false",
             "EnableExpress": "false", "Status": "Active", "SupportOrdering": "true",
             "DeadLetteringOnFilterEvaluationExceptions": "true"}


class BadRequest(ValueError):
    """A request body the service would refuse with 400."""


# -- values ------------------------------------------------------------------------------


def iso_duration(seconds: float | None) -> str:
    """``seconds`` as ISO 8601 (``PT1M``, ``P1DT2H``); None is "never"."""
    if seconds is None or seconds >= _NEVER_SECONDS:
        return NEVER
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"P{int(days)}D" if days else "P"
    time = "".join(f"{int(v)}{u}" for v, u in ((hours, "H"), (minutes, "M")) if v)
    if secs or not (days or time):
        time += f"{secs:.7f}".rstrip("0").rstrip(".") + "S"
    return text + ("T" + time if time else "")


def _timestamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(text: str, what: str) -> float | None:
    try:
        value = duration(text.strip(), what)
    except ConfigError as exc:
        raise BadRequest(str(exc)) from None
    return None if value >= _NEVER_SECONDS else value


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise BadRequest(f"{what} must be an integer, not {text!r}") from None


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


# -- requests ----------------------------------------------------------------------------


def _description(body: bytes, name: str) -> ET.Element | None:
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadRequest(f"the request body is not XML: {exc}") from None
    return next((e for e in root.iter() if _local(e.tag) == name), None)


def request_kind(body: bytes) -> EntityKind:
    """Whether a PUT to a top-level name creates a queue or a topic.

    Raises:
        BadRequest: neither description is in the body.
    """
    for kind in (EntityKind.QUEUE, EntityKind.TOPIC):
        if _description(body, _DESCRIPTIONS[kind]) is not None:
            return kind
    raise BadRequest("the body holds no QueueDescription or TopicDescription")


def parse_settings(body: bytes, kind: EntityKind, forward_to: Any = None) -> Settings:
    """The settings a create or update of a ``kind`` entity asks for.

    ``forward_to``: turns a ``ForwardTo`` URL into an entity name.

    Raises:
        BadRequest: no description of that kind, or a bad value.
    """
    element = _description(body, _DESCRIPTIONS[kind])
    if element is None:
        raise BadRequest(f"the body holds no {_DESCRIPTIONS[kind]}")
    values = {_local(child.tag): (child.text or "") for child in element}
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
    settings["extras"] = {k: values[k] for k in _KEPT[kind] if values.get(k)}
    rule = next((e for e in element if _local(e.tag) == "DefaultRuleDescription"), None)
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
    return next((e for e in element if _local(e.tag) == name), None)


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
        given = {fields[_local(c.tag)]: c.text or "" for c in f if _local(c.tag) in fields}
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


# -- responses ---------------------------------------------------------------------------


def _element(name: str, value: object) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return f"<{name}>{escape(text)}</{name}>"


def _wrap(title: str, url: str, updated: float, content: str) -> str:
    return (f'<entry xmlns="{ATOM}"><id>{escape(url)}</id>'
            f'<title type="text">{escape(title)}</title>'
            f"<published>{_timestamp(updated)}</published>"
            f"<updated>{_timestamp(updated)}</updated>"
            f'<link rel="self" href={quoteattr(url)}/>'
            f'<content type="application/xml">{content}</content></entry>')


def _counts(d: Described) -> str:
    c = d.counts
    items = (("ActiveMessageCount", c.active), ("DeadLetterMessageCount", c.dead_letter),
             ("ScheduledMessageCount", c.scheduled), ("TransferMessageCount", 0),
             ("TransferDeadLetterMessageCount", 0))
    inner = "".join(f"<d2p1:{k}>{v}</d2p1:{k}>" for k, v in items)
    return f'<CountDetails xmlns:d2p1="{COUNTS}">{inner}</CountDetails>'


def _properties(d: Described, forward_url: str | None) -> list[tuple[str, object]]:
    s, kind = d.settings, d.kind
    kept = {k: s.extras.get(k, _DEFAULTS.get(k)) for k in _KEPT[kind]}
    props: list[tuple[str, object]] = []
    if kind is not EntityKind.TOPIC:
        props.append(("LockDuration", iso_duration(s.lock_duration)))
    if kind is not EntityKind.SUBSCRIPTION:
        props += [("MaxSizeInMegabytes", kept["MaxSizeInMegabytes"]),
                  ("RequiresDuplicateDetection", s.duplicate_window is not None)]
    if kind is not EntityKind.TOPIC:
        props.append(("RequiresSession", s.requires_session))
    props.append(("DefaultMessageTimeToLive", iso_duration(s.default_ttl)))
    if kind is not EntityKind.TOPIC:
        props.append(("DeadLetteringOnMessageExpiration",
                      s.dead_lettering_on_message_expiration))
    if kind is not EntityKind.SUBSCRIPTION:
        props.append(("DuplicateDetectionHistoryTimeWindow",
                      iso_duration(s.duplicate_window or 600.0)))
    if kind is not EntityKind.TOPIC:
        props.append(("MaxDeliveryCount", s.max_delivery_count))
    props.append(("EnableBatchedOperations", kept["EnableBatchedOperations"]))
    if kind is not EntityKind.SUBSCRIPTION:
        props += [("SizeInBytes", d.counts.size), ("FilteringMessagesBeforePublishing", False)]
    if kind is EntityKind.QUEUE:
        props.append(("MessageCount", d.counts.total))
    if kind is not EntityKind.SUBSCRIPTION:
        props.append(("IsAnonymousAccessible", False))
    if kind is EntityKind.SUBSCRIPTION:
        props += [("MessageCount", d.counts.total),
                  ("DeadLetteringOnFilterEvaluationExceptions",
                   kept["DeadLetteringOnFilterEvaluationExceptions"])]
    props.append(("Status", kept["Status"]))
    if forward_url:
        props.append(("ForwardTo", forward_url))
    if kept.get("UserMetadata") is not None:
        props.append(("UserMetadata", kept["UserMetadata"]))
    props += [("CreatedAt", _timestamp(d.created)), ("UpdatedAt", _timestamp(d.updated)),
              ("AccessedAt", _timestamp(d.accessed))]
    if kind is EntityKind.TOPIC:
        props += [("SupportOrdering", kept["SupportOrdering"]),
                  ("SubscriptionCount", d.subscription_count)]
    props.append(("AutoDeleteOnIdle", kept["AutoDeleteOnIdle"]))
    if kind is not EntityKind.SUBSCRIPTION:
        props += [("EnablePartitioning", kept["EnablePartitioning"])]
    props.append(("EntityAvailabilityStatus", "Available"))
    if kept.get("ForwardDeadLetteredMessagesTo"):
        props.append(("ForwardDeadLetteredMessagesTo", kept["ForwardDeadLetteredMessagesTo"]))
    if kind is not EntityKind.SUBSCRIPTION:
        props += [("EnableExpress", kept["EnableExpress"]),
                  ("MaxMessageSizeInKilobytes", d.settings.max_message_size // 1024)]
    return props


def entry(d: Described, url: str, forward_url: str | None = None) -> str:
    """The entry of one queue, topic or subscription."""
    name = _DESCRIPTIONS[d.kind]
    body = "".join(_element(k, v) for k, v in _properties(d, forward_url)
                   if k != "AuthorizationRules")
    # CountDetails sits right after AccessedAt, as the service writes it.
    body = body.replace("</AccessedAt>", "</AccessedAt>" + _counts(d), 1)
    return _wrap(d.name, url, d.updated, f'<{name} xmlns="{SB}" xmlns:i="{XSI}">'
                                          f"<AuthorizationRules/>{body}</{name}>")


def _key_values(pairs: Mapping[str, Any]) -> str:
    out = []
    for key, value in pairs.items():
        if isinstance(value, bool):
            kind, text = "boolean", str(value).lower()
        elif isinstance(value, int):
            kind, text = ("int" if -(2 ** 31) <= value < 2 ** 31 else "long"), str(value)
        elif isinstance(value, float):
            kind, text = "double", repr(value)
        else:
            kind, text = "string", "" if value is None else str(value)
        out.append(f"<KeyValueOfstringanyType><Key>{escape(key)}</Key>"
                   f'<Value xmlns:d6p1="{XSD}" i:type="d6p1:{kind}">{escape(text)}</Value>'
                   "</KeyValueOfstringanyType>")
    return "".join(out)


def _filter(rule: Rule) -> str:
    f = rule.filter
    if isinstance(f, (TrueFilter, FalseFilter)):
        kind = type(f).__name__
        expression = "1=1" if isinstance(f, TrueFilter) else "1=0"
        return (f'<Filter i:type="{kind}"><SqlExpression>{expression}</SqlExpression>'
                "<CompatibilityLevel>20</CompatibilityLevel></Filter>")
    if isinstance(f, SqlFilter):
        return (f'<Filter i:type="SqlFilter">{_element("SqlExpression", f.expression)}'
                "<CompatibilityLevel>20</CompatibilityLevel></Filter>")
    fields = (("CorrelationId", f.correlation_id), ("MessageId", f.message_id), ("To", f.to),
              ("ReplyTo", f.reply_to), ("Label", f.subject), ("SessionId", f.session_id),
              ("ReplyToSessionId", f.reply_to_session_id), ("ContentType", f.content_type))
    inner = "".join(_element(k, v) for k, v in fields if v is not None)
    return (f'<Filter i:type="CorrelationFilter">{inner}'
            f"<Properties>{_key_values(f.properties)}</Properties></Filter>")


def rule_entry(rule: Rule, url: str, created: float) -> str:
    """The entry of one rule."""
    if rule.action is None:
        action = '<Action i:type="EmptyRuleAction"/>'
    else:
        expression = _element("SqlExpression", rule.action.expression)
        action = (f'<Action i:type="SqlRuleAction">{expression}'
                  "<CompatibilityLevel>20</CompatibilityLevel></Action>")
    body = (f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}">{_filter(rule)}{action}'
            f"<CreatedAt>{_timestamp(created)}</CreatedAt>{_element('Name', rule.name)}"
            "</RuleDescription>")
    return _wrap(rule.name, url, created, body)


def namespace_entry(name: str, url: str, created: float, now: float) -> str:
    """The entry of ``$namespaceinfo``."""
    body = (f'<NamespaceInfo xmlns="{SB}" xmlns:i="{XSI}">'
            f"<CreatedTime>{_timestamp(created)}</CreatedTime>"
            "<MessagingSKU>Standard</MessagingSKU><MessagingUnits>0</MessagingUnits>"
            f"<ModifiedTime>{_timestamp(created)}</ModifiedTime>{_element('Name', name)}"
            "<NamespaceType>Messaging</NamespaceType></NamespaceInfo>")
    return _wrap(name, url, now, body)


def feed(title: str, url: str, entries: Iterable[str], now: float,
         next_url: str | None = None) -> str:
    """A feed of entries (an empty one is how the service answers a get of nothing)."""
    links = f'<link rel="self" href={quoteattr(url)}/>'
    if next_url is not None:
        links += f'<link rel="next" href={quoteattr(next_url)}/>'
    return (f'<feed xmlns="{ATOM}"><title type="text">{escape(title)}</title>'
            f"<id>{escape(url)}</id><updated>{_timestamp(now)}</updated>{links}"
            f"{''.join(entries)}</feed>")


def error(code: int, detail: str) -> str:
    """The body of an error answer."""
    return f"<Error><Code>{code}</Code><Detail>{escape(detail)}</Detail></Error>"
