"""Subscription rules: filters that select a topic's messages into a subscription, and
the actions that annotate the copies.

A subscription holds named :class:`Rule` s; each has a filter (:class:`TrueFilter`,
:class:`FalseFilter`, :class:`CorrelationFilter` or :class:`SqlFilter`) and may have an
action (:class:`SqlRuleAction`). As on Service Bus (:func:`copies`): the rules without
an action are OR-ed and give at most one copy of a message; each rule with an action
that matches gives a copy of its own, with the action applied and the application
property ``RuleName`` set to the rule's name. A subscription made without rules has
Service Bus's ``$Default`` rule, a true filter.

A rule is checked when it is made: a SQL filter or action that does not parse raises
:class:`~replication.ConfigError` naming the rule and the character (see
:mod:`._filters_sql` for the language). Rules are kept in the namespace file as JSON
(:func:`rules_to_json`, :func:`rules_from_json`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.transports.filters._sql import Assignment, compile_action, compile_condition
from gateway.transports.filters._values import MISSING, MessageView
from replication import ConfigError, PropertyValue

__all__ = [
    "DEFAULT_RULE",
    "RULE_NAME_PROPERTY",
    "Copy",
    "CorrelationFilter",
    "FalseFilter",
    "MessageView",
    "Rule",
    "RuleFilter",
    "SqlFilter",
    "SqlRuleAction",
    "TrueFilter",
    "copies",
    "rules_from_json",
    "rules_to_json",
]

#: The application property a rule's action sets on its copy: the rule's name.
RULE_NAME_PROPERTY = "RuleName"


@dataclass(frozen=True)
class TrueFilter:
    """Selects every message."""


@dataclass(frozen=True)
class FalseFilter:
    """Selects no message."""


#: The system properties a correlation filter compares: field → canonical name.
_CORRELATION_FIELDS = {
    "correlation_id": "CorrelationId", "message_id": "MessageId", "to": "To",
    "reply_to": "ReplyTo", "subject": "Label", "session_id": "SessionId",
    "reply_to_session_id": "ReplyToSessionId", "content_type": "ContentType",
}


@dataclass(frozen=True, kw_only=True)
class CorrelationFilter:
    """Selects a message whose system properties equal every field given here, and whose
    application properties equal every entry of ``properties`` (a string equals only a
    string, a number a number of the same value, a boolean a boolean).

    ``subject`` is Service Bus's ``Label``. At least one field must be given.
    """

    correlation_id: str | None = None
    message_id: str | None = None
    to: str | None = None
    reply_to: str | None = None
    subject: str | None = None
    session_id: str | None = None
    reply_to_session_id: str | None = None
    content_type: str | None = None
    properties: Mapping[str, PropertyValue] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in _CORRELATION_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"CorrelationFilter.{name} must be a string, not {value!r}")
        if not isinstance(self.properties, Mapping) or not all(
                isinstance(k, str) and (v is None or isinstance(v, (str, int, float, bool)))
                for k, v in self.properties.items()):
            raise ConfigError("CorrelationFilter.properties maps names to strings, numbers, "
                              f"booleans or null, not {self.properties!r}")
        object.__setattr__(self, "properties", dict(self.properties))
        if not self.properties and all(getattr(self, n) is None for n in _CORRELATION_FIELDS):
            raise ConfigError("a CorrelationFilter needs at least one field or property")


@dataclass(frozen=True)
class SqlFilter:
    """Selects the messages for which a SQL condition is true (``color = 'blue' AND
    quantity > 10``); the language is in :mod:`gateway.transports.filters._sql`."""

    expression: str


@dataclass(frozen=True)
class SqlRuleAction:
    """Changes a rule's copy: ``SET quantity = quantity * 2; REMOVE color``."""

    expression: str


