"""The SQL language of Service Bus subscription rules: a filter's condition and an action.

A small hand-written parser (a Pratt parser over a regular-expression lexer) compiles
an expression into Python closures over a :class:`MessageView`, once, when the rule is
made; a text that does not parse raises :class:`~replication.ConfigError` naming the
character where it stopped and what it expected there.

The subset is the one Service Bus documents for ``SqlFilter`` and ``SqlRuleAction``:

- conditions: ``= <> != < > <= >=``, ``AND``, ``OR``, ``NOT``, ``[NOT] IN (...)``,
  ``[NOT] LIKE pattern [ESCAPE 'c']`` (``%`` any run of characters, ``_`` one
  character), ``EXISTS (property)``, ``IS [NOT] NULL``, parentheses, ``TRUE`` and
  ``FALSE``;
- expressions: properties, string (``'it''s'``), integer, decimal (``1.5``, ``2E3``),
  boolean and ``NULL`` constants, ``+ - * / %`` and unary ``+ -``;
- properties: ``sys.NAME`` (a system property: :data:`SYSTEM_PROPERTIES`, names in any
  case), ``user.NAME`` or a bare ``NAME`` (an application property, by its exact name);
  a name that is not a plain identifier is written ``[with space]`` or ``"quoted"``;
- actions: statements ``SET property = expression`` and ``REMOVE property``, separated
  by ``;`` (or nothing). ``SET`` may write an application property or one of
  :data:`SETTABLE_SYSTEM_PROPERTIES`; ``REMOVE`` removes an application property.

Evaluation is three-valued, as in SQL: a missing application property, a null, a
comparison of values of different types (a string with a number), or arithmetic on
something that is not a number is *unknown*; ``NOT`` unknown is unknown, ``AND`` and
``OR`` follow Kleene's rules, and a filter matches only when its condition is true.
``IS NULL`` is true for a missing property and for a null one; ``EXISTS`` only asks
whether the property is there. Strings compare by code point (case-sensitive), numbers
by value (an integer equals the same decimal), booleans only with ``=`` and ``<>``.
Integer division truncates towards zero, as in C#; a division by zero is unknown.

Not emulated (a ``ConfigError`` at parse time, naming it): functions (``newid()``,
``property()``), system properties other than those listed, ``SET sys.MessageId`` (the
gateway de-duplicates on it) and ``REMOVE`` of a system property.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.transports.filters._values import (
    SETTABLE_SYSTEM_PROPERTIES,
    SYSTEM_PROPERTIES,
    UNKNOWN,
    MessageView,
    absent,
    arithmetic,
    compare,
    is_number,
    like,
    negate,
)
from replication import ConfigError

__all__ = ["Assignment", "compile_action", "compile_condition"]


@dataclass(frozen=True)
class Assignment:
    """One statement of an action: ``SET scope.name = value`` or ``REMOVE user.name``."""

    scope: str
    name: str
    value: Callable[[MessageView], Any] | None  # None: REMOVE


# -- lexer ------------------------------------------------------------------------------

_TOKENS = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<bracket>\[(?:[^\]]|\]\])*\])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><>|!=|<=|>=|[=<>+\-*/%(),.;])
""", re.VERBOSE)
_KEYWORDS = frozenset(("AND", "OR", "NOT", "IN", "LIKE", "ESCAPE", "IS", "NULL", "EXISTS",
                       "TRUE", "FALSE", "SET", "REMOVE"))
_COMPARISONS = frozenset(("=", "<>", "!=", "<", ">", "<=", ">="))


@dataclass(frozen=True)
class _Token:
    kind: str  # number, string, name, keyword, op, end
    text: str
    at: int  # 0-based offset into the expression
    value: Any = None


