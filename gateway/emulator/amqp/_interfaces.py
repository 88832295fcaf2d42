"""What the emulator's links and nodes need of the namespace and connection above them.

The server is layered: the wire at the bottom, then links, sessions and connections,
then the nodes a link attaches to (queues, event hubs, ``$cbs``, ``$management``),
then the router, the namespace and the server. A lower layer sees the objects of a
higher one only through the protocols here (and through ``LinkSession`` in
``_links`` and ``SessionConnection`` in ``_session``), so that imports point one way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.emulator._auth import Grant, Policy, Right
from gateway.transports import ControlState, Queued, Store
from replication import GatewayError, Message

__all__ = ["NodeConnection", "NodeNamespace", "ProtocolError"]

T = TypeVar("T")


class ProtocolError(Exception):
    """A peer broke the protocol; the connection closes with ``condition``."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition


class NodeNamespace(Protocol):
    """What the router and the nodes need of their namespace (``_namespace.Namespace``)."""

    # Read-only here: the nodes never replace them (the namespace does).
    @property
    def name(self) -> str: ...

    @property
    def policies(self) -> tuple[Policy, ...]: ...

    @property
    def max_message_size(self) -> int: ...

    @property
    def created(self) -> float: ...

    @property
    def store(self) -> Store: ...

    @property
    def state(self) -> ControlState: ...

    @property
    def owners(self) -> dict[tuple[str, str, str], list[Any]]: ...

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...

    async def delay(self) -> None: ...

    def lose_reply(self) -> bool: ...

    def refresh(self) -> ControlState: ...

    def changed(self, entity: str) -> asyncio.Event: ...

    def wrote(self, entities: Iterable[str]) -> None: ...

    def append(self, entity: str, partition_id: str | None,
               messages: Sequence[Message | Queued],
               done: Callable[[GatewayError | None], None]) -> None: ...


class NodeConnection(Protocol):
    """What the nodes need of the connection a link belongs to (``_connection.Connection``)."""

    #: The tokens put on ``$cbs``, which ``put_token`` renews.
    grants: list[Grant]

    # A property, so that ``_session.SessionConnection`` can narrow it (a namespace
    # with a router).
    @property
    def namespace(self) -> NodeNamespace: ...

    @property
    def stalled(self) -> bool: ...

    def authorized(self, address: str, right: Right | None = None) -> bool: ...

    async def drain(self) -> None: ...

    async def wait_closed(self) -> None: ...
