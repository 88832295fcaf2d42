"""What the server's connections, sessions, links and request nodes need of the
namespace above them.

The front is layered: the wire at the bottom (:mod:`gateway.amqp`), then links,
sessions and connections, then the nodes a link attaches to, then the router that
binds each new link to its node. The nodes and the router are a back end's own (the
emulator's keep messages in a local store, the proxy's hand them to the geo sender and
receivers); the layers here see them only through the protocols of this module (and
``LinkSession`` in ``_links``, ``SessionConnection`` in ``_session``), so that imports
point one way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from gateway.amqp.server._auth import Grant, Policy, Right

__all__ = ["NodeConnection", "ProtocolError", "ServerNamespace"]


class ProtocolError(Exception):
    """A peer broke the protocol; the connection closes with ``condition``."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition


class ServerNamespace(Protocol):
    """What connections and request nodes need of the namespace they serve."""

    # Read-only here: the front never replaces them (the namespace does).
    @property
    def name(self) -> str: ...

    @property
    def policies(self) -> tuple[Policy, ...]:
        """The shared access policies tokens are checked against, the default one first."""

    @property
    def product(self) -> str:
        """The server's name in each connection's Open (``geogateway-emulator``, ...)."""

    @property
    def log(self) -> logging.Logger:
        """Where the front logs what happens on this namespace's connections."""

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...

    async def delay(self) -> None: ...

    def refresh(self) -> object: ...

    async def exists(self, entity: str) -> bool:
        """Whether the entity at lower-case path ``entity`` exists (``$cbs`` answers 404
        for a token of one that does not, once the token is valid)."""


class NodeConnection(Protocol):
    """What the nodes need of the connection a link belongs to (``_connection.Connection``)."""

    #: The tokens put on ``$cbs``, which ``put_token`` renews.
    grants: list[Grant]

    # A property, so that ``_session.SessionConnection`` can narrow it (a namespace
    # with a router).
    @property
    def namespace(self) -> ServerNamespace: ...

    @property
    def stalled(self) -> bool: ...

    def authorized(self, address: str, right: Right | None = None) -> bool: ...

    async def drain(self) -> None: ...

    async def wait_closed(self) -> None: ...
