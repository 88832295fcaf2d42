"""Subscription rules: the SQL filter language, correlation filters, actions and copies."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.transports import (
    CorrelationFilter,
    FalseFilter,
    Rule,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
)
from gateway.transports.filters._rules import copies, rules_from_json, rules_to_json
from gateway.transports.filters._sql import compile_condition
from gateway.transports.filters._values import MessageView
from replication import ConfigError


def view(system: dict[str, Any] | None = None, **user: Any) -> MessageView:
    return MessageView(user=user, system=system or {})


def matches(sql: str, v: MessageView) -> bool:
    return compile_condition(sql)(v)


# -- the language --------------------------------------------------------------------


@pytest.mark.parametrize(("sql", "expected"), [
    ("color = 'red'", True),
    ("color <> 'red'", False),
    ("color != 'blue'", True),
    ("quantity > 10", True),
    ("quantity >= 12 AND quantity <= 12", True),
    ("quantity < 12.5", True),
    ("quantity = 12.0", True),          # an integer equals the same decimal
    ("quantity + 3 * 2 = 18", True),    # * before +
    ("(quantity + 3) * 2 = 30", True),
    ("quantity / 5 = 2", True),         # integer division truncates
    ("-quantity % 5 = -2", True),       # the sign follows the dividend, as in C#
    ("quantity / 0 = 1", False),        # unknown
    ("price * 2 > 3E0", True),
    ("color IN ('blue', 'red')", True),
    ("color NOT IN ('blue', 'red')", False),
    ("color LIKE 'r%'", True),
    ("color LIKE '_e_'", True),
    ("color LIKE 'R%'", False),         # case-sensitive
    ("color NOT LIKE '%x%'", True),
    ("code LIKE 'ABC!%' ESCAPE '!'", True),
    ("code LIKE 'ABC!%' ESCAPE '!' AND code NOT LIKE 'ABC!%X' ESCAPE '!'", True),
    ("EXISTS(color)", True),
    ("EXISTS (missing)", False),
    ("missing IS NULL", True),
    ("nothing IS NULL", True),          # present, but null
    ("color IS NOT NULL", True),
    ("NOT EXISTS(nothing)", False),     # EXISTS asks whether it is there
    ("flag = TRUE", True),
    ("flag <> FALSE", True),
    ("flag > FALSE", False),            # booleans are only equal or not
    ("color = 5", False),               # a string and a number: unknown
    ("missing = 1 OR color = 'red'", True),
    ("missing = 1 AND color = 'red'", False),
    ("NOT (missing = 1)", False),       # NOT unknown is unknown
    ("NOT missing = 1 OR TRUE", True),
    ("user.color = 'red' AND [odd name] = 'x' AND \"it's\" = 1", True),
    ("name = 'it''s'", True),
    ("sys.MessageId = 'm1' AND sys.label = 'L' AND sys.Subject = 'L'", True),
    ("sys.CorrelationId IS NULL", True),
    ("TRUE", True),
    ("FALSE OR 1 = 1", True),
    ("color = 'red' and QUANTITY is null", True),  # keywords in any case; names exact
])
def test_conditions(sql: str, expected: bool) -> None:
    v = view({"MessageId": "m1", "Label": "L"}, color="red", quantity=12, price=2.5,
             code="ABC%", flag=True, nothing=None, **{"odd name": "x", "it's": 1,
                                                       "name": "it's"})
    assert matches(sql, v) is expected


@pytest.mark.parametrize(("sql", "position", "words"), [
    ("color = ", 9, "expected a property"),
    ("color == 'red'", 8, "expected a property"),
    ("color = 'red' AND", 18, "expected a property"),
    ("color IN ('a', 'b'", 19, "expected ')'"),
    ("(color = 'red'", 15, "expected ')'"),
    ("color = 'red' quantity", 15, "the end of the expression"),
    ("color", 1, "expected a condition"),
    ("color = 'red' = TRUE", 1, "expected an expression"),
    ("NOT color", 5, "expected a condition"),
    ("color IS 'x'", 10, "expected NULL"),
    ("color = 'red", 9, "unterminated string"),
    ("a LIKE 'x' ESCAPE 'ab'", 19, "one character"),
    ("sys.Nope = 1", 1, "not a system property"),
    ("other.color = 1", 1, "unknown scope"),
    ("newid() = 1", 1, "is not emulated"),
    ("color = 'red' # 1", 15, "the character '#'"),
])
def test_a_filter_that_does_not_parse_names_the_rule_and_the_character(
        sql: str, position: int, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Rule(name="orders-red", filter=SqlFilter(sql))
    text = str(caught.value)
    assert text.startswith("rule 'orders-red': SQL filter")
    assert f"character {position}" in text
    assert words in text


@pytest.mark.parametrize(("sql", "words"), [
    ("SET sys.MessageId = 'x'", "SET sys.MessageId"),
    ("REMOVE sys.To", "REMOVE sys.To"),
    ("SET a 1", "expected '='"),
    ("DELETE a", "SET or REMOVE"),
    (";", "no SET or REMOVE"),
])
def test_an_action_that_cannot_be_done_is_refused(sql: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        Rule(name="tag", action=SqlRuleAction(sql))


# Property tests: the evaluator against a plain Python model of the same semantics.

_names = st.sampled_from(["a", "b", "c"])
_values = st.one_of(st.integers(-5, 5), st.sampled_from(["x", "y", "xy"]), st.booleans(),
                    st.none())
_constants = st.one_of(st.integers(-5, 5), st.sampled_from(["x", "y", "xy"]))


def _sql(v: Any) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


@given(props=st.dictionaries(_names, _values), name=_names, op=st.sampled_from(
    ["=", "<>", "<", ">", "<=", ">="]), constant=_constants)
def test_a_comparison_is_true_only_for_two_values_of_one_kind(props, name, op, constant):
    value = props.get(name)
    kind_ok = (isinstance(value, str) == isinstance(constant, str)
               and value is not None and not isinstance(value, bool))
    ops = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
           ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}
    expected = kind_ok and ops[op](value, constant)
    assert matches(f"{name} {op} {_sql(constant)}", view(**props)) is expected
    # NOT of a known comparison is its opposite; of an unknown one, still not true.
    assert matches(f"NOT ({name} {op} {_sql(constant)})", view(**props)) is (
        kind_ok and not expected)


@given(props=st.dictionaries(_names, _values), x=_names, y=_names,
       cx=_constants, cy=_constants, joiner=st.sampled_from(["AND", "OR"]))
def test_and_or_follow_three_valued_logic(props, x, y, cx, cy, joiner):
    def truth(name: str, c: Any) -> bool | None:
        v = props.get(name)
        if v is None or isinstance(v, bool) or isinstance(v, str) != isinstance(c, str):
            return None
        return v == c

    p, q = truth(x, cx), truth(y, cy)
    expected = (p is True and q is True) if joiner == "AND" else (p is True or q is True)
    sql = f"{x} = {_sql(cx)} {joiner} {y} = {_sql(cy)}"
    assert matches(sql, view(**props)) is expected


@given(text=st.text(alphabet="ab%_!", max_size=6), pattern=st.text(alphabet="ab%_",
                                                                     max_size=5))
def test_like_is_a_whole_string_match_of_its_wildcards(text, pattern):
    # % is any run, _ any one character; everything else is itself.
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    expected = re.fullmatch(regex, text, re.DOTALL) is not None
    assert matches(f"s LIKE '{pattern}'", view(s=text)) is expected


@given(st.text(max_size=30))
def test_any_text_either_compiles_or_raises_config_error(text):
    try:
        fn = compile_condition(text)
    except ConfigError:
        return
    assert fn(view(a=1)) in (True, False)


# -- correlation filters ------------------------------------------------------------


def test_a_correlation_filter_needs_every_field_and_property_it_names() -> None:
    f = CorrelationFilter(correlation_id="c1", subject="s", properties={"n": 5, "ok": True})
    rule = Rule(name="c", filter=f)
    system = {"CorrelationId": "c1", "Label": "s"}
    assert copies([rule], view(system, n=5, ok=True, extra="x")) != []
    assert copies([rule], view(system, n=5.0, ok=True)) != []  # a number by value
    assert copies([rule], view(system, n="5", ok=True)) == []  # a string is not a number
    assert copies([rule], view(system, n=5, ok=1)) == []       # nor 1 a boolean
    assert copies([rule], view({"CorrelationId": "c1"}, n=5, ok=True)) == []
    assert copies([rule], view(system, n=5)) == []


def test_a_correlation_filter_names_something() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        CorrelationFilter()
    with pytest.raises(ConfigError, match="must be a string"):
        CorrelationFilter(to=5)  # type: ignore[arg-type]


# -- copies and actions -------------------------------------------------------------


def test_rules_without_actions_give_one_copy_and_each_action_its_own() -> None:
    # Given five rules that all match: three without an action, two with one
    rules = [Rule(name="t"), Rule(name="sql", filter=SqlFilter("n > 1")),
             Rule(name="corr", filter=CorrelationFilter(properties={"n": 2})),
             Rule(name="double", filter=TrueFilter(), action=SqlRuleAction("SET n = n * 2")),
             Rule(name="tag", filter=SqlFilter("EXISTS(n)"),
                  action=SqlRuleAction("SET sys.To = 'audit'; REMOVE n; SET x = 'y'"))]
    # When a message is matched against them
    got = copies(rules, view({"MessageId": "m"}, n=2))
    # Then three copies: the plain one first, then one per action, named by RuleName
    assert got[0].user is None and got[0].system == {}
    assert got[1].user == {"n": 4, "RuleName": "double"}
    assert got[2].user == {"x": "y", "RuleName": "tag"}
    assert got[2].system == {"To": "audit"}


def test_false_filters_and_unmatched_rules_give_no_copy() -> None:
    rules = [Rule(name="no", filter=FalseFilter()),
             Rule(name="act", filter=SqlFilter("n = 9"), action=SqlRuleAction("SET a = 1"))]
    assert copies(rules, view(n=1)) == []


def test_later_statements_see_earlier_ones() -> None:
    rule = Rule(name="r", action=SqlRuleAction("SET a = 1 SET b = a + 1; SET c = missing"))
    [copy] = copies([rule], view())
    assert copy.user == {"a": 1, "b": 2, "c": None, "RuleName": "r"}


def test_rules_survive_their_json() -> None:
    rules = (Rule(name="a", filter=SqlFilter("x = 1"), action=SqlRuleAction("SET y = 2")),
             Rule(name="b", filter=CorrelationFilter(to="t", properties={"k": "v"})),
             Rule(name="c", filter=FalseFilter()), Rule())
    assert rules_from_json(rules_to_json(rules)) == rules
