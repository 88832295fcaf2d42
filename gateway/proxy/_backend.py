"""What is behind the proxy's nodes: the geo sender and receivers of one configuration.

One :class:`~gateway.geo.AsyncGeoSender` per entity clients send to (made on the first
link to it, kept until the proxy closes: its roles, hedging and durable queue are the
entity's), and one :class:`~gateway.geo.AsyncGeoReceiver` per receiver link, or one
:class:`~gateway.geo.AsyncGeoSessionReceiver` per session receiver link (their
de-duplication store is the configuration's, shared by every receiver, so a copy one
link took is not delivered on another). The namespaces' credentials stay here: no
node ever sees more than the messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from gateway.geo import (
        AsyncGeoReceiver,
        AsyncGeoSender,
        AsyncGeoSessionReceiver,
        GatewayConfig,
        GatewayHooks,
    )

    Receiver = AsyncGeoReceiver | AsyncGeoSessionReceiver

__all__ = ["GeoBackend"]

T = TypeVar("T")


class GeoBackend:
    """The geo sender and receivers a proxy hands its clients' messages to.

    Args:
        config: the geo configuration (namespaces, policy, durable queue, dedup store);
            its ``entity`` is not used: each link names its own.
        recovery: run each sender's background probe/replay/failback task.
        hooks: given to every sender and receiver (metrics, tracing, a drill's counters).
        session_gap_timeout: seconds a session receiver waits for a missing position of
            its session before it goes on without it (longer than the outages to ride
            out: a session's first part may be in a namespace that is down).
    """

    def __init__(self, config: GatewayConfig, *, recovery: bool = True,
                 hooks: Sequence[GatewayHooks] = (),
                 session_gap_timeout: float = 30.0) -> None:
        self.config = config
        self._gap_timeout = session_gap_timeout
        self._recovery = recovery
        self._hooks = list(hooks)
        self._senders: dict[str, AsyncGeoSender] = {}
        self._receivers: set[Receiver] = set()
        self._inflight: set[asyncio.Future[Any]] = set()
        self._closed = False

    async def sender(self, entity: str) -> AsyncGeoSender:
        """The geo sender of ``entity`` (one per entity, started on first use)."""
        key = entity.lower()
        sender = self._senders.get(key)
        if sender is None:
            from gateway.geo import AsyncGeoSender

            c = self.config
            sender = AsyncGeoSender(
                primary=c.primary, secondary=c.secondary, entity=entity, policy=c.policy,
                data_dir=c.data_dir, state_dir=c.state_dir, roles_store=c.roles_store,
                durable_queue=c.durable_queue.path if c.durable_queue else None,
                recovery=self._recovery, hooks=self._hooks)
            self._senders[key] = sender
            await sender.start()
        return sender

    def backlog(self, entity: str) -> frozenset[str]:
        """The durable queue destinations of ``entity`` that still hold messages (none
        before the entity's first send)."""
        sender = self._senders.get(entity.lower())
        return frozenset() if sender is None else sender.backlog

    def receiver(self, entity: str) -> AsyncGeoReceiver:
        """A new geo receiver of ``entity`` (close it with :meth:`release`)."""
        from gateway.geo import AsyncGeoReceiver

        c = self.config
        receiver = AsyncGeoReceiver(
            primary=c.primary, secondary=c.secondary, entity=entity,
            dedup_store=self._dedup_store(), data_dir=c.data_dir, hooks=self._hooks)
        self._receivers.add(receiver)
        return receiver

    def session_receiver(self, entity: str, session_id: str | None) -> AsyncGeoSessionReceiver:
        """A new geo session receiver of ``entity`` for ``session_id`` (``None``: the next
        available session); close it with :meth:`release`."""
        from gateway.geo import AsyncGeoSessionReceiver

        c = self.config
        receiver = AsyncGeoSessionReceiver(
            primary=c.primary, secondary=c.secondary, entity=entity, session_id=session_id,
            dedup_store=self._dedup_store(), data_dir=c.data_dir, state_dir=c.state_dir,
            gap_timeout=self._gap_timeout, hooks=self._hooks)
        self._receivers.add(receiver)
        return receiver

    async def release(self, receiver: Receiver) -> None:
        """Close a receiver :meth:`receiver` or :meth:`session_receiver` made."""
        self._receivers.discard(receiver)
        await receiver.aclose()

    def _dedup_store(self) -> Any:
        if self.config.dedup is not None:
            return self.config.dedup.open_store()
        from gateway.transports import default_data_dir

        path = Path(self.config.data_dir or default_data_dir()) / "dedup.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    async def track(self, work: Awaitable[T]) -> T:
        """Run ``work`` (a send, a settlement) as work :meth:`drain` waits for."""
        future = asyncio.ensure_future(work)
        self._inflight.add(future)
        try:
            return await future
        finally:
            self._inflight.discard(future)

    async def drain(self) -> None:
        """Wait until the sends and settlements under way are done."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def aclose(self) -> None:
        """Close every sender and receiver. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        closing = [s.aclose() for s in self._senders.values()]
        closing += [r.aclose() for r in self._receivers]
        self._senders.clear()
        self._receivers.clear()
        with contextlib.suppress(Exception):
            await asyncio.gather(*closing, return_exceptions=True)
