"""Which node a proxy link attaches to: ``$cbs``, ``$management``, or a queue's geo
sender (a sender link) or a geo receiver of it (a receiver link).

Tokens are checked against the proxy's own shared access policies (the namespaces'
keys are never seen by a client), with the rights the emulator and the service check:
``Send`` for a sender link, ``Listen`` for a receiver link. The proxy does not know
which entities exist behind it: a token and a link for any name are accepted, and a
send to an entity that does not exist is refused then, as the namespaces refuse it
(``amqp:not-found``). A session receiver link (``com.microsoft:session-filter``) gets a
geo session receiver of its session (``_sessions``), and ``$management`` answers the
operations on the sessions a connection holds, and settling by lock token
(``update-disposition``, ``_receive``). What the proxy does not carry yet is
refused at attach with ``amqp:not-implemented``: dead-letter sub-queues and sends to a
subscription; the other ``$management`` operations are answered with status 501.
Event Hubs consumers are refused, at their first ``$management`` request for the hub's
partitions or at a partition link's attach, with a description that says why and points
to the partition-balanced consumer. A topic is sent to as a queue is; a receiver link on
``TOPIC/Subscriptions/SUB`` gets a geo receiver of that subscription.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.amqp import AmqpMessage
from gateway.amqp.server import (
    Handler,
    IncomingLink,
    Link,
    OutgoingLink,
    Replies,
    Reply,
    Requests,
    Right,
    ServerNamespace,
    app_property,
    entity_path,
    put_token,
    session_filter,
    status,
)
from gateway.proxy._receive import LockTokens, ReceiveNode, dispose
from gateway.proxy._send import SendNode
from gateway.proxy._sessions import SESSION_OPERATIONS, SessionLinks, attach_session, manage_session

if TYPE_CHECKING:
    from gateway.proxy._backend import GeoBackend

__all__ = ["MAX_MESSAGE_SIZE", "ProxyRouter"]

_LOG = logging.getLogger("gateway.proxy")
#: The largest message a sender link takes: a standard tier Service Bus namespace's.
MAX_MESSAGE_SIZE = 256 * 1024
_MANAGEMENT = "$management"
_UPDATE_DISPOSITION = "com.microsoft:update-disposition"
_NOT_YET = ("$deadletterqueue",)
_CONSUMER_GROUPS, _PARTITIONS = "/consumergroups/", "/partitions/"
#: The ``type`` of Event Hubs' ``$management`` requests (hub and partition properties).
_EVENT_HUB_TYPES = ("com.microsoft:eventhub", "com.microsoft:partition")
#: Why an Event Hubs consumer or partition link is refused, and what to use instead.
_NO_EVENT_HUBS = (
    "the proxy does not serve Event Hubs consumers or partitions: its positions would not "
    "survive a failover (each namespace numbers its events itself). Read the hub from both "
    "namespaces with geogateway's partition-balanced consumer (AsyncGeoPartitionReceiver, "
    "checkpoints per partition per namespace), or connect the Event Hubs SDK to a namespace")
_SUBSCRIPTIONS = "/subscriptions/"
NOT_IMPLEMENTED = "amqp:not-implemented"


def _management(links: SessionLinks, locks: LockTokens, backend: GeoBackend,
                entity: str) -> Handler:
    """The ``$management`` node of ``entity``: the operations on its sessions, and
    settling by lock token."""

    async def manage(requests: IncomingLink, request: AmqpMessage) -> Reply:
        if str(app_property(request, "type") or "").startswith(_EVENT_HUB_TYPES):
            return Reply(properties=status(501, _NO_EVENT_HUBS, NOT_IMPLEMENTED))
        operation = str(app_property(request, "operation") or "")
        body = request.value if isinstance(request.value, dict) else {}
        args = {str(k): v for k, v in body.items()}
        if operation == _UPDATE_DISPOSITION and entity:
            return await backend.track(dispose(locks, entity, args))
        if operation in SESSION_OPERATIONS and entity:
            return await manage_session(links, requests.session.connection, entity,
                                        operation, args)
        return Reply(properties=status(501, f"the proxy does not carry the $management "
                                            f"operation {operation!r} yet", NOT_IMPLEMENTED))

    return manage


class ProxyRouter:
    """Binds each new link of the proxy's namespace to its node, or refuses it."""

    def __init__(self, namespace: ServerNamespace, backend: GeoBackend) -> None:
        self.namespace = namespace
        self.backend = backend
        self.sessions = SessionLinks()
        self.locks = LockTokens()

    def attach(self, link: Link) -> None:
        """Route ``link``."""
        try:
            self._route(link, entity_path(link.address))
        except Exception:
            _LOG.exception("attaching %r failed", link.address)
            link.refuse("amqp:internal-error", "the proxy failed to attach the link")

    def _route(self, link: Link, path: str) -> None:
        if path == "$cbs":
            self._node(link, put_token)
            return
        if path == _MANAGEMENT or path.endswith("/" + _MANAGEMENT):
            self._node(link, _management(self.sessions, self.locks, self.backend,
                                         path[:-len(_MANAGEMENT)].rstrip("/")))
            return
        conn = link.session.connection
        if not conn.authorized(path):
            link.refuse("amqp:unauthorized-access",
                        f"Unauthorized access to '{path}': put a token for it on $cbs first")
            return
        right = Right.SEND if isinstance(link, IncomingLink) else Right.LISTEN
        if not conn.authorized(path, right):
            link.refuse("amqp:unauthorized-access", f"Unauthorized access. '{right.value}' "
                        f"claim(s) are required to perform this operation. Resource: '{path}'.")
            return
        if _CONSUMER_GROUPS in path or _PARTITIONS in path:
            link.refuse(NOT_IMPLEMENTED, _NO_EVENT_HUBS)
            return
        if not path or any(part in path for part in _NOT_YET):
            link.refuse(NOT_IMPLEMENTED, f"the proxy does not carry {path!r} yet: queues only")
            return
        if isinstance(link, IncomingLink):
            if _SUBSCRIPTIONS in path:
                link.refuse(NOT_IMPLEMENTED, f"cannot send to {path!r}: send to its topic")
                return
            link.accept(SendNode(self.namespace, self.backend, path),
                        max_message_size=MAX_MESSAGE_SIZE)
        elif isinstance(link, OutgoingLink):
            if session_filter(link)[0]:
                self.namespace.spawn(attach_session(
                    self.namespace, self.backend, link, path, self.sessions,
                    max_message_size=MAX_MESSAGE_SIZE))
                return
            link.accept(ReceiveNode(self.namespace, self.backend, path, link, self.locks),
                        max_message_size=MAX_MESSAGE_SIZE)

    def _node(self, link: Link, handler: Handler) -> None:
        if isinstance(link, IncomingLink):
            link.accept(Requests(self.namespace, handler))
        else:
            link.accept(Replies())
