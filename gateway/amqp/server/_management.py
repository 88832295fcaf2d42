"""Request/response nodes: ``$cbs`` (put-token) and ``$management`` (entity operations).

A client attaches a pair of links to a node: a sender for requests and a receiver
for responses. A response goes back on the receiver link of the same session
attached to the same node, with the request's message-id as its correlation-id.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.amqp import (
    NO_VALUE,
    Accepted,
    AmqpMessage,
    Array,
    DecodeError,
    Error,
    Properties,
    Rejected,
    Symbol,
    decode_message,
    encode_message,
)
from gateway.amqp.server._auth import AuthError, authorize, entity_path, resource_path
from gateway.amqp.server._interfaces import ServerNamespace
from gateway.amqp.server._links import Delivery, IncomingLink, Link, OutgoingLink, Terminus
from replication import GatewayError

__all__ = ["Handler", "Replies", "Reply", "Requests", "app_property", "audience_entity",
           "put_token", "status"]

#: Seconds by which credit and settlements of requests follow the frames clients wait for.
_LATER = 0.5


@dataclass(kw_only=True)
class Reply:
    """A response: its application properties (status and description) and amqp-value."""

    properties: dict[str, Any]
    value: Any = NO_VALUE


Handler = Callable[[IncomingLink, AmqpMessage], Awaitable[Reply]]


class Replies(Terminus):
    """The response link of a node: sends replies as the peer's credit allows."""

    def __init__(self) -> None:
        self._backlog: collections.deque[bytes] = collections.deque()

    def post(self, link: OutgoingLink, payload: bytes) -> None:
        self._backlog.append(payload)
        self.on_credit(link)

    def on_credit(self, link: OutgoingLink) -> None:
        while self._backlog and link.can_send():
            tag = link.delivery_count.to_bytes(4, "big")
            link.send(tag, self._backlog.popleft(), settled=True)


class Requests(Terminus):
    """The request link of a node: each request is handled in its own task.

    The Azure SDKs send requests without waiting for credit, and read one frame per
    turn of their open loop (50 ms apart), so every frame before the one they wait
    for costs them 50 ms: the credit goes out half a second after the attach, and
    each request is settled half a second after its response, so that the frames
    the client waits for (the response, then the attach of its entity link) come
    first. A client that does wait for credit gets it after that half second.
    """

    credit_delay = _LATER

    def __init__(self, namespace: ServerNamespace, handler: Handler) -> None:
        self.namespace = namespace
        self.handler = handler

    def on_delivery(self, link: IncomingLink, delivery: Delivery) -> None:
        self.namespace.spawn(self._serve(link, delivery))

    async def _serve(self, link: IncomingLink, delivery: Delivery) -> None:
        try:
            request = decode_message(delivery.payload)
        except DecodeError as exc:
            link.settle(delivery, Rejected(error=Error(condition="amqp:decode-error",
                                                       description=str(exc))))
            return
        try:
            reply = await self.handler(link, request)
        except GatewayError as exc:
            reply = Reply(properties=status(500, f"the namespace failed: {exc}"))
        await self.namespace.delay()
        replies = _reply_link(link, request)
        if replies is not None and isinstance(replies.terminus, Replies):
            props = request.properties
            response = AmqpMessage(
                properties=Properties(correlation_id=props.message_id if props else None),
                application_properties=reply.properties,
                value=reply.value,
            )
            replies.terminus.post(replies, encode_message(response))
        else:
            self.namespace.log.info("no response link for a request on %r", link.address)
        asyncio.get_running_loop().call_later(_LATER, link.settle, delivery, Accepted())


def listed(value: object) -> list[Any]:
    """The items of a request's list argument (``lock-tokens``, ``sequence-numbers``):
    an AMQP array or a list; anything else is no items."""
    if isinstance(value, Array):
        return list(value.items)
    return list(value) if isinstance(value, list) else []


def status(code: int, description: str, condition: str | None = None) -> dict[str, Any]:
    """Response properties in both spellings the SDKs read (``$cbs`` and EH / Service Bus)."""
    props: dict[str, Any] = {"status-code": code, "status-description": description,
                             "statusCode": code, "statusDescription": description}
    if condition is not None:
        props["errorCondition"] = Symbol(condition)
    return props


def _reply_link(request_link: Link, request: AmqpMessage) -> OutgoingLink | None:
    """The peer's response link: same session, same node (and its reply-to, if given)."""
    node = request_link.address.lower()
    reply_to = request.properties.reply_to if request.properties else None
    found: OutgoingLink | None = None
    for link in request_link.session.links():
        if not isinstance(link, OutgoingLink) or link.address.lower() != node:
            continue
        target = link.target.address if link.target is not None else None
        if reply_to is None or (target or "").lower() == reply_to.lower():
            return link
        found = link
    return found


_HUB_PART = re.compile(r"(?P<hub>.+?)/(?:consumergroups|partitions)(?:/.*)?")


def audience_entity(path: str) -> str:
    """The entity a put-token audience's lower-case path names ("" for the namespace):
    its queue, topic, subscription or event hub, without the dead-letter suffix, a
    ``$management`` node, or an event hub's consumer group or partition."""
    path = path.removesuffix("/$management").removesuffix("/$deadletterqueue")
    hub = _HUB_PART.fullmatch(path)
    return hub["hub"] if hub else path


def app_property(msg: AmqpMessage, name: str) -> Any:
    """An application property of ``msg`` (keys may be strings or symbols)."""
    return (msg.application_properties or {}).get(name)


async def put_token(link: IncomingLink, request: AmqpMessage) -> Reply:
    """The ``$cbs`` put-token operation: check the token and grant its audience.

    As on the service, the credential is checked first (401), then the audience's
    entity must exist (404, "could not be found"): a caller without a valid token
    learns nothing of which entities exist.
    """
    namespace = link.session.connection.namespace
    if app_property(request, "operation") != "put-token":
        return Reply(properties=status(400, "the only $cbs operation is put-token"))
    token, audience = request.value, app_property(request, "name")
    if not isinstance(token, str) or not isinstance(audience, str):
        return Reply(properties=status(400, "put-token needs a string token and a 'name'"))
    try:
        grant = authorize(token, audience=audience, policies=namespace.policies,
                          now=time.time())
    except AuthError as exc:
        namespace.log.info("namespace %s refused a token for %s: %s", namespace.name,
                           entity_path(audience) or "/", exc)
        return Reply(properties=status(401, f"InvalidSignature: {exc}"))
    target = audience_entity(resource_path(audience))
    if target and not await namespace.exists(target):
        return Reply(properties=status(404, f"The messaging entity '{audience}' could not be "
                                       "found."))
    conn = link.session.connection
    now = time.time()
    conn.grants = [g for g in conn.grants if g.expires > now] + [grant]  # tokens are renewed
    return Reply(properties=status(202, "Accepted"))
