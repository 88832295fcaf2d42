"""The values of the rules' SQL language: what a rule sees of a message, and how values
compare, add up and match a ``LIKE`` pattern (three-valued: see :mod:`._filters_sql`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "MISSING",
    "SETTABLE_SYSTEM_PROPERTIES",
    "SYSTEM_PROPERTIES",
    "UNKNOWN",
    "MessageView",
    "absent",
    "arithmetic",
    "compare",
    "is_number",
    "like",
    "negate",
]


class _Missing:
    """An application property the message does not have (unknown in comparisons)."""

    def __repr__(self) -> str:
        return "MISSING"


#: What :meth:`MessageView.get` answers for a property the message does not have.
MISSING: Any = _Missing()

#: The system properties a rule can read (``sys.NAME``, any case): canonical name by
#: lower-case name. ``Subject`` is the SDKs' name of ``Label``.
SYSTEM_PROPERTIES: Mapping[str, str] = {
    name.lower(): name for name in (
        "MessageId", "CorrelationId", "To", "ReplyTo", "Label", "SessionId",
        "ReplyToSessionId", "ContentType", "PartitionKey")
} | {"subject": "Label"}

#: The system properties an action may ``SET``.
SETTABLE_SYSTEM_PROPERTIES = frozenset(
    ("CorrelationId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId",
     "ContentType", "PartitionKey"))


class MessageView:
    """What a rule sees of one message: its application properties and, when asked
    for, its system properties (``system`` may be a callable, called at most once).

    Args:
        user: the application properties.
        system: the system properties by canonical name (:data:`SYSTEM_PROPERTIES`); a
            name left out reads as null.
    """

    def __init__(self, *, user: Mapping[str, Any],
                 system: Mapping[str, Any] | Callable[[], Mapping[str, Any]]) -> None:
        self.user = user
        self._system = system

    @functools.cached_property
    def system(self) -> Mapping[str, Any]:
        """The system properties (loaded on first use)."""
        return self._system() if callable(self._system) else self._system

    def get(self, scope: str, name: str) -> Any:
        """A property's value; :data:`MISSING` when an application property is absent."""
        if scope == "sys":
            return self.system.get(name)
        return self.user.get(name, MISSING)

    def exists(self, scope: str, name: str) -> bool:
        """Whether the message has the property (a system property: whether it is set)."""
        if scope == "sys":
            return self.system.get(name) is not None
        return name in self.user


UNKNOWN = None  # the third truth value (and a null value)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def absent(v: Any) -> bool:
    return v is None or v is MISSING


def compare(op: str, a: Any, b: Any) -> bool | None:
    if absent(a) or absent(b):
        return UNKNOWN
    same = (is_number(a) and is_number(b)) or (isinstance(a, str) and isinstance(b, str))
    if not same and not (isinstance(a, bool) and isinstance(b, bool)
                         and op in ("=", "<>", "!=")):
        return UNKNOWN
    if op == "=":
        return bool(a == b)
    if op in ("<>", "!="):
        return bool(a != b)
    if op == "<":
        return bool(a < b)
    if op == ">":
        return bool(a > b)
    if op == "<=":
        return bool(a <= b)
    return bool(a >= b)


def arithmetic(op: str, a: Any, b: Any) -> Any:
    if op == "+" and isinstance(a, str) and isinstance(b, str):
        return a + b
    if not (is_number(a) and is_number(b)):
        return UNKNOWN
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return UNKNOWN
    if isinstance(a, int) and isinstance(b, int):
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return quotient if op == "/" else a - b * quotient
    return a / b if op == "/" else a - b * int(a / b)


@functools.lru_cache(maxsize=256)
def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def like(value: Any, pattern: Any, escape: Any) -> bool | None:
    if not isinstance(value, str) or not isinstance(pattern, str):
        return UNKNOWN
    if escape is not None and not (isinstance(escape, str) and len(escape) == 1):
        return UNKNOWN
    return _like_regex(pattern, escape).fullmatch(value) is not None


def negate(v: bool | None) -> bool | None:
    return None if v is None else not v


