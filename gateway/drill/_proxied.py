"""The queue, topic and sessions drills with their clients on the far side of a proxy
(``--transport proxy``).

The drill's scenario runs as on the local transport (the same script of outages on
the embedded namespaces), but the application is an unmodified azure-servicebus
client (through the project's Service Bus transport) that sends to and receives from
a :class:`~gateway.proxy.Proxy` started in this process; the geo sender and
receivers run inside the proxy, over the local namespaces. The report counts what
the client saw: a message the proxy accepted and the client never received is lost;
one it received twice is a duplicate delivered. Where each send landed, the
failovers and the buffering come from the proxy's hooks. The client completes each
message after handling it, ten at a time; a completion that fails is logged and the
drill goes on, as a peek-lock application does (if the lock was lost, the message
comes again, and counts as delivered twice).

In the sessions drill the client's receivers are session receivers of the proxy
(next available session, given up after a second without messages): the proxy holds
each session with a geo session receiver, which keeps the session's order across the
namespaces; the report's out-of-order count is what the client saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from gateway.drill._queues import ENTITY, Handler, QueueDrill
from gateway.drill._sessions import SessionsDrill
from gateway.drill._timeline import DuplicateRecorder
from gateway.drill._topics import SUBSCRIPTIONS, TOPIC, TopicDrill
from gateway.geo import GatewayConfig, GatewayHooks, NamespaceLike, SendResult
from gateway.proxy import Proxy
from gateway.transports import Transport
from replication import GatewayError, Message

__all__ = ["ProxiedQueueDrill", "ProxiedSessionsDrill", "ProxiedTopicDrill"]

_LOG = logging.getLogger("geogateway.drill")

#: How long one receive through the proxy waits for messages, and how many it takes:
#: each is completed before the next receive, within its 5 s lock on a loaded machine.
_RECEIVE_WAIT, _RECEIVE_BATCH = 0.25, 10
#: How long a client session receiver waits for a session, and how many empty
#: receives in a row make it give its session up.
_SESSION_WAIT, _SESSION_IDLE = 0.5, 2


class _Sends(GatewayHooks):
    """The proxy's hooks that keep where the last send went and count duplicates."""

    def __init__(self) -> None:
        self.namespaces: tuple[str, ...] = ()
        self.buffered: tuple[str, ...] = ()
        self.duplicates = 0

    def on_sent(self, *, namespaces: tuple[str, ...], buffered: tuple[str, ...],
                **_: Any) -> None:
        self.namespaces, self.buffered = namespaces, buffered

    def on_duplicate(self, *, message_id: str, namespace: str) -> None:
        self.duplicates += 1


class _ClientSender:
    """The drill's sender: a client of the proxy (sends are sequential, so the proxy's
    last ``on_sent`` is this send's)."""

    def __init__(self, client: Transport, proxy: Proxy, sends: _Sends, entity: str) -> None:
        self.client, self.proxy, self.sends, self.entity = client, proxy, sends, entity

    @property
    def backlog(self) -> frozenset[str]:
        return self.proxy.backend.backlog(self.entity)

    async def send_batch(self, messages: Sequence[Message]) -> SendResult:
        self.sends.namespaces = self.sends.buffered = ()
        await self.client.send(self.entity, list(messages))
        return SendResult(message_ids=tuple(m.message_id for m in messages),
                          namespaces=self.sends.namespaces, buffered=self.sends.buffered)