RuleFilter = TrueFilter | FalseFilter | CorrelationFilter | SqlFilter


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A named rule of a subscription: a filter and an optional action.

    Raises:
        ConfigError: a bad name, a filter of another type, or SQL that does not parse
            (the message names the rule and the character).
    """

    name: str = "$Default"
    filter: RuleFilter = field(default_factory=TrueFilter)
    action: SqlRuleAction | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= 50:
            raise ConfigError(f"a rule name has 1 to 50 characters, not {self.name!r}")
        if not isinstance(self.filter, (TrueFilter, FalseFilter, CorrelationFilter, SqlFilter)):
            raise ConfigError(f"rule {self.name!r}: the filter must be a TrueFilter, "
                              f"FalseFilter, CorrelationFilter or SqlFilter, not {self.filter!r}")
        if self.action is not None and not isinstance(self.action, SqlRuleAction):
            raise ConfigError(f"rule {self.name!r}: the action must be a SqlRuleAction")
        _compiled(self)  # raises for SQL that does not parse


@dataclass(frozen=True)
class Copy:
    """One copy of a message for a subscription: what its rule's action changed.

    ``user`` is the copy's application properties when an action changed them (None:
    as sent); ``system`` the system properties it set, by canonical name.
    """

    user: dict[str, PropertyValue] | None = None
    system: dict[str, PropertyValue] = field(default_factory=dict)


@dataclass(frozen=True)
class _Compiled:
    match: Callable[[MessageView], bool]
    action: list[Assignment] | None


@functools.lru_cache(maxsize=1024)
def _compiled(rule: Rule) -> _Compiled:
    what = f"rule {rule.name!r}"
    f = rule.filter
    match: Callable[[MessageView], bool]
    if isinstance(f, TrueFilter):
        match = _always
    elif isinstance(f, FalseFilter):
        match = _never
    elif isinstance(f, CorrelationFilter):
        match = _correlation(f)
    else:
        if not isinstance(f.expression, str):
            raise ConfigError(f"{what}: SqlFilter.expression must be a string")
        match = compile_condition(f.expression, what=f"{what}: SQL filter")
    action = None
    if rule.action is not None:
        if not isinstance(rule.action.expression, str):
            raise ConfigError(f"{what}: SqlRuleAction.expression must be a string")
        action = compile_action(rule.action.expression, what=f"{what}: SQL action")
    return _Compiled(match, action)


def _always(view: MessageView) -> bool:
    return True


def _never(view: MessageView) -> bool:
    return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a is not None and b is not None and a == b


def _correlation(f: CorrelationFilter) -> Callable[[MessageView], bool]:
    wanted = [(name, getattr(f, attr)) for attr, name in _CORRELATION_FIELDS.items()
              if getattr(f, attr) is not None]
    props = list(f.properties.items())

    def match(view: MessageView) -> bool:
        user = view.user
        if not all(k in user and _same(user[k], v) for k, v in props):
            return False
        system = view.system if wanted else {}
        return all(system.get(name) == value for name, value in wanted)
    return match


def _apply(action: list[Assignment], view: MessageView, rule: str) -> Copy:
    user = dict(view.user)
    system: dict[str, Any] = {}
    for step in action:
        # Later statements see what earlier ones set.
        current = MessageView(user=user, system={**view.system, **system})
        if step.value is None:
            user.pop(step.name, None)
            continue
        value = step.value(current)
        value = None if value is MISSING else value
        if step.scope == "sys":
            system[step.name] = None if value is None else str(value)
        else:
            user[step.name] = value
    user[RULE_NAME_PROPERTY] = rule
    return Copy(user=user, system=system)


def copies(rules: Sequence[Rule], view: MessageView) -> list[Copy]:
    """The copies of a message a subscription with ``rules`` takes (none: not selected).

    Rules without an action give one plain copy between them when any matches; each
    rule with an action that matches gives its own copy (see the module docstring).
    """
    out: list[Copy] = []
    plain = False
    for rule in rules:
        c = _compiled(rule)
        if c.action is None:
            if not plain and c.match(view):
                plain = True
                out.insert(0, Copy())
        elif c.match(view):
            out.append(_apply(c.action, view, rule.name))
    return out


#: The rule a subscription made without rules has.
DEFAULT_RULE = Rule()


# -- JSON, as kept in the namespace file -------------------------------------------------


def _filter_json(f: RuleFilter) -> dict[str, Any]:
    if isinstance(f, TrueFilter):
        return {"type": "true"}
    if isinstance(f, FalseFilter):
        return {"type": "false"}
    if isinstance(f, SqlFilter):
        return {"type": "sql", "expression": f.expression}
    fields = {k: getattr(f, k) for k in _CORRELATION_FIELDS if getattr(f, k) is not None}
    return {"type": "correlation", **fields, "properties": dict(f.properties)}


def rules_to_json(rules: Sequence[Rule]) -> str:
    """The rules as the JSON text the namespace file keeps."""
    return json.dumps([{"name": r.name, "filter": _filter_json(r.filter),
                        "action": None if r.action is None else r.action.expression}
                       for r in rules], sort_keys=True)


@functools.lru_cache(maxsize=256)
def rules_from_json(text: str) -> tuple[Rule, ...]:
    """The rules kept as ``text`` by :func:`rules_to_json`."""
    out: list[Rule] = []
    for raw in json.loads(text):
        spec = dict(raw["filter"])
        kind = spec.pop("type")
        f: RuleFilter = (TrueFilter() if kind == "true" else FalseFilter() if kind == "false"
                         else SqlFilter(spec["expression"]) if kind == "sql"
                         else CorrelationFilter(**spec))
        action = raw.get("action")
        out.append(Rule(name=raw["name"], filter=f,
                        action=None if action is None else SqlRuleAction(action)))
    return tuple(out)

