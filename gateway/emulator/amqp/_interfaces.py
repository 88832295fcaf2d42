"""What the emulator's router and nodes need of the namespace above them.

The connections, sessions and links below them are the shared AMQP front
(:mod:`gateway.amqp.server`); this adds what an emulated namespace keeps: its local
store, its control state and the event hubs' readers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from gateway.amqp.server import ServerNamespace
from gateway.transports import ControlState, Queued, Store
from replication import GatewayError, Message

__all__ = ["NodeNamespace"]

T = TypeVar("T")


class NodeNamespace(ServerNamespace, Protocol):
    """What the router and the nodes need of their namespace (``_namespace.Namespace``)."""

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

    def refresh(self) -> ControlState: ...

    def lose_reply(self) -> bool: ...

    def changed(self, entity: str) -> asyncio.Event: ...

    def wrote(self, entities: Iterable[str]) -> None: ...

    def append(self, entity: str, partition_id: str | None,
               messages: Sequence[Message | Queued],
               done: Callable[[GatewayError | None], None]) -> None: ...