def _lex(text: str, what: str) -> list[_Token]:
    tokens: list[_Token] = []
    at = 0
    while at < len(text):
        m = _TOKENS.match(text, at)
        if m is None:
            hint = ("an unterminated string or name" if text[at] in "'\"[" else
                    f"the character {text[at]!r}")
            raise ConfigError(f"{what}: {hint} at character {at + 1} of {text!r}")
        kind, raw = m.lastgroup or "", m.group()
        if kind == "number":
            is_int = raw.isdigit()
            tokens.append(_Token("number", raw, at, int(raw) if is_int else float(raw)))
        elif kind == "string":
            tokens.append(_Token("string", raw, at, raw[1:-1].replace("''", "'")))
        elif kind == "quoted":
            tokens.append(_Token("name", raw, at, raw[1:-1].replace('""', '"')))
        elif kind == "bracket":
            tokens.append(_Token("name", raw, at, raw[1:-1].replace("]]", "]")))
        elif kind == "name":
            upper = raw.upper()
            tokens.append(_Token("keyword" if upper in _KEYWORDS else "name",
                                 upper if upper in _KEYWORDS else raw, at, raw))
        elif kind == "op":
            tokens.append(_Token("op", raw, at))
        at = m.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


# -- parser -----------------------------------------------------------------------------

Fn = Callable[[MessageView], Any]

_BOOL, _VALUE = "condition", "expression"
#: Binding powers: OR < AND < NOT < comparisons < + - < * / % < unary.
_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY = 1, 2, 3, 4, 5, 6, 7


@dataclass(frozen=True)
class _Node:
    kind: str  # _BOOL or _VALUE
    fn: Fn
    at: int
    is_property: bool = False
    constant: bool = False


