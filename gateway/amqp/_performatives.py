"""AMQP 1.0 performatives of the geogateway emulator: the bodies of AMQP and SASL frames.

Each class holds every field of the AMQP 1.0 spec, in spec order, with the spec's
default; mandatory fields have no default. Fields accept plain Python values; each
field's metadata names the AMQP type it is written as (``_performative_codec``
encodes and decodes them). The composites they carry (error, delivery states, source
and target) are in ``_composites``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from gateway.amqp._composites import (
    _BINARY,
    _BOOL,
    _COMPOSITE,
    _FIELDS,
    _MAP,
    _STRING,
    _SYMBOL,
    _SYMBOLS,
    _UBYTE,
    _UINT,
    _ULONG,
    _USHORT,
    DeliveryState,
    Error,
    Source,
    Target,
)
from gateway.amqp._types import Described

__all__ = [
    "AMQP_PERFORMATIVES",
    "SASL_PERFORMATIVES",
    "Attach",
    "Begin",
    "Close",
    "Detach",
    "Disposition",
    "End",
    "Flow",
    "Open",
    "Performative",
    "SaslChallenge",
    "SaslInit",
    "SaslMechanisms",
    "SaslOutcome",
    "SaslResponse",
    "Transfer",
]


@dataclass(kw_only=True)
class Open:
    """The open performative: negotiate connection parameters."""

    DESCRIPTOR: ClassVar[int] = 0x10
    NAME: ClassVar[str] = "amqp:open:list"
    container_id: str = field(metadata=_STRING)
    hostname: str | None = field(default=None, metadata=_STRING)
    max_frame_size: int = field(default=0xFFFFFFFF, metadata=_UINT)
    channel_max: int = field(default=0xFFFF, metadata=_USHORT)
    idle_time_out: int | None = field(default=None, metadata=_UINT)  # milliseconds
    outgoing_locales: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    incoming_locales: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    offered_capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    desired_capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    properties: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)


@dataclass(kw_only=True)
class Begin:
    """The begin performative: begin a session on a channel."""

    DESCRIPTOR: ClassVar[int] = 0x11
    NAME: ClassVar[str] = "amqp:begin:list"
    remote_channel: int | None = field(default=None, metadata=_USHORT)
    next_outgoing_id: int = field(metadata=_UINT)
    incoming_window: int = field(metadata=_UINT)
    outgoing_window: int = field(metadata=_UINT)
    handle_max: int = field(default=0xFFFFFFFF, metadata=_UINT)
    offered_capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    desired_capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    properties: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)


@dataclass(kw_only=True)
class Attach:
    """The attach performative: attach a link to a session. ``role`` False = sender."""

    DESCRIPTOR: ClassVar[int] = 0x12
    NAME: ClassVar[str] = "amqp:attach:list"
    name: str = field(metadata=_STRING)
    handle: int = field(metadata=_UINT)
    role: bool = field(metadata=_BOOL)
    snd_settle_mode: int = field(default=2, metadata=_UBYTE)  # mixed
    rcv_settle_mode: int = field(default=0, metadata=_UBYTE)  # first
    source: Source | Described | None = field(default=None, metadata=_COMPOSITE)
    target: Target | Described | None = field(default=None, metadata=_COMPOSITE)
    unsettled: Mapping[Any, Any] | None = field(default=None, metadata=_MAP)
    incomplete_unsettled: bool = field(default=False, metadata=_BOOL)
    initial_delivery_count: int | None = field(default=None, metadata=_UINT)
    max_message_size: int | None = field(default=None, metadata=_ULONG)
    offered_capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    desired_capabilities: Sequence[str] | None = field(default=None, metadata=_SYMBOLS)
    properties: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)


@dataclass(kw_only=True)
class Flow:
    """The flow performative: update session and link flow state."""

    DESCRIPTOR: ClassVar[int] = 0x13
    NAME: ClassVar[str] = "amqp:flow:list"
    next_incoming_id: int | None = field(default=None, metadata=_UINT)
    incoming_window: int = field(metadata=_UINT)
    next_outgoing_id: int = field(metadata=_UINT)
    outgoing_window: int = field(metadata=_UINT)
    handle: int | None = field(default=None, metadata=_UINT)
    delivery_count: int | None = field(default=None, metadata=_UINT)
    link_credit: int | None = field(default=None, metadata=_UINT)
    available: int | None = field(default=None, metadata=_UINT)
    drain: bool = field(default=False, metadata=_BOOL)
    echo: bool = field(default=False, metadata=_BOOL)
    properties: Mapping[str, Any] | None = field(default=None, metadata=_FIELDS)


@dataclass(kw_only=True)
class Transfer:
    """The transfer performative: (part of) a message; the payload follows it in the frame."""

    DESCRIPTOR: ClassVar[int] = 0x14
    NAME: ClassVar[str] = "amqp:transfer:list"
    handle: int = field(metadata=_UINT)
    delivery_id: int | None = field(default=None, metadata=_UINT)
    delivery_tag: bytes | None = field(default=None, metadata=_BINARY)
    message_format: int | None = field(default=None, metadata=_UINT)
    settled: bool | None = field(default=None, metadata=_BOOL)
    more: bool = field(default=False, metadata=_BOOL)
    rcv_settle_mode: int | None = field(default=None, metadata=_UBYTE)
    state: DeliveryState | Described | None = field(default=None, metadata=_COMPOSITE)
    resume: bool = field(default=False, metadata=_BOOL)
    aborted: bool = field(default=False, metadata=_BOOL)
    batchable: bool = field(default=False, metadata=_BOOL)


@dataclass(kw_only=True)
class Disposition:
    """The disposition performative: settle or update deliveries ``first``..``last``."""

    DESCRIPTOR: ClassVar[int] = 0x15
    NAME: ClassVar[str] = "amqp:disposition:list"
    role: bool = field(metadata=_BOOL)
    first: int = field(metadata=_UINT)
    last: int | None = field(default=None, metadata=_UINT)
    settled: bool = field(default=False, metadata=_BOOL)
    state: DeliveryState | Described | None = field(default=None, metadata=_COMPOSITE)
    batchable: bool = field(default=False, metadata=_BOOL)


@dataclass(kw_only=True)
class Detach:
    """The detach performative: detach a link, closing it if ``closed``."""

    DESCRIPTOR: ClassVar[int] = 0x16
    NAME: ClassVar[str] = "amqp:detach:list"
    handle: int = field(metadata=_UINT)
    closed: bool = field(default=False, metadata=_BOOL)
    error: Error | Described | None = field(default=None, metadata=_COMPOSITE)


@dataclass(kw_only=True)
class End:
    """The end performative: end a session."""

    DESCRIPTOR: ClassVar[int] = 0x17
    NAME: ClassVar[str] = "amqp:end:list"
    error: Error | Described | None = field(default=None, metadata=_COMPOSITE)


@dataclass(kw_only=True)
class Close:
    """The close performative: close the connection."""

    DESCRIPTOR: ClassVar[int] = 0x18
    NAME: ClassVar[str] = "amqp:close:list"
    error: Error | Described | None = field(default=None, metadata=_COMPOSITE)


@dataclass(kw_only=True)
class SaslMechanisms:
    """The sasl-mechanisms frame: the mechanisms the server supports."""

    DESCRIPTOR: ClassVar[int] = 0x40
    NAME: ClassVar[str] = "amqp:sasl-mechanisms:list"
    sasl_server_mechanisms: Sequence[str] = field(metadata=_SYMBOLS)


@dataclass(kw_only=True)
class SaslInit:
    """The sasl-init frame: the client's chosen mechanism and initial response."""

    DESCRIPTOR: ClassVar[int] = 0x41
    NAME: ClassVar[str] = "amqp:sasl-init:list"
    mechanism: str = field(metadata=_SYMBOL)
    initial_response: bytes | None = field(default=None, metadata=_BINARY)
    hostname: str | None = field(default=None, metadata=_STRING)


