"""Sessions: channels, transfer windows, link handles and delivery ids.

Windows follow the spec's arithmetic with the peer's numbers as the authority: the
peer may receive ``next_incoming_id + incoming_window - next_outgoing_id`` more
transfer frames from us (from its latest Flow). Our own incoming window is large
and refreshed with a session Flow when half of it is used; the emulator never
refuses a peer for overrunning it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from gateway.amqp import (
    Attach,
    Begin,
    DeliveryState,
    Detach,
    Disposition,
    Flow,
    Performative,
    Transfer,
    encode_transfer_frames,
)
from gateway.amqp.server._interfaces import NodeConnection, ProtocolError, ServerNamespace
from gateway.amqp.server._links import IncomingLink, Link, OutgoingLink

__all__ = ["LinkRouter", "Session", "SessionConnection", "SessionNamespace"]

_WINDOW = 1 << 16
_HANDLE_MAX = 1023


class LinkRouter(Protocol):
    """What a session needs of its namespace's router (``_router.Router``)."""

    def attach(self, link: Link) -> None: ...


class SessionNamespace(ServerNamespace, Protocol):
    """What a session needs of its namespace: the router that binds each new link."""

    @property
    def router(self) -> LinkRouter: ...


class SessionConnection(NodeConnection, Protocol):
    """What a session needs of its connection (``_connection.Connection``)."""

    @property
    def namespace(self) -> SessionNamespace: ...

    @property
    def peer_max_frame_size(self) -> int: ...

    def send(self, channel: int, body: Performative | None) -> None: ...

    def write(self, data: bytes) -> None: ...