class ProxiedQueueDrill(QueueDrill):
    """One queue drill whose application talks to the namespaces through a proxy."""

    def _config(self, primary: NamespaceLike, secondary: NamespaceLike) -> GatewayConfig:
        return GatewayConfig.load(env={}, overrides={
            "primary": primary, "secondary": secondary, "entity": self.entity,
            "mode": self.mode.value, "data_dir": str(self.root / "namespaces"),
            "state_dir": str(self.root / "state"),
            "durable_queue": {"path": str(self.root / "buffer.db")},
            "dedup": {"path": str(self.root / "dedup.db")},
        })

    async def _run(self, primary: NamespaceLike, secondary: NamespaceLike,
                   settle_timeout: float) -> tuple[int, float | None]:
        from gateway.transports.servicebus import ServiceBusTransport

        sends = _Sends()
        hooks = [self.counters, sends, DuplicateRecorder(self.timeline), *self._more_hooks(),
                 *self.hooks]
        stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            proxy = await stack.enter_async_context(
                Proxy(self._config(primary, secondary), hooks=hooks,
                      session_gap_timeout=settle_timeout))
            client = await stack.enter_async_context(ServiceBusTransport.from_connection_string(
                proxy.connection_string(), name="proxy"))
            receiving = asyncio.gather(*self._receivers_of(client, stop))
            sender = _ClientSender(client, proxy, sends, self.entity)
            try:
                replay_seconds = await self._send_and_settle(sender, settle_timeout)
            finally:
                stop.set()
                await receiving
        return sends.duplicates, replay_seconds

    def _more_hooks(self) -> list[GatewayHooks]:
        """The drill's own hooks the proxy's geo senders and receivers call."""
        return []

    def _receivers_of(self, client: Transport, stop: asyncio.Event) -> list[Any]:
        """The client's receive loops (coroutines), until ``stop``."""
        return [self._receive(client, stop, source, handle)
                for source, handle in self._sources()]

    def _sources(self) -> list[tuple[str, Handler]]:
        """What the client receives from through the proxy, each with its handler."""
        return [(ENTITY, self._handle)]

    async def _receive(self, client: Transport, stop: asyncio.Event, source: str,
                       handle: Handler) -> None:
        while not stop.is_set():
            for message in await client.receive(source, max_messages=_RECEIVE_BATCH,
                                                max_wait=_RECEIVE_WAIT):
                await handle(message)
                try:
                    await client.complete(message)
                except GatewayError as exc:
                    # As a peek-lock application goes on: if the lock was lost, the
                    # message comes again and the report counts it delivered twice.
                    _LOG.warning("drill: %s", exc)


class ProxiedTopicDrill(ProxiedQueueDrill, TopicDrill):
    """The queue scenarios over a topic through a proxy: the client sends to the topic
    and receives from each of its subscriptions (``TOPIC/Subscriptions/SUB``)."""

    def _sources(self) -> list[tuple[str, Handler]]:
        return [(f"{TOPIC}/Subscriptions/{name}", self._handler(name))
                for name in SUBSCRIPTIONS]


class ProxiedSessionsDrill(ProxiedQueueDrill, SessionsDrill):
    """The sessions drill through a proxy: the client sends each session's messages to
    the proxy, and its session receivers take the sessions from the proxy once the
    primary is down (what was sent before is all in the primary, out of reach)."""

    def _more_hooks(self) -> list[GatewayHooks]:
        return [self.gap_hook]

    def _receivers_of(self, client: Transport, stop: asyncio.Event) -> list[Any]:
        return [self._receive_sessions(client, stop) for _ in range(self.receivers)]

    async def _receive_sessions(self, client: Transport, stop: asyncio.Event) -> None:
        await self._outage.wait()
        while not stop.is_set():
            try:
                session = await client.accept_session(self.entity, max_wait=_SESSION_WAIT)
            except GatewayError:  # both namespaces out of reach for a moment
                await asyncio.sleep(_RECEIVE_WAIT)
                continue
            if session is None:
                continue
            async with session:
                with contextlib.suppress(GatewayError):  # the session comes again
                    await self._drain_session(client, session, stop)

    async def _drain_session(self, client: Transport, session: Any,
                             stop: asyncio.Event) -> None:
        idle = 0
        while not stop.is_set() and idle < _SESSION_IDLE:
            got = await session.receive(max_messages=100, max_wait=_RECEIVE_WAIT)
            idle = 0 if got else idle + 1
            for message in got:
                await self._handle(message)
                await client.complete(message)
