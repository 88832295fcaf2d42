"""A client's receiver link on a queue: the first copy of each message, from either
namespace, through a geo receiver (:class:`~gateway.geo.AsyncGeoReceiver`).

Peek-lock: a delivery stays locked in the namespace its copy came from, and the
client's settlement goes there (``accepted`` completes it, ``released`` and
``modified`` abandon it, ``rejected`` dead-letters it with the reason the SDK put in
the error's info); a settlement the client waits for is answered with the outcome it
asked for, or ``rejected`` with ``com.microsoft:message-lock-lost`` when the
namespace refused it. Each delivery's tag is a lock token of the proxy's own (a
UUID): the namespaces' tokens never leave the proxy. A link in receive-and-delete
mode (pre-settled) completes each message as it is sent.

While both namespaces are down the link stays attached (what it delivered can still
be settled once the copy's namespace is back) and delivers nothing; the outage is
logged as a warning. A refusal for good detaches the link with the service's
condition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Any

from gateway.amqp import (
    Accepted,
    DeliveryState,
    Error,
    Modified,
    Rejected,
    Released,
    encode_message,
)
from gateway.amqp.server import (
    Link,
    OutgoingLink,
    ServerNamespace,
    Terminus,
    queue_message,
)
from gateway.proxy._outcomes import condition, describe, rejected
from gateway.transports.base import ReceivedMessage
from replication import GatewayError, NamespaceUnavailable

if TYPE_CHECKING:
    from gateway.geo import AsyncGeoReceiver
    from gateway.proxy._backend import GeoBackend

__all__ = ["ReceiveNode"]

_LOG = logging.getLogger("gateway.proxy")
LOCK_LOST = "com.microsoft:message-lock-lost"
#: The most messages taken from the geo receiver at once, and how long one ask waits.
_MAX_TAKE, _WAIT = 64, 0.2
#: How long a link waits before it asks again while both namespaces are down.
_OUTAGE_PAUSE = 0.5


class ReceiveNode(Terminus):
    """A receiver link on one queue, reading it through its own geo receiver."""

    def __init__(self, namespace: ServerNamespace, backend: GeoBackend, entity: str,
                 link: OutgoingLink) -> None:
        self.namespace = namespace
        self.backend = backend
        self.entity = entity
        self.receiver: AsyncGeoReceiver = backend.receiver(entity)
        self.presettled = link.settled_mode
        self._wake = asyncio.Event()
        self._outage = False
        namespace.spawn(self._pump(link))

    def on_credit(self, link: OutgoingLink) -> None:
        self._wake.set()

    def on_detach(self, link: Link) -> None:
        self._wake.set()

    async def _pump(self, link: OutgoingLink) -> None:
        try:
            await self._deliver(link)
        except GatewayError as exc:
            link.detach(condition(exc), describe(exc))
        except Exception:
            _LOG.exception("delivering to %r failed", link.address)
            link.detach("amqp:internal-error", "the proxy failed")
        finally:
            await self.backend.drain()
            await self.backend.release(self.receiver)

    async def _deliver(self, link: OutgoingLink) -> None:
        while link.state != "detached":
            if not link.can_send():
                link.drained()
                await link.wait_to_send(self._wake)
                continue
            try:
                got = await self.receiver.receive(max_messages=min(link.credit, _MAX_TAKE),
                                                  max_wait=_WAIT)
            except NamespaceUnavailable as exc:
                # Both namespaces are down: say so (once per outage) and keep the link,
                # so that what it delivered can still be settled when one comes back.
                if not self._outage:
                    _LOG.warning("receiving %r through the proxy: %s", self.entity,
                                 describe(exc))
                self._outage = True
                await asyncio.sleep(_OUTAGE_PAUSE)
                continue
            self._outage = False
            if not got:
                link.drained()
                continue
            await self._send(link, got)
            await link.session.connection.drain()

    async def _send(self, link: OutgoingLink, got: list[ReceivedMessage]) -> None:
        for r in got:
            if link.state == "detached" or (not self.presettled and not link.can_send()):
                await self.backend.track(self.receiver.abandon(r))  # delivered again later
                continue
            token = uuid.uuid4()
            wire = dataclasses.replace(r, lock_token=token.hex)
            payload = encode_message(queue_message(wire, delivered=True))
            link.send(token.bytes_le, payload, settled=self.presettled, token=r)
            if self.presettled:
                await self.backend.track(self.receiver.complete(r))

    def on_disposition(self, link: OutgoingLink, deliveries: list[tuple[int, object]],
                       state: object, settled: bool) -> None:
        if self.presettled:
            return
        self.namespace.spawn(self.backend.track(self._settle(link, deliveries, state, settled)))

    async def _settle(self, link: OutgoingLink, deliveries: list[tuple[int, object]],
                      state: object, settled: bool) -> None:
        answers: list[tuple[int, DeliveryState]] = []
        for delivery_id, token in deliveries:
            assert isinstance(token, ReceivedMessage)
            answers.append((delivery_id, await self._outcome(token, state)))
        if not settled:
            for delivery_id, answer in answers:
                link.settled(delivery_id, answer)

    async def _outcome(self, message: ReceivedMessage, state: object) -> DeliveryState:
        try:
            if isinstance(state, Accepted):
                await self.receiver.complete(message)
            elif isinstance(state, Released) or (
                    isinstance(state, Modified) and not state.undeliverable_here):
                await self.receiver.abandon(message)
            elif isinstance(state, Rejected):
                reason, description = _dead_letter_reason(state)
                await self.receiver.dead_letter(message, reason=reason, description=description)
                return Rejected(error=None)  # the SDK waits for the outcome it asked for
            else:
                return rejected("amqp:not-implemented",
                                f"the outcome {state!r} is not supported by the proxy yet")
        except GatewayError as exc:
            return rejected(LOCK_LOST, f"the namespace of the copy refused it: {describe(exc)}")
        return state


def _dead_letter_reason(state: Rejected) -> tuple[str, str]:
    info: dict[str, Any] = {}
    if isinstance(state.error, Error):
        info = {str(k): v for k, v in (state.error.info or {}).items()}
    reason = str(info.get("DeadLetterReason") or "")
    description = str(info.get("DeadLetterErrorDescription") or (
        state.error.description if isinstance(state.error, Error) else "") or "")
    return reason, description
