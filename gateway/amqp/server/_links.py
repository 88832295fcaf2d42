"""Links: attach and detach, credit, delivery assembly, and what a link is attached to.

A :class:`Link` is created the moment the peer's Attach arrives; the router then
binds it to a :class:`Terminus` (a queue, an event hub partition, ``$cbs``, ...) and
answers the Attach, or refuses it. Frames that arrive before that are kept: an
incoming link buffers complete deliveries, an outgoing link records credit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.amqp import (
    Attach,
    DeliveryState,
    Detach,
    Error,
    Flow,
    Performative,
    Source,
    Symbol,
    Target,
    Transfer,
)
from gateway.amqp.server._interfaces import NodeConnection
from gateway.amqp.server._wait import wait_first

__all__ = ["Delivery", "IncomingLink", "Link", "LinkSession", "OutgoingLink", "Terminus"]

#: Credit an incoming link grants, topped up when half of it is used.
_CREDIT = 1000
# Refuse a delivery assembled from more than this many bytes (64 MiB): far above any
# entity's limit, it only bounds memory against a hostile peer.
_MAX_DELIVERY = 64 << 20


class LinkSession(Protocol):
    """What a link needs of its session (``_session.Session``).

    Its terminus reaches the connection through it too (tokens, back-pressure).
    """

    @property
    def connection(self) -> NodeConnection: ...

    @property
    def remote_incoming_window(self) -> int: ...

    @property
    def window_open(self) -> asyncio.Event: ...

    @property
    def unsettled(self) -> dict[int, tuple[OutgoingLink, object]]: ...

    def send(self, body: Performative) -> None: ...

    def links(self) -> list[Link]: ...

    def link_flow(self, handle: int, delivery_count: int, link_credit: int, *,
                  drain: bool = False, echo: bool = False) -> None: ...

    def transfer(self, link: OutgoingLink, tag: bytes, payload: bytes, *, settled: bool,
                 message_format: int = 0, token: object = None) -> int: ...

    def settle(self, delivery_id: int, state: DeliveryState | None, *, role: bool) -> None: ...

    def detached(self, link: Link) -> None: ...


@dataclass(kw_only=True)
class Delivery:
    """One message received on an incoming link."""

    delivery_id: int
    tag: bytes
    message_format: int
    settled: bool
    payload: bytes


class Terminus:
    """What a link is attached to; subclasses override the events they handle."""

    #: Seconds to wait before an incoming link's first credit (see Requests).
    credit_delay = 0.0

    def on_delivery(self, link: IncomingLink, delivery: Delivery) -> None:
        """A complete delivery arrived (incoming links)."""

    def on_credit(self, link: OutgoingLink) -> None:
        """The peer changed the link's credit (outgoing links)."""

    def on_disposition(self, link: OutgoingLink, deliveries: list[tuple[int, object]],
                       state: object, settled: bool) -> None:
        """The peer settled or updated deliveries we sent (outgoing links)."""

    def on_detach(self, link: Link) -> None:
        """The link is gone (either side detached it, or the connection closed)."""


class Link:
    """The server side of one link. ``attach`` is the peer's Attach."""

    def __init__(self, session: LinkSession, handle: int, attach: Attach) -> None:
        self.session = session
        self.handle = handle
        self.attach = attach
        self.terminus: Terminus | None = None
        self.state = "attaching"  # attaching, attached, detached
        self.properties: dict[str, Any] = {
            str(k): v for k, v in (attach.properties or {}).items()}

    @property
    def name(self) -> str:
        return self.attach.name

    @property
    def source(self) -> Source | None:
        s = self.attach.source
        return s if isinstance(s, Source) else None

    @property
    def target(self) -> Target | None:
        t = self.attach.target
        return t if isinstance(t, Target) else None

    @property
    def address(self) -> str:
        """The address of the node the peer attaches to (source when it receives)."""
        node = self.source if self.attach.role else self.target
        return (node.address if node is not None else None) or ""

    @property
    def attached(self) -> bool:
        return self.state == "attached"

    def accept(self, terminus: Terminus, *, max_message_size: int | None = None,
               properties: dict[str, Any] | None = None) -> None:
        """Answer the Attach and bind the link to ``terminus``."""
        if self.state != "attaching":
            return
        self.terminus = terminus
        self.session.send(self._answer(self.attach.source, self.attach.target,
                                       max_message_size, properties))
        self.state = "attached"
        self._bound()

    def refuse(self, condition: str, description: str) -> None:
        """Answer the Attach with no terminus, then detach it with an error."""
        if self.state != "attaching":
            return
        # The spec's refusal: the attach answer lacks our terminus, a detach follows.
        source = None if self.attach.role else self.attach.source
        target = self.attach.target if self.attach.role else None
        self.session.send(self._answer(source, target, None, None))
        self.state = "attached"
        self.detach(condition, description)

    def detach(self, condition: str | None = None, description: str | None = None) -> None:
        """Detach (and close) the link from our side, with an error when ``condition`` is set."""
        if self.state == "detached":
            return
        error = None if condition is None else Error(condition=Symbol(condition),
                                                     description=description)
        self.session.send(Detach(handle=self.handle, closed=True, error=error))
        self._gone()

    def on_peer_detach(self, closed: bool, *, ended: bool = False) -> None:
        """The peer detached the link (or its session ended); answer unless we began."""
        if self.state != "detached" and not ended:
            self.session.send(Detach(handle=self.handle, closed=closed))
        self._gone()
        self.session.detached(self)

    def on_flow(self, flow: Flow) -> None:
        """The peer's link flow state."""

    def _gone(self) -> None:
        if self.state == "detached":
            return
        self.state = "detached"
        if self.terminus is not None:
            self.terminus.on_detach(self)

    def _bound(self) -> None:
        """Hand over what arrived while the link was attaching."""

    def _answer(self, source: object, target: object, max_message_size: int | None,
                properties: dict[str, Any] | None) -> Attach:
        a = self.attach
        return Attach(
            name=a.name, handle=self.handle, role=not a.role,
            snd_settle_mode=a.snd_settle_mode, rcv_settle_mode=a.rcv_settle_mode,
            source=source, target=target,  # type: ignore[arg-type]
            initial_delivery_count=0 if a.role else None,
            max_message_size=max_message_size, properties=properties)


