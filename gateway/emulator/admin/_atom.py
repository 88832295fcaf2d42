"""The ATOM XML of the Service Bus administration API: the entries and feeds it answers
with (what a create or update sends is read by ``_descriptions``).

An entry is ``<entry xmlns="http://www.w3.org/2005/Atom">`` with ``title`` (the name)
and ``content type="application/xml"`` holding a ``QueueDescription``,
``TopicDescription``, ``SubscriptionDescription``, ``RuleDescription`` or
``NamespaceInfo`` in the ``.../2010/10/servicebus/connect`` namespace; message counts
are a ``CountDetails`` whose children are in ``.../2011/06/servicebus``; a list is a
``feed`` of entries, with a second ``link`` (``rel="next"``) when more follow. Durations
are ISO 8601 (``PT1M``); "never" is .NET's ``TimeSpan.MaxValue``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from gateway.emulator.admin._entities import Described
from gateway.transports import EntityKind, FalseFilter, Rule, SqlFilter, TrueFilter

__all__ = ["ATOM", "COUNTS", "DESCRIPTIONS", "KEPT", "NEVER", "NEVER_SECONDS", "SB", "XSD",
           "XSI", "entry", "error", "feed", "iso_duration", "local_name", "namespace_entry",
           "rule_entry"]

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
#: .NET's TimeSpan.MaxValue: what Service Bus writes for "never".
NEVER = "P10675199DT2H48M5.4775807S"
NEVER_SECONDS = 10675199 * 86400.0
DESCRIPTIONS = {EntityKind.QUEUE: "QueueDescription", EntityKind.TOPIC: "TopicDescription",
                EntityKind.SUBSCRIPTION: "SubscriptionDescription"}
#: Properties kept as sent and given back, by kind (the emulator does not act on them).
KEPT = {
    EntityKind.QUEUE: ("MaxSizeInMegabytes", "EnableBatchedOperations", "AutoDeleteOnIdle",
                       "EnablePartitioning", "EnableExpress", "UserMetadata", "Status"),
    EntityKind.TOPIC: ("MaxSizeInMegabytes", "EnableBatchedOperations", "AutoDeleteOnIdle",
                       "EnablePartitioning", "EnableExpress", "UserMetadata", "Status",
                       "SupportOrdering"),
    EntityKind.SUBSCRIPTION: ("EnableBatchedOperations", "AutoDeleteOnIdle", "UserMetadata",
                              "Status", "DeadLetteringOnFilterEvaluationExceptions"),
}
_DEFAULTS = {"MaxSizeInMegabytes": "1024", "EnableBatchedOperations": "true",
             "AutoDeleteOnIdle": NEVER, "EnablePartitioning": "false",
             "EnableExpress": "false", "Status": "Active", "SupportOrdering": "true",
             "DeadLetteringOnFilterEvaluationExceptions": "true"}


# -- values ------------------------------------------------------------------------------


def iso_duration(seconds: float | None) -> str:
    """``seconds`` as ISO 8601 (``PT1M``, ``P1DT2H``); None is "never"."""
    if seconds is None or seconds >= NEVER_SECONDS:
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


def local_name(tag: str) -> str:
    return tag.rpartition("}")[2]


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
    kept = {k: s.extras.get(k, _DEFAULTS.get(k)) for k in KEPT[kind]}
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
    if kind is not EntityKind.SUBSCRIPTION:
        props += [("EnableExpress", kept["EnableExpress"]),
                  ("MaxMessageSizeInKilobytes", d.settings.max_message_size // 1024)]
    return props


def entry(d: Described, url: str, forward_url: str | None = None) -> str:
    """The entry of one queue, topic or subscription."""
    name = DESCRIPTIONS[d.kind]
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
