"""A client's session receiver link: one session of a session-enabled queue, through its
own geo session receiver (:class:`~gateway.geo.AsyncGeoSessionReceiver`), so that the
session's messages come in the sender's order whichever namespace holds each copy.

The attach (``com.microsoft:session-filter``: a session id, or null for the next
available one) is answered once the geo receiver holds the session in a namespace,
with the session id in the filter and the lock's expiry (the namespaces' lock
duration from now) in ``com.microsoft:locked-until-utc``, as the service answers it.
A next-available attach waits up to the link's ``com.microsoft:timeout`` (60 s
without one), then is refused with ``com.microsoft:timeout`` (the SDK raises
``OperationTimeoutError``); a named session that cannot be locked in that time is
refused with ``com.microsoft:session-cannot-be-locked``; a filter that is not a
string with ``com.microsoft:argument-error``.

The link delivers runs of the session's next messages (as many as the client's credit
allows) and waits for the client to settle them before the next run. Each settlement
is answered at once: ``accepted`` completes the message (in the namespace its copy
came from; its other copies are completed as duplicates), ``released`` and
``modified`` abandon it (it comes again, first). Dead-lettering (``rejected``) and
deferring (``modified`` undeliverable-here) a session message are not carried yet:
the message is abandoned and the client gets ``rejected`` with
``amqp:not-implemented``. While the link is attached the proxy keeps the session's
locks in the namespaces (renewed by the geo receiver); the client's own lock, which
its SDK checks, is renewed with ``renew-session-lock``.

``$management`` on the queue: ``renew-session-lock``, ``get-session-state`` and
``set-session-state`` act on a session this connection's link holds (the state is the
geo receiver's, kept in both namespaces); otherwise they answer 410
``com.microsoft:session-lock-lost``. Detaching the link gives the session up:
what the client had not settled comes again, to the session's next holder.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from gateway.amqp import (
    Accepted,
    Modified,
    Released,
    Timestamp,
    encode_message,
)
from gateway.amqp.server import (
    Link,
    NodeConnection,
    OutgoingLink,
    Reply,
    ServerNamespace,
    Terminus,
    accept_session_link,
    asked_session,
    attach_timeout,
    queue_message,
    status,
)
from gateway.proxy._outcomes import INTERNAL, condition, describe, rejected
from gateway.transports.base import ReceivedMessage
from replication import GatewayError

if TYPE_CHECKING:
    from gateway.geo import AsyncGeoSessionReceiver
    from gateway.proxy._backend import GeoBackend

__all__ = ["SESSION_OPERATIONS", "SessionLinks", "SessionNode", "attach_session"]

_LOG = logging.getLogger("gateway.proxy")
_TIMEOUT = "com.microsoft:timeout"
_CANNOT_LOCK = "com.microsoft:session-cannot-be-locked"
_ARGUMENT_ERROR = "com.microsoft:argument-error"
_LOCK_LOST = "com.microsoft:session-lock-lost"
_RENEW = "com.microsoft:renew-session-lock"
_GET_STATE = "com.microsoft:get-session-state"
_SET_STATE = "com.microsoft:set-session-state"
SESSION_OPERATIONS = frozenset((_RENEW, _GET_STATE, _SET_STATE))
#: How long a next-available attach waits when the client gives no timeout.
_DEFAULT_WAIT = 60.0
#: How long one ask for the session waits before the link is looked at again.
_ASK = 1.0


class SessionLinks:
    """The session links of one proxy, by connection, entity and session id (for the
    ``$management`` operations on their sessions)."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[int, str, str], SessionNode] = {}

    def add(self, node: SessionNode) -> None:
        self._nodes[node.key] = node

    def remove(self, node: SessionNode) -> None:
        if self._nodes.get(node.key) is node:
            del self._nodes[node.key]

    def find(self, connection: NodeConnection, entity: str,
             session_id: str) -> SessionNode | None:
        """The link of ``connection`` that holds ``session_id`` of ``entity``, if any."""
        return self._nodes.get((id(connection), entity.lower(), session_id))