class Session:
    """The server side of one session of a connection."""

    def __init__(self, connection: SessionConnection, channel: int, remote_channel: int,
                 begin: Begin) -> None:
        self.connection = connection
        self.channel = channel
        self.next_outgoing_id = 0  # transfer frames we sent
        self.next_delivery_id = 0
        self.next_incoming_id = begin.next_outgoing_id
        self.incoming_window = _WINDOW
        self.remote_incoming_window = begin.incoming_window
        self.window_open = asyncio.Event()
        self._update_window()
        self._links: dict[int, Link] = {}  # by the peer's handle
        self._handles: set[int] = set()
        #: Our unsettled deliveries: delivery id -> (link, what the link attached to it).
        self.unsettled: dict[int, tuple[OutgoingLink, object]] = {}
        self.connection.send(channel, Begin(
            remote_channel=remote_channel, next_outgoing_id=0, incoming_window=_WINDOW,
            outgoing_window=_WINDOW, handle_max=_HANDLE_MAX))

    def send(self, body: Performative) -> None:
        self.connection.send(self.channel, body)

    def links(self) -> list[Link]:
        return list(self._links.values())

    # -- incoming frames ----------------------------------------------------------

    def handle(self, body: Performative, payload: bytes) -> None:
        """Handle one frame of this session (not Begin or End)."""
        if isinstance(body, Transfer):
            self._on_transfer(body, payload)
            return
        if isinstance(body, Flow):
            self._on_flow(body)
            return
        if isinstance(body, Disposition):
            self._on_disposition(body)
            return
        if isinstance(body, Attach):
            if body.handle in self._links:
                raise ProtocolError("amqp:session:handle-in-use", f"handle {body.handle}")
            self._links[body.handle] = self._attach(body)
            return
        if isinstance(body, Detach):
            link = self._links.pop(body.handle, None)
            if link is not None:
                self._release(link)
                link.on_peer_detach(body.closed)

    def _attach(self, body: Attach) -> Link:
        handle = next((h for h in range(_HANDLE_MAX + 1) if h not in self._handles), None)
        if handle is None:
            raise ProtocolError("amqp:resource-limit-exceeded", "no free link handle")
        self._handles.add(handle)
        # role True: the peer receives, so we send on this link.
        link: Link = (OutgoingLink if body.role else IncomingLink)(self, handle, body)
        self.connection.namespace.router.attach(link)
        return link

    def _on_transfer(self, body: Transfer, payload: bytes) -> None:
        self.next_incoming_id += 1
        self.incoming_window -= 1
        link = self._links.get(body.handle)
        if not isinstance(link, IncomingLink):
            raise ProtocolError("amqp:session:unattached-handle",
                                f"transfer on unattached handle {body.handle}")
        link.on_transfer(body, payload)
        if self.incoming_window < _WINDOW // 2:
            self.incoming_window = _WINDOW
            self.send(self._flow())

    def _on_flow(self, body: Flow) -> None:
        first = body.next_incoming_id if body.next_incoming_id is not None else 0
        self.remote_incoming_window = first + body.incoming_window - self.next_outgoing_id
        self._update_window()
        if body.handle is None:
            if body.echo:
                self.send(self._flow())
            return
        link = self._links.get(body.handle)
        if link is not None:
            link.on_flow(body)

    def _on_disposition(self, body: Disposition) -> None:
        if not body.role:
            return  # the peer settles deliveries it sent us: nothing to do
        last = body.first if body.last is None else body.last
        groups: dict[OutgoingLink, list[tuple[int, object]]] = {}
        # Walk what we track, not the peer's range (which may be huge).
        ids = [body.first] if last == body.first else [
            d for d in self.unsettled if body.first <= d <= last]
        for delivery_id in ids:
            if delivery_id not in self.unsettled:
                continue
            link, token = self.unsettled[delivery_id]
            if body.settled:
                del self.unsettled[delivery_id]
            groups.setdefault(link, []).append((delivery_id, token))
        for link, deliveries in groups.items():
            link.on_disposition(deliveries, body.state, body.settled)

    # -- outgoing -----------------------------------------------------------------

    def _flow(self) -> Flow:
        return Flow(next_incoming_id=self.next_incoming_id, incoming_window=self.incoming_window,
                    next_outgoing_id=self.next_outgoing_id, outgoing_window=_WINDOW)

    def link_flow(self, handle: int, delivery_count: int, link_credit: int, *,
                  drain: bool = False, echo: bool = False) -> None:
        """Send a Flow for one link with the session's state."""
        flow = self._flow()
        flow.handle, flow.delivery_count, flow.link_credit = handle, delivery_count, link_credit
        flow.drain, flow.echo = drain, echo
        self.send(flow)

    def transfer(self, link: OutgoingLink, tag: bytes, payload: bytes, *, settled: bool,
                 message_format: int = 0, token: object = None) -> int:
        """Send one delivery on ``link`` (split to the peer's max frame size); its id."""
        delivery_id = self.next_delivery_id
        self.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        frames = encode_transfer_frames(
            self.channel,
            Transfer(handle=link.handle, delivery_id=delivery_id, delivery_tag=tag,
                     message_format=message_format, settled=settled),
            payload, self.connection.peer_max_frame_size)
        self.next_outgoing_id = (self.next_outgoing_id + len(frames)) & 0xFFFFFFFF
        self.remote_incoming_window -= len(frames)
        self._update_window()
        if not settled:
            self.unsettled[delivery_id] = (link, token)
        self.connection.write(frames[0] if len(frames) == 1 else b"".join(frames))
        return delivery_id

    def settle(self, delivery_id: int, state: DeliveryState | None, *, role: bool) -> None:
        """Send a settled disposition for one delivery (``role`` True: we received it)."""
        self.send(Disposition(role=role, first=delivery_id, last=delivery_id, settled=True,
                              state=state))

    def detached(self, link: Link) -> None:
        """Forget ``link`` once both sides have detached it."""
        self._handles.discard(link.handle)

    def _release(self, link: Link) -> None:
        if isinstance(link, OutgoingLink):
            for delivery_id in [d for d, (lk, _) in self.unsettled.items() if lk is link]:
                del self.unsettled[delivery_id]

    def _update_window(self) -> None:
        if self.remote_incoming_window > 0:
            self.window_open.set()
        else:
            self.window_open.clear()

    def ended(self) -> None:
        """The session or its connection ended: stop every link."""
        for link in self._links.values():
            link.on_peer_detach(True, ended=True)
        self._links.clear()
        self.unsettled.clear()
        self.window_open.set()  # wake waiting pumps so that they notice