class _Parser:
    def __init__(self, text: str, what: str) -> None:
        self.text, self.what = text, what
        self.tokens = _lex(text, what)
        self.i = 0

    # -- tokens
    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def advance(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at_keyword(self, *words: str) -> bool:
        return self.tok.kind == "keyword" and self.tok.text in words

    def at_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def fail(self, expected: str, tok: _Token | None = None) -> ConfigError:
        tok = tok or self.tok
        found = "the end" if tok.kind == "end" else repr(tok.text)
        return ConfigError(f"{self.what}: expected {expected} at character {tok.at + 1}, "
                           f"found {found}, in {self.text!r}")

    def expect_op(self, op: str) -> None:
        if not self.at_op(op):
            raise self.fail(f"'{op}'")
        self.advance()

    def expect_end(self) -> None:
        if self.tok.kind != "end":
            raise self.fail("the end of the expression (or AND, OR, an operator)")

    # -- kinds
    def condition(self, node: _Node) -> _Node:
        if node.kind == _BOOL:
            return node
        if node.constant and isinstance(node.fn(_EMPTY), bool):
            return _Node(_BOOL, node.fn, node.at)
        raise ConfigError(f"{self.what}: expected a condition at character {node.at + 1} "
                          f"(a comparison, IN, LIKE, IS NULL, EXISTS...), found an "
                          f"expression, in {self.text!r}")

    def value(self, node: _Node) -> _Node:
        if node.kind == _VALUE:
            return node
        raise ConfigError(f"{self.what}: expected an expression at character {node.at + 1}, "
                          f"found a condition, in {self.text!r}")

    # -- Pratt loop
    def parse(self, power: int = 0) -> _Node:
        left = self.prefix()
        while True:
            tok = self.tok
            if tok.kind == "keyword" and tok.text == "OR" and power < _OR:
                left = self.logical(left, _OR)
            elif tok.kind == "keyword" and tok.text == "AND" and power < _AND:
                left = self.logical(left, _AND)
            elif power < _CMP and (self.at_op(*_COMPARISONS) or self.at_keyword(
                    "IN", "LIKE", "IS") or (self.at_keyword("NOT") and self.tokens[
                        self.i + 1].kind == "keyword" and self.tokens[self.i + 1].text in (
                            "IN", "LIKE"))):
                left = self.predicate(left)
            elif self.at_op("+", "-") and power < _ADD:
                left = self.binary(left, _ADD)
            elif self.at_op("*", "/", "%") and power < _MUL:
                left = self.binary(left, _MUL)
            else:
                return left

    def logical(self, left: _Node, power: int) -> _Node:
        op = self.advance()
        a, b = self.condition(left).fn, self.condition(self.parse(power)).fn
        if power == _AND:
            def both(v: MessageView) -> bool | None:
                x = a(v)
                if x is False:
                    return False
                y = b(v)
                return False if y is False else None if x is None or y is None else True
            return _Node(_BOOL, both, op.at)

        def either(v: MessageView) -> bool | None:
            x = a(v)
            if x is True:
                return True
            y = b(v)
            return True if y is True else None if x is None or y is None else False
        return _Node(_BOOL, either, op.at)

    def binary(self, left: _Node, power: int) -> _Node:
        op = self.advance().text
        a, b = self.value(left).fn, self.value(self.parse(power)).fn
        return _Node(_VALUE, lambda v: arithmetic(op, a(v), b(v)), left.at)

    def predicate(self, left: _Node) -> _Node:
        a = self.value(left).fn
        if self.at_op(*_COMPARISONS):
            op = self.advance().text
            b = self.value(self.parse(_CMP)).fn
            return _Node(_BOOL, lambda v: compare(op, a(v), b(v)), left.at)
        if self.at_keyword("IS"):
            self.advance()
            inverted = self.at_keyword("NOT")
            if inverted:
                self.advance()
            if not self.at_keyword("NULL"):
                raise self.fail("NULL")
            self.advance()
            return _Node(_BOOL, lambda v: absent(a(v)) != inverted, left.at)
        inverted = self.at_keyword("NOT")
        if inverted:
            self.advance()
        if self.at_keyword("IN"):
            self.advance()
            found = self.in_list(a)
        else:
            self.advance()  # LIKE
            found = self.like(a)
        return _Node(_BOOL, (lambda v: negate(found(v))) if inverted else found, left.at)

    def in_list(self, a: Fn) -> Fn:
        self.expect_op("(")
        items = [self.value(self.parse(_CMP)).fn]
        while self.at_op(","):
            self.advance()
            items.append(self.value(self.parse(_CMP)).fn)
        self.expect_op(")")

        def found(v: MessageView) -> bool | None:
            x = a(v)
            if absent(x):
                return UNKNOWN
            unknown = False
            for item in items:
                r = compare("=", x, item(v))
                if r:
                    return True
                unknown = unknown or r is None
            return UNKNOWN if unknown else False
        return found

    def like(self, a: Fn) -> Fn:
        pattern = self.value(self.parse(_ADD))
        escape: _Node | None = None
        if self.at_keyword("ESCAPE"):
            self.advance()
            escape = self.value(self.parse(_ADD))
            if escape.constant:
                char = escape.fn(_EMPTY)
                if not (isinstance(char, str) and len(char) == 1):
                    raise ConfigError(f"{self.what}: the ESCAPE character at character "
                                      f"{escape.at + 1} must be a string of one character, "
                                      f"in {self.text!r}")
        p = pattern.fn
        e = escape.fn if escape is not None else (lambda v: None)
        return lambda v: like(a(v), p(v), e(v))

    def prefix(self) -> _Node:
        tok = self.advance()
        if tok.kind == "number":
            return self.constant(tok, tok.value)
        if tok.kind == "string":
            return self.constant(tok, tok.value)
        if tok.kind == "keyword":
            return self.keyword(tok)
        if tok.kind == "name":
            return self.property(tok)
        if tok.kind == "op" and tok.text in ("+", "-"):
            inner = self.value(self.parse(_UNARY))
            operand, sign = inner.fn, 1 if tok.text == "+" else -1
            return _Node(_VALUE, lambda v: sign * x if is_number(x := operand(v)) else None,
                         tok.at, constant=inner.constant)
        if tok.kind == "op" and tok.text == "(":
            inner = self.parse()
            self.expect_op(")")
            return _Node(inner.kind, inner.fn, tok.at, constant=inner.constant)
        raise self.fail("a property, a constant, NOT, EXISTS or '('", tok)

    def keyword(self, tok: _Token) -> _Node:
        if tok.text in ("TRUE", "FALSE"):
            return self.constant(tok, tok.text == "TRUE")
        if tok.text == "NULL":
            return self.constant(tok, None)
        if tok.text == "NOT":
            operand = self.condition(self.parse(_NOT)).fn
            return _Node(_BOOL, lambda v: negate(operand(v)), tok.at)
        if tok.text == "EXISTS":
            self.expect_op("(")
            name_tok = self.advance()
            if name_tok.kind != "name":
                raise self.fail("a property", name_tok)
            scope, name = self.property_name(name_tok)
            self.expect_op(")")
            return _Node(_BOOL, lambda v: v.exists(scope, name), tok.at)
        raise self.fail("a property, a constant, NOT, EXISTS or '('", tok)

    @staticmethod
    def constant(tok: _Token, value: Any) -> _Node:
        return _Node(_VALUE, lambda v: value, tok.at, constant=True)

    def property(self, tok: _Token) -> _Node:
        if self.at_op("("):
            raise ConfigError(f"{self.what}: function {tok.text}() at character {tok.at + 1} "
                              f"is not emulated: compare properties, in {self.text!r}")
        scope, name = self.property_name(tok)
        return _Node(_VALUE, lambda v: v.get(scope, name), tok.at, is_property=True)

    def property_name(self, tok: _Token) -> tuple[str, str]:
        """(scope, name) of a property that starts with ``tok``, a name already taken."""
        if not self.at_op("."):
            return "user", tok.value
        self.advance()
        name_tok = self.advance()
        if name_tok.kind not in ("name", "keyword"):
            raise self.fail("a property name after the '.'", name_tok)
        name = name_tok.value
        scope = tok.value.lower() if tok.text == tok.value else ""
        if scope == "user":
            return "user", name
        if scope != "sys":
            raise ConfigError(f"{self.what}: unknown scope {tok.text!r} at character "
                              f"{tok.at + 1}: write sys.NAME for a system property, user.NAME "
                              f"or NAME for an application property ([a.b] for a name with a "
                              f"dot), in {self.text!r}")
        canonical = SYSTEM_PROPERTIES.get(name.lower())
        if canonical is None:
            known = ", ".join(sorted(set(SYSTEM_PROPERTIES.values())))
            raise ConfigError(f"{self.what}: sys.{name} at character {tok.at + 1} is not a "
                              f"system property rules can read here (use one of {known})")
        return "sys", canonical


_EMPTY = MessageView(user={}, system={})


def compile_condition(text: str, *, what: str = "SQL filter") -> Callable[[MessageView], bool]:
    """Compile a filter's condition; the result tells whether a message matches.

    Raises:
        ConfigError: the text does not parse (the message names the character) or uses
            something not emulated.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what}: the SQL expression is empty")
    parser = _Parser(text, what)
    node = parser.condition(parser.parse())
    parser.expect_end()
    fn = node.fn
    return lambda view: fn(view) is True


def compile_action(text: str, *, what: str = "SQL action") -> list[Assignment]:
    """Compile an action's statements (``SET p = expression``, ``REMOVE p``).

    Raises:
        ConfigError: the text does not parse, or sets or removes what cannot be.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what}: the SQL expression is empty")
    parser = _Parser(text, what)
    out: list[Assignment] = []
    while parser.tok.kind != "end":
        if parser.at_op(";"):
            parser.advance()
            continue
        if not parser.at_keyword("SET", "REMOVE"):
            raise parser.fail("SET or REMOVE")
        verb = parser.advance().text
        tok = parser.advance()
        if tok.kind != "name":
            raise parser.fail("a property", tok)
        scope, name = parser.property_name(tok)
        if scope == "sys" and (verb == "REMOVE" or name not in SETTABLE_SYSTEM_PROPERTIES):
            allowed = ", ".join(sorted(SETTABLE_SYSTEM_PROPERTIES))
            raise ConfigError(f"{what}: {verb} sys.{name} at character {tok.at + 1} is not "
                              f"emulated: an action may SET sys. {allowed}, and SET or "
                              "REMOVE application properties")
        if verb == "REMOVE":
            out.append(Assignment(scope, name, None))
            continue
        parser.expect_op("=")
        out.append(Assignment(scope, name, parser.value(parser.parse()).fn))
    if not out:
        raise ConfigError(f"{what}: no SET or REMOVE statement in {text!r}")
    return out
