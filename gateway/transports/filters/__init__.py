"""Subscription rules: true, false, correlation and SQL filters, and SQL actions."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.transports.filters._rules import (
        DEFAULT_RULE,
        Copy,
        CorrelationFilter,
        FalseFilter,
        Rule,
        SqlFilter,
        SqlRuleAction,
        TrueFilter,
        copies,
        rules_from_json,
        rules_to_json,
    )
    from gateway.transports.filters._values import MessageView

_LAZY = {
    "copies": "gateway.transports.filters._rules",
    "Copy": "gateway.transports.filters._rules",
    "CorrelationFilter": "gateway.transports.filters._rules",
    "DEFAULT_RULE": "gateway.transports.filters._rules",
    "FalseFilter": "gateway.transports.filters._rules",
    "MessageView": "gateway.transports.filters._values",
    "Rule": "gateway.transports.filters._rules",
    "rules_from_json": "gateway.transports.filters._rules",
    "rules_to_json": "gateway.transports.filters._rules",
    "SqlFilter": "gateway.transports.filters._rules",
    "SqlRuleAction": "gateway.transports.filters._rules",
    "TrueFilter": "gateway.transports.filters._rules",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "DEFAULT_RULE",
    "Copy",
    "CorrelationFilter",
    "FalseFilter",
    "MessageView",
    "Rule",
    "SqlFilter",
    "SqlRuleAction",
    "TrueFilter",
    "copies",
    "rules_from_json",
    "rules_to_json",
]
