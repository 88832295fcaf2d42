"""AMQP 1.0 composite types of the geogateway emulator: error, delivery states, termini.

The error, the delivery states and outcomes (received, accepted, rejected, released,
modified) and a link's source and target, which the performatives (``_performatives``)
carry in their fields. Each class holds every field of the AMQP 1.0 spec, in spec
order, with the spec's default; mandatory fields have no default. Fields accept plain
Python values; each field's metadata names the AMQP type it is written as, which
``_performative_codec`` applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from gateway.amqp._types import Described

__all__ = [
    "Accepted",
    "DeliveryState",
    "Error",
    "Modified",
    "Outcome",
    "Received",
    "Rejected",
    "Released",
    "Source",
    "Target",
]

# Field metadata: the AMQP type each field is written as (the performatives use them too).
_STRING = {"amqp": "string"}
_SYMBOL = {"amqp": "symbol"}
_SYMBOLS = {"amqp": "symbols"}
_BOOL = {"amqp": "boolean"}
_UBYTE = {"amqp": "ubyte"}
_USHORT = {"amqp": "ushort"}
_UINT = {"amqp": "uint"}
_ULONG = {"amqp": "ulong"}
_BINARY = {"amqp": "binary"}
_FIELDS = {"amqp": "fields"}
_MAP = {"amqp": "map"}
_COMPOSITE = {"amqp": "composite"}


@dataclass(kw_only=True)
class Error:
    """The error composite: a condition symbol, a description and an info map."""

    DESCRIPTOR: ClassVar[int] = 0x1D
    NAME: ClassVar[str] = "amqp:error:list"
    condition: str = field(metadata=_SYMBOL)
    description: str | None = field(default=None, metadata=_STRING)
    info: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)


@dataclass(kw_only=True)
class Received:
    """The received delivery state."""

    DESCRIPTOR: ClassVar[int] = 0x23
    NAME: ClassVar[str] = "amqp:received:list"
    section_number: int = field(metadata=_UINT)
    section_offset: int = field(metadata=_ULONG)


@dataclass(kw_only=True)
class Accepted:
    """The accepted outcome."""

    DESCRIPTOR: ClassVar[int] = 0x24
    NAME: ClassVar[str] = "amqp:accepted:list"


@dataclass(kw_only=True)
class Rejected:
    """The rejected outcome."""

    DESCRIPTOR: ClassVar[int] = 0x25
    NAME: ClassVar[str] = "amqp:rejected:list"
    error: Error | Described | None = field(default=None, metadata=_COMPOSITE)


@dataclass(kw_only=True)
class Released:
    """The released outcome."""

    DESCRIPTOR: ClassVar[int] = 0x26
    NAME: ClassVar[str] = "amqp:released:list"


@dataclass(kw_only=True)
class Modified:
    """The modified outcome."""

    DESCRIPTOR: ClassVar[int] = 0x27
    NAME: ClassVar[str] = "amqp:modified:list"
    delivery_failed: bool | None = field(default=None, metadata=_BOOL)
    undeliverable_here: bool | None = field(default=None, metadata=_BOOL)
    message_annotations: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)


Outcome: TypeAlias = Accepted | Rejected | Released | Modified
DeliveryState: TypeAlias = Received | Accepted | Rejected | Released | Modified


@dataclass(kw_only=True)
class Source:
    """The source terminus of a link."""

    DESCRIPTOR: ClassVar[int] = 0x28
    NAME: ClassVar[str] = "amqp:source:list"
    address: str | None = field(default=None, metadata=_STRING)
    durable: int = field(default=0, metadata=_UINT)
    expiry_policy: str = field(default="session-end", metadata=_SYMBOL)
    timeout: int = field(default=0, metadata=_UINT)
    dynamic: bool = field(default=False, metadata=_BOOL)
    dynamic_node_properties: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)
    distribution_mode: str | None = field(default=None, metadata=_SYMBOL)
    filter: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)
    default_outcome: Outcome | Described | None = field(default=None, metadata=_COMPOSITE)
    outcomes: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)


@dataclass(kw_only=True)
class Target:
    """The target terminus of a link."""

    DESCRIPTOR: ClassVar[int] = 0x29
    NAME: ClassVar[str] = "amqp:target:list"
    address: str | None = field(default=None, metadata=_STRING)
    durable: int = field(default=0, metadata=_UINT)
    expiry_policy: str = field(default="session-end", metadata=_SYMBOL)
    timeout: int = field(default=0, metadata=_UINT)
    dynamic: bool = field(default=False, metadata=_BOOL)
    dynamic_node_properties: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)
    capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