class SessionNode(Terminus):
    """A receiver link on one session of a queue, held by its own geo session receiver."""

    def __init__(self, namespace: ServerNamespace, backend: GeoBackend, entity: str,
                 link: OutgoingLink, receiver: AsyncGeoSessionReceiver,
                 links: SessionLinks) -> None:
        self.namespace, self.backend, self.entity = namespace, backend, entity
        self.link, self.receiver, self.links = link, receiver, links
        assert receiver.session_id is not None
        self.session_id: str = receiver.session_id
        self.key = (id(link.session.connection), entity.lower(), self.session_id)
        self.presettled = link.settled_mode
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._unsettled: set[asyncio.Future[bool]] = set()

    def locked_until(self) -> float:
        """The client's lock on the session, renewed now (seconds since the epoch)."""
        return time.time() + self.receiver.lock_duration

    async def serve(self) -> None:
        """Hand the session's messages to the link until it detaches, then give it up."""
        link = self.link
        try:
            if not await self.receiver.receive_session(self, stop=self._stop):
                link.detach(_LOCK_LOST, f"the lock on session {self.session_id!r} of "
                            f"{self.entity!r} is lost: another receiver holds it")
        except GatewayError as exc:
            link.detach(condition(exc), describe(exc))
        except Exception:
            _LOG.exception("delivering session %r of %r failed", self.session_id, self.entity)
            link.detach(INTERNAL, "the proxy failed")
        finally:
            self.links.remove(self)
            self._stop.set()
            await self.backend.release(self.receiver)

    # -- the geo receiver's run handler ------------------------------------------------

    async def handle_run(self, messages: list[ReceivedMessage]) -> list[bool]:
        """Deliver what the client's credit allows of ``messages``; once the client
        settled each, whether it accepted it."""
        link = self.link
        while not link.can_send():
            if link.state == "detached" or self._stop.is_set():
                return []
            await link.wait_to_send(self._wake, self._stop.wait())
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[bool]] = []
        for r in messages:
            if not link.can_send():
                break
            token = uuid.uuid4()
            wire = dataclasses.replace(r, lock_token=token.hex)
            answer: asyncio.Future[bool] = loop.create_future()
            link.send(token.bytes_le, encode_message(queue_message(wire, delivered=True)),
                      settled=self.presettled, token=answer)
            if self.presettled:
                answer.set_result(True)
            else:
                self._unsettled.add(answer)
                answer.add_done_callback(self._unsettled.discard)
            answers.append(answer)
        await link.session.connection.drain()
        return list(await asyncio.gather(*answers))

    # -- link events -------------------------------------------------------------------

    def on_credit(self, link: OutgoingLink) -> None:
        self._wake.set()
        if link.drain:
            self.namespace.spawn(self._drain(link))

    async def _drain(self, link: OutgoingLink) -> None:
        # What is ready goes first (the pump was just woken), then the rest of the
        # credit is used up: the client asked to drain (the JavaScript SDK, at its
        # receive's timeout) and waits for that answer.
        for _ in range(3):
            await asyncio.sleep(0)
        if link.drain:
            link.drained()

    def on_detach(self, link: Link) -> None:
        self._stop.set()
        self._wake.set()
        for answer in list(self._unsettled):  # they come again, to the next holder
            if not answer.done():
                answer.set_result(False)

    def on_disposition(self, link: OutgoingLink, deliveries: list[tuple[int, object]],
                       state: object, settled: bool) -> None:
        if self.presettled:
            return
        accepted = isinstance(state, Accepted)
        if accepted or isinstance(state, Released) or (
                isinstance(state, Modified) and not state.undeliverable_here):
            answer: Any = state
        else:
            answer = rejected("amqp:not-implemented", "dead-lettering or deferring a session "
                              "message is not carried by the proxy yet: it was abandoned and "
                              "comes again")
        for delivery_id, token in deliveries:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(accepted)
            if not settled:
                link.settled(delivery_id, answer)


async def attach_session(namespace: ServerNamespace, backend: GeoBackend, link: OutgoingLink,
                         entity: str, links: SessionLinks, *, max_message_size: int) -> None:
    """Lock the session ``link`` asks for, then accept it; or refuse it (module docstring)."""
    asked, wanted = asked_session(link)
    if not asked:
        return
    receiver = backend.session_receiver(entity, wanted)
    try:
        session_id = await _accept(receiver, link)
    except GatewayError as exc:
        await backend.release(receiver)
        link.refuse(condition(exc), describe(exc))
        return
    except Exception:
        await backend.release(receiver)
        _LOG.exception("locking a session of %r failed", entity)
        link.refuse(INTERNAL, "the proxy failed to lock the session")
        return
    if session_id is None or link.state != "attaching":
        await backend.release(receiver)
        if wanted is not None:
            link.refuse(_CANNOT_LOCK, f"the session {wanted!r} of {entity!r} could not be "
                        "locked: another receiver holds it")
        else:
            link.refuse(_TIMEOUT, f"no session of {entity!r} has a message available: the "
                        "operation did not complete within the allocated time")
        return
    node = SessionNode(namespace, backend, entity, link, receiver, links)
    properties = accept_session_link(link, session_id, node.locked_until())
    link.accept(node, max_message_size=max_message_size, properties=properties)
    links.add(node)
    await node.serve()


async def _accept(receiver: AsyncGeoSessionReceiver, link: OutgoingLink) -> str | None:
    """The session, once held; ``None`` when none was in the link's time (or the client
    gave up on the attach)."""
    deadline = time.monotonic() + attach_timeout(link, _DEFAULT_WAIT)
    while link.state == "attaching":
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        session_id = await receiver.accept_session(max_wait=min(_ASK, left))
        if session_id is not None:
            return session_id
    return None


async def manage_session(links: SessionLinks, connection: NodeConnection, entity: str,
                         operation: str, args: dict[str, Any]) -> Reply:
    """One of :data:`SESSION_OPERATIONS` on a session ``connection`` holds."""
    raw = args.get("session-id")
    session_id = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else (
        None if raw is None else str(raw))
    if session_id is None:
        return Reply(properties=status(400, f"{operation} needs a 'session-id'",
                                       _ARGUMENT_ERROR))
    node = links.find(connection, entity, session_id)
    if node is None or node.link.state == "detached":
        return Reply(properties=status(
            410, f"the lock on session {session_id!r} is lost: the link that held it is "
            "gone, or this connection does not hold it", _LOCK_LOST))
    if operation == _RENEW:
        return Reply(properties=status(200, "OK"),
                     value={"expiration": Timestamp(round(node.locked_until() * 1000))})
    if operation == _GET_STATE:
        state = await node.receiver.get_state()
        return Reply(properties=status(200, "OK"), value={"session-state": state})
    value = args.get("session-state")
    await node.receiver.set_state(None if value is None else bytes(value))
    return Reply(properties=status(200, "OK"), value={})
