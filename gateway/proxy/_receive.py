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

A delivery can also be settled by its lock token over the queue's ``$management``
node (``com.microsoft:update-disposition``: completed, abandoned, suspended), as the
SDKs do when a settlement on the link was not confirmed in time or the link detached
before it was: a settlement of the same token already on its way is waited for and
its outcome answered, so the message is settled once, and a settlement asked again
as it was done (the first answer came too late) gets the same answer. Tokens are known
while their link is attached, and after it detached while their settlement is on its
way; an unknown token, or one settled otherwise, is answered with status 410 and
``com.microsoft:message-lock-lost``.

While both namespaces are down the link stays attached (what it delivered can still
be settled once the copy's namespace is back) and delivers nothing; the outage is
logged as a warning. A refusal for good detaches the link with the service's
condition.
"""

from __future__ import annotations

import asyncio
import collections
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
    Symbol,
    encode_message,
)
from gateway.amqp.server import (
    Link,
    OutgoingLink,
    Reply,
    ServerNamespace,
    Terminus,
    listed,
    queue_message,
    status,
    tag_token,
)
from gateway.proxy._outcomes import condition, describe, rejected
from gateway.transports.base import ReceivedMessage
from replication import GatewayError, NamespaceUnavailable

if TYPE_CHECKING:
    from gateway.geo import AsyncGeoReceiver
    from gateway.proxy._backend import GeoBackend

__all__ = ["LockTokens", "ReceiveNode", "dispose"]

_LOG = logging.getLogger("gateway.proxy")
LOCK_LOST = "com.microsoft:message-lock-lost"
DEAD_LETTER = "com.microsoft:dead-letter"
ARGUMENT_ERROR = "com.microsoft:argument-error"
NOT_IMPLEMENTED = "amqp:not-implemented"
#: How many settled tokens' outcomes are kept, to answer a settlement asked again.
_REMEMBERED = 10_000
#: The most messages taken from the geo receiver at once, and how long one ask waits.
_MAX_TAKE, _WAIT = 64, 0.2
#: How long a link waits before it asks again while both namespaces are down.
_OUTAGE_PAUSE = 0.5


class _Lock:
    """A delivery not settled yet: its node, its message, its settlement on its way."""

    __slots__ = ("message", "node", "settling")

    def __init__(self, node: ReceiveNode, message: ReceivedMessage) -> None:
        self.node = node
        self.message = message
        self.settling: asyncio.Future[DeliveryState] | None = None


class LockTokens:
    """The proxy's lock tokens of the deliveries its receiver links sent and that are
    not settled yet, so that a settlement comes once whichever way it is asked for;
    and the outcomes of the last settled ones, for a client that asks again because
    it did not hear the first answer in time."""

    def __init__(self, *, remember: int = _REMEMBERED) -> None:
        self._locks: dict[str, _Lock] = {}
        self._done: collections.OrderedDict[str, tuple[type, DeliveryState]] = (
            collections.OrderedDict())
        self._remember = remember

    def __len__(self) -> int:
        return len(self._locks)

    def add(self, token: str, node: ReceiveNode, message: ReceivedMessage) -> None:
        self._locks[token] = _Lock(node, message)

    def forget(self, node: ReceiveNode) -> None:
        """Drop ``node``'s tokens (its link detached), but those being settled."""
        for token, lock in list(self._locks.items()):
            if lock.node is node and lock.settling is None:
                del self._locks[token]

    async def settle(self, token: str, state: object, *,
                     entity: str | None = None) -> DeliveryState | None:
        """Settle the delivery of ``token`` as ``state`` asks, or wait for the settlement
        already on its way; ``None``: no such token (of ``entity``, when given)."""
        lock = self._locks.get(token)
        if lock is None:
            done = self._done.get(token)
            # Asked again as it was settled: the same answer; otherwise its lock is gone.
            return done[1] if done is not None and done[0] is type(state) else None
        if entity is not None and lock.node.entity.lower() != entity.lower():
            return None
        if lock.settling is None:
            lock.settling = asyncio.ensure_future(self._settle(token, lock, state))
        return await asyncio.shield(lock.settling)

    async def _settle(self, token: str, lock: _Lock, state: object) -> DeliveryState:
        outcome: DeliveryState | None = None
        try:
            outcome = await lock.node.outcome(lock.message, state)
            return outcome
        finally:
            self._locks.pop(token, None)
            if outcome is not None and not _lost(outcome):
                self._done[token] = (type(state), outcome)
                while len(self._done) > self._remember:
                    self._done.popitem(last=False)


def _lost(outcome: DeliveryState) -> bool:
    return (isinstance(outcome, Rejected) and isinstance(outcome.error, Error)
            and str(outcome.error.condition) == LOCK_LOST)


#: ``update-disposition``'s statuses, as the outcomes a link would carry.
_DISPOSITIONS: dict[str, type[Accepted] | type[Released]] = {
    "completed": Accepted, "abandoned": Released}


async def dispose(locks: LockTokens, entity: str, args: dict[str, Any]) -> Reply:
    """``com.microsoft:update-disposition`` on ``entity``'s ``$management`` node."""
    disposition = str(args.get("disposition-status") or "")
    state: DeliveryState
    if disposition == "suspended":
        info = {"DeadLetterReason": str(args.get("deadletter-reason") or ""),
                "DeadLetterErrorDescription": str(args.get("deadletter-description") or "")}
        state = Rejected(error=Error(condition=Symbol(DEAD_LETTER), info=info))
    elif disposition in _DISPOSITIONS:
        state = _DISPOSITIONS[disposition]()
    else:
        return Reply(properties=status(501, f"the proxy does not carry the disposition "
                                            f"{disposition!r} yet", NOT_IMPLEMENTED))
    tokens = listed(args.get("lock-tokens"))
    if not tokens:
        return Reply(properties=status(400, "update-disposition: no lock-tokens",
                                       ARGUMENT_ERROR))
    lost = False
    for token in tokens:
        try:
            key = uuid.UUID(token).hex if isinstance(token, str) else tag_token(token)
        except (TypeError, ValueError):
            return Reply(properties=status(400, f"update-disposition: {token!r} is not a "
                                                "lock token", ARGUMENT_ERROR))
        outcome = await locks.settle(key, state, entity=entity)
        lost = lost or outcome is None or _lost(outcome)
    if lost:
        return Reply(properties=status(410, "the lock on the message was lost (expired, "
                                            "or settled already)", LOCK_LOST))
    return Reply(properties=status(200, "OK"), value={})


class ReceiveNode(Terminus):
    """A receiver link on one queue, reading it through its own geo receiver."""

    def __init__(self, namespace: ServerNamespace, backend: GeoBackend, entity: str,
                 link: OutgoingLink, locks: LockTokens) -> None:
        self.namespace = namespace
        self.backend = backend
        self.entity = entity
        self.locks = locks
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
            self.locks.forget(self)
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
            if not self.presettled:
                self.locks.add(token.hex, self, r)
            link.send(token.bytes_le, payload, settled=self.presettled, token=token.hex)
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
            assert isinstance(token, str)
            answer = await self.locks.settle(token, state)
            answers.append((delivery_id, answer if answer is not None else rejected(
                LOCK_LOST, "the lock on the message was lost: settled already")))
        if not settled:
            for delivery_id, answer in answers:
                link.settled(delivery_id, answer)

    async def outcome(self, message: ReceivedMessage, state: object) -> DeliveryState:
        """Settle ``message`` in its copy's namespace as ``state`` asks; the outcome."""
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
