"""The service side of AMQP 1.0 that the unmodified SDKs talk to, whatever is behind it.

- Shared access signatures (``_auth``): the tokens clients put on ``$cbs``, checked
  against a namespace's shared access policies (Listen, Send, Manage).
- Links, sessions and connections (``_links``, ``_session``, ``_connection``): SASL,
  open/close, windows, credit, delivery assembly and settlement.
- The wire forms of the project's records (``_convert``): a client's message as a
  :class:`replication.Message` (and the sections a queue keeps beside it), a received
  message or event as the service sends it.
- Message sessions (``_message_sessions``): how a session receiver link asks for its
  session and how its attach is answered.
- Request/response nodes (``_management``): ``$cbs`` put-token, and the dispatch of
  ``$management`` requests to a back end's handler.

A back end (the emulator's local store, the proxy's geo sender and receivers) brings
a namespace (:class:`ServerNamespace`, with a router that binds each new link to a
:class:`Terminus` of its own) and a listening socket that hands each accepted
connection to :class:`Connection`. Nothing here knows what is behind a node.
"""

from gateway.amqp.server import _websocket as websocket
from gateway.amqp.server._auth import (
    ALL_RIGHTS,
    DEFAULT_KEY,
    DEFAULT_KEY_NAME,
    AuthError,
    Grant,
    Policy,
    Right,
    authorize,
    check_token,
    client_host,
    entity_path,
    parse_policy,
    parse_rights,
    pick_policy,
    resource_path,
    with_default,
)
from gateway.amqp.server._connection import MAX_FRAME_SIZE, Connection
from gateway.amqp.server._convert import (
    DEFERRED,
    NO_BODY,
    SCHEDULED_STATE,
    event_message,
    lock_tag,
    queue_message,
    queue_payload,
    tag_token,
    to_local,
    to_queued,
)
from gateway.amqp.server._interfaces import NodeConnection, ProtocolError, ServerNamespace
from gateway.amqp.server._links import (
    Delivery,
    IncomingLink,
    Link,
    LinkSession,
    OutgoingLink,
    Terminus,
)
from gateway.amqp.server._management import (
    Handler,
    Replies,
    Reply,
    Requests,
    app_property,
    audience_entity,
    listed,
    put_token,
    status,
)
from gateway.amqp.server._message_sessions import (
    LOCKED_UNTIL,
    SESSION_FILTER,
    accept_session_link,
    asked_session,
    attach_timeout,
    raw_session_filter,
    session_filter,
    ticks,
)
from gateway.amqp.server._session import LinkRouter, Session, SessionConnection, SessionNamespace
from gateway.amqp.server._wait import stalled, wait_first

__all__ = [
    "ALL_RIGHTS",
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "DEFERRED",
    "LOCKED_UNTIL",
    "MAX_FRAME_SIZE",
    "NO_BODY",
    "SCHEDULED_STATE",
    "SESSION_FILTER",
    "AuthError",
    "Connection",
    "Delivery",
    "Grant",
    "Handler",
    "IncomingLink",
    "Link",
    "LinkRouter",
    "LinkSession",
    "NodeConnection",
    "OutgoingLink",
    "Policy",
    "ProtocolError",
    "Replies",
    "Reply",
    "Requests",
    "Right",
    "ServerNamespace",
    "Session",
    "SessionConnection",
    "SessionNamespace",
    "Terminus",
    "accept_session_link",
    "app_property",
    "asked_session",
    "attach_timeout",
    "audience_entity",
    "authorize",
    "check_token",
    "client_host",
    "entity_path",
    "event_message",
    "listed",
    "lock_tag",
    "parse_policy",
    "parse_rights",
    "pick_policy",
    "put_token",
    "queue_message",
    "queue_payload",
    "raw_session_filter",
    "resource_path",
    "session_filter",
    "stalled",
    "status",
    "tag_token",
    "ticks",
    "to_local",
    "to_queued",
    "wait_first",
    "websocket",
    "with_default",
]