class IncomingLink(Link):
    """A link on which the peer sends us messages."""

    def __init__(self, session: LinkSession, handle: int, attach: Attach) -> None:
        super().__init__(session, handle, attach)
        self.delivery_count = attach.initial_delivery_count or 0
        self.credit = 0
        self._granted = False
        self._partial: Transfer | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._early: list[Delivery] = []

    def _bound(self) -> None:
        assert self.terminus is not None
        delay = self.terminus.credit_delay
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self.grant)
        else:
            self._grant()
        early, self._early = self._early, []
        for delivery in early:
            self._deliver(delivery)

    def grant(self) -> None:
        """Give the link its first credit now, if it has none yet."""
        if not self._granted and self.attached:
            self._grant()

    def _grant(self) -> None:
        self._granted = True
        self.credit = _CREDIT
        self.session.link_flow(self.handle, self.delivery_count, self.credit)

    def on_transfer(self, transfer: Transfer, payload: bytes) -> None:
        """One transfer frame: assemble the delivery, hand it on when it is complete."""
        first = self._partial
        if first is None:
            first = self._partial = transfer
        if transfer.aborted:
            self._reset()
            return
        self._chunks.append(payload)
        self._size += len(payload)
        if self._size > _MAX_DELIVERY:
            self._reset()
            self.detach("amqp:link:message-size-exceeded", "the delivery is too large")
            return
        if transfer.more:
            return
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._reset()
        self.delivery_count += 1
        self.credit -= 1
        delivery = Delivery(
            delivery_id=first.delivery_id or 0, tag=first.delivery_tag or b"",
            message_format=first.message_format or 0, settled=bool(first.settled),
            payload=data)
        if self.state == "attaching":
            self._early.append(delivery)
            return
        self._deliver(delivery)
        if self._granted and self.attached and self.credit < _CREDIT // 2:
            self._grant()

    def _deliver(self, delivery: Delivery) -> None:
        if self.terminus is not None and self.attached:
            self.terminus.on_delivery(self, delivery)

    def _reset(self) -> None:
        self._partial = None
        self._chunks = []
        self._size = 0

    def settle(self, delivery: Delivery, state: DeliveryState) -> None:
        """Tell the peer the outcome of ``delivery`` (nothing when it came settled)."""
        if not delivery.settled and self.state != "detached":
            self.session.settle(delivery.delivery_id, state, role=True)


class OutgoingLink(Link):
    """A link on which we send messages to the peer, within its credit."""

    def __init__(self, session: LinkSession, handle: int, attach: Attach) -> None:
        super().__init__(session, handle, attach)
        self.delivery_count = 0
        self.credit = 0
        self.drain = False

    @property
    def settled_mode(self) -> bool:
        """Whether the peer asked for pre-settled deliveries (snd-settle-mode settled)."""
        return self.attach.snd_settle_mode == 1

    def on_flow(self, flow: Flow) -> None:
        if flow.link_credit is not None:
            peer_count = self.delivery_count if flow.delivery_count is None else flow.delivery_count
            self.credit = max(0, peer_count + flow.link_credit - self.delivery_count)
        self.drain = flow.drain
        if flow.echo:
            self.session.link_flow(self.handle, self.delivery_count, self.credit)
        if self.terminus is not None and self.attached:
            self.terminus.on_credit(self)

    def on_disposition(self, deliveries: list[tuple[int, object]], state: object,
                       settled: bool) -> None:
        """The peer updated deliveries we sent: (delivery id, token) pairs."""
        if self.terminus is not None:
            self.terminus.on_disposition(self, deliveries, state, settled)

    def can_send(self) -> bool:
        return self.attached and self.credit > 0 and self.session.remote_incoming_window > 0

    def send(self, tag: bytes, payload: bytes, *, settled: bool, message_format: int = 0,
             token: object = None) -> int:
        """Send one delivery (the caller checked :meth:`can_send`); its delivery id."""
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        return self.session.transfer(self, tag, payload, settled=settled,
                                     message_format=message_format, token=token)

    async def wait_to_send(self, wake: asyncio.Event, *also: Any,
                           timeout: float | None = None) -> None:
        """Wait, once the link cannot send, until ``wake`` is set (the terminus sets it
        on new credit or a detach; cleared here first), the session's window opens
        when it is what is closed, one of ``also`` (coroutines) ends, or ``timeout``."""
        wake.clear()
        waits = [wake.wait(), *also]
        if self.credit > 0:  # the credit is there: the session window is closed
            waits.append(self.session.window_open.wait())
        await wait_first(waits, timeout)

    def drained(self) -> None:
        """Nothing more to send: when the peer asked to drain, use up its credit and say so."""
        if self.drain and self.credit > 0 and self.attached:
            self.delivery_count = (self.delivery_count + self.credit) & 0xFFFFFFFF
            self.credit = 0
            self.session.link_flow(self.handle, self.delivery_count, 0, drain=True)

    def settled(self, delivery_id: int, state: DeliveryState | None) -> None:
        """Settle a delivery the peer updated but left unsettled (it waits for this)."""
        self.session.unsettled.pop(delivery_id, None)
        if self.state != "detached":
            self.session.settle(delivery_id, state, role=False)