@dataclass(kw_only=True)
class SaslChallenge:
    """The sasl-challenge frame."""

    DESCRIPTOR: ClassVar[int] = 0x42
    NAME: ClassVar[str] = "amqp:sasl-challenge:list"
    challenge: bytes = field(metadata=_BINARY)


@dataclass(kw_only=True)
class SaslResponse:
    """The sasl-response frame."""

    DESCRIPTOR: ClassVar[int] = 0x43
    NAME: ClassVar[str] = "amqp:sasl-response:list"
    response: bytes = field(metadata=_BINARY)


@dataclass(kw_only=True)
class SaslOutcome:
    """The sasl-outcome frame: ``code`` 0 is ok, 1 auth, 2 sys, 3 sys-perm, 4 sys-temp."""

    DESCRIPTOR: ClassVar[int] = 0x44
    NAME: ClassVar[str] = "amqp:sasl-outcome:list"
    code: int = field(metadata=_UBYTE)
    additional_data: bytes | None = field(default=None, metadata=_BINARY)


Performative: TypeAlias = (
    Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
    | SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome
)  # fmt: skip

#: The performatives carried in AMQP frames and in SASL frames.
AMQP_PERFORMATIVES: tuple[type[Performative], ...] = (
    Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close,
)  # fmt: skip
SASL_PERFORMATIVES: tuple[type[Performative], ...] = (
    SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome,
)  # fmt: skip
