"""The Azure Relay Hybrid Connections protocol: endpoints, tokens and control messages.

Pure (no I/O), shared by the relay emulator, :class:`GeoRelayListener` and the
HTTP client. Names follow the protocol document (``relay-hybrid-connections-protocol``)
and the .NET / Node clients:

- the listener's control channel is ``wss://{ns}/$hc/{path}?sb-hc-action=listen``,
  a WebSocket sender connects to ``?sb-hc-action=connect``, an HTTP sender sends to
  ``https://{ns}/{path}``;
- control messages are JSON text frames holding one object with one key,
  ``{"accept": {...}}``, ``{"request": {...}}``, ``{"response": {...}}`` or
  ``{"renewToken": {...}}``; a body follows as one binary WebSocket message;
- tokens are Service Bus shared access signatures,
  ``SharedAccessSignature sr=..&sig=..&se=..&skn=..``; the .NET client signs
  ``http://{ns}/{path}/``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, urlencode, urlsplit

from replication import ConfigError, GatewayError

__all__ = [
    "ACTION",
    "CLOSE_NORMAL",
    "CLOSE_SERVICE_ERROR",
    "CLOSE_TOKEN_EXPIRED",
    "CLOSE_UNAVAILABLE",
    "ID",
    "INLINE_BODY_LIMIT",
    "INLINE_HEADERS_LIMIT",
    "STATUS_CODE",
    "STATUS_DESCRIPTION",
    "TOKEN",
    "Accept",
    "ControlMessage",
    "ProtocolError",
    "RelayEndpoint",
    "RemoteEndpoint",
    "RenewToken",
    "Request",
    "Response",
    "create_token",
    "decode",
    "encode",
    "headers_size",
]

#: Query parameters of the ``$hc`` endpoints.
ACTION = "sb-hc-action"
ID = "sb-hc-id"
TOKEN = "sb-hc-token"
STATUS_CODE = "sb-hc-statusCode"
STATUS_DESCRIPTION = "sb-hc-statusDescription"

#: A request whose body or headers exceed these goes through a rendezvous socket.
INLINE_BODY_LIMIT = 64 * 1024
INLINE_HEADERS_LIMIT = 32 * 1024

#: WebSocket close codes of the control channel.
CLOSE_NORMAL = 1000
CLOSE_UNAVAILABLE = 1001  # the hybrid connection was deleted or disabled
CLOSE_TOKEN_EXPIRED = 1008
CLOSE_SERVICE_ERROR = 1011

#: What a hybrid connection may be called here (no '/': one path segment).
_HC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,259}")
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


class ProtocolError(GatewayError, ValueError):
    """A malformed control frame or relay address; the message says what was wrong."""


def create_token(audience: str, *, key_name: str, key: str, ttl: float = 3600.0,
                 now: float | None = None) -> str:
    """A shared access signature for ``audience``, valid for ``ttl`` seconds.

    Args:
        audience: the URL the token grants, e.g. ``http://ns/hc/``.
        key_name: the shared access policy's name.
        key: the policy's key (used as text, as the Azure SDKs do).
        ttl: seconds until the token expires.
        now: the current time (seconds since the epoch); defaults to the clock.

    Returns:
        ``SharedAccessSignature sr=..&sig=..&se=..&skn=..``.
    """
    expiry = str(int((time.time() if now is None else now) + ttl))
    encoded = quote_plus(audience)
    digest = hmac.new(key.encode("utf-8"), f"{encoded}\n{expiry}".encode(), hashlib.sha256)
    sig = quote_plus(base64.b64encode(digest.digest()).decode("ascii"))
    return f"SharedAccessSignature sr={encoded}&sig={sig}&se={expiry}&skn={quote_plus(key_name)}"


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class RelayEndpoint:
    """One hybrid connection in one namespace, and the key to reach it.

    Args:
        namespace: the namespace host, with a port for the emulator
            (``contoso.servicebus.windows.net``, ``127.0.0.1:5890``).
        path: the hybrid connection's name.
        key_name: the shared access policy's name.
        key: the policy's key (kept out of ``repr``).
        plain: plain ``http``/``ws`` instead of ``https``/``wss``: only for a loopback
            host (the emulator), so that a token never crosses a network in clear.

    Raises:
        ConfigError: an empty field, a path with ``/``, ``?`` or ``#``, or ``plain``
            with a host that is not loopback.
    """

    namespace: str
    path: str
    key_name: str
    key: str = field(repr=False)
    plain: bool = False

    def __post_init__(self) -> None:
        for name, what in (("namespace", "namespace"), ("path", "hybrid connection name"),
                           ("key_name", "key name"), ("key", "key")):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"relay endpoint: the {what} ({name}) must be a "
                                  "non-empty string")
        if not _HC_NAME.fullmatch(self.path):
            raise ConfigError(f"relay endpoint: bad hybrid connection name {self.path[:80]!r}: "
                              "use letters, digits, '.', '_' or '-' (at most 260, starting "
                              "with a letter or digit)")
        if any(c in self.namespace for c in "/?#@ "):
            raise ConfigError(f"relay endpoint: bad namespace {self.namespace!r}: give the "
                              "host (and port), e.g. contoso.servicebus.windows.net")
        if self.plain and not _is_loopback(self.host):
            raise ConfigError(f"relay endpoint: plain http/ws is only for a loopback emulator, "
                              f"not {self.host!r}: use sb://{self.host}/ without "
                              "UseDevelopmentEmulator")

    @property
    def host(self) -> str:
        """The namespace's host name, without a port."""
        return urlsplit(f"//{self.namespace}").hostname or self.namespace

    @classmethod
    def from_connection_string(cls, conn_str: str, *, path: str | None = None) -> RelayEndpoint:
        """Parse ``Endpoint=sb://NS/;SharedAccessKeyName=..;SharedAccessKey=..;EntityPath=HC``.

        ``UseDevelopmentEmulator=true`` or an ``http://`` endpoint (loopback only)
        means plain http/ws.

        Args:
            conn_str: the connection string.
            path: the hybrid connection, when the string has no ``EntityPath``.

        Raises:
            ConfigError: a missing or unknown field, a bad endpoint, or a path given
                twice differently. The message never contains the key.
        """
        fields: dict[str, str] = {}
        for part in (conn_str or "").split(";"):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise ConfigError("relay connection string: each part must be Name=Value; "
                                  "copy it again from the portal")
            fields[name.strip().lower()] = value.strip()
        known = {"endpoint", "sharedaccesskeyname", "sharedaccesskey", "entitypath",
                 "usedevelopmentemulator"}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ConfigError(f"relay connection string: unknown field(s) {', '.join(unknown)}; "
                              "expected Endpoint, SharedAccessKeyName, SharedAccessKey, EntityPath")
        for need in ("endpoint", "sharedaccesskeyname", "sharedaccesskey"):
            if not fields.get(need):
                raise ConfigError(f"relay connection string lacks {need}: copy it again "
                                  "from the portal (Shared access policies)")
        entity = fields.get("entitypath") or None
        if entity and path and entity != path:
            raise ConfigError(f"relay connection string names hybrid connection {entity!r}, "
                              f"but {path!r} was given: give one of them")
        if not (entity or path):
            raise ConfigError("no hybrid connection: add EntityPath=NAME to the connection "
                              "string or pass path=")
        url = urlsplit(fields["endpoint"])
        if url.scheme not in ("sb", "http", "https") or not url.netloc or url.path.strip("/"):
            raise ConfigError("relay connection string: Endpoint must be sb://NAMESPACE/ "
                              "(or http://127.0.0.1:PORT/ for the emulator)")
        emulator = fields.get("usedevelopmentemulator", "false").lower()
        if emulator not in ("true", "false"):
            raise ConfigError("relay connection string: UseDevelopmentEmulator must be "
                              "true or false")
        return cls(namespace=url.netloc, path=(entity or path or ""),
                   key_name=fields["sharedaccesskeyname"], key=fields["sharedaccesskey"],
                   plain=emulator == "true" or url.scheme == "http")

    def _url(self, secure: str, clear: str, suffix: str) -> str:
        return f"{clear if self.plain else secure}://{self.namespace}{suffix}"

    def http_url(self, target: str = "") -> str:
        """Where an HTTP sender sends: ``https://{ns}/{path}{target}``."""
        if target and not target.startswith(("/", "?")):
            target = "/" + target
        return self._url("https", "http", f"/{quote(self.path)}{target}")

    def listen_url(self, *, listener_id: str | None = None, token: str | None = None) -> str:
        """The listener's control channel, ``wss://{ns}/$hc/{path}?sb-hc-action=listen``."""
        return self._hc_url("listen", listener_id=listener_id, token=token)

    def connect_url(self, *, token: str | None = None) -> str:
        """Where a WebSocket sender connects: ``wss://{ns}/$hc/{path}?sb-hc-action=connect``."""
        return self._hc_url("connect", token=token)

    def _hc_url(self, action: str, *, listener_id: str | None = None,
                token: str | None = None) -> str:
        query = {ACTION: action}
        if listener_id:
            query[ID] = listener_id
        if token:
            query[TOKEN] = token
        return self._url("wss", "ws", f"/$hc/{quote(self.path)}?{urlencode(query)}")

    @property
    def audience(self) -> str:
        """What a token is signed for, as the .NET client does: ``http://{host}/{path}/``."""
        return f"http://{self.host}/{self.path}/"

    def token(self, *, ttl: float = 3600.0, now: float | None = None) -> str:
        """A fresh token for this hybrid connection (see :func:`create_token`)."""
        return create_token(self.audience, key_name=self.key_name, key=self.key, ttl=ttl,
                            now=now)


@dataclass(frozen=True, kw_only=True)
class RemoteEndpoint:
    """The sender's address as the relay saw it."""

    address: str = ""
    port: int = 0


@dataclass(frozen=True, kw_only=True)
class Accept:
    """``accept``: a WebSocket sender wants a connection; open (or reject) ``address``."""

    address: str
    id: str
    connect_headers: Mapping[str, str] = field(default_factory=dict)
    remote_endpoint: RemoteEndpoint | None = None


@dataclass(frozen=True, kw_only=True)
class Request:
    """``request``: an HTTP request. ``method is None`` means rendezvous (address and id only).

    ``body`` says whether a binary message with the body follows.
    """

    address: str
    id: str
    request_target: str | None = None
    method: str | None = None
    request_headers: Mapping[str, str] = field(default_factory=dict)
    remote_endpoint: RemoteEndpoint | None = None
    body: bool = False

    @property
    def rendezvous(self) -> bool:
        """Whether the listener must open ``address`` to read the request."""
        return self.method is None


@dataclass(frozen=True, kw_only=True)
class Response:
    """``response``: the listener's answer to request ``request_id``."""

    request_id: str
    status_code: int = 200
    status_description: str = ""
    response_headers: Mapping[str, str] = field(default_factory=dict)
    body: bool = False


@dataclass(frozen=True, kw_only=True)
class RenewToken:
    """``renewToken``: the listener's fresh token for its control channel."""

    token: str = field(repr=False)


ControlMessage = Accept | Request | Response | RenewToken

# Our attribute name -> the protocol's JSON field name, per message kind.
_FIELDS: dict[type[Any], tuple[str, dict[str, str]]] = {
    Accept: ("accept", {"address": "address", "id": "id", "connect_headers": "connectHeaders",
                        "remote_endpoint": "remoteEndpoint"}),
    Request: ("request", {"address": "address", "id": "id", "request_target": "requestTarget",
                          "method": "method", "request_headers": "requestHeaders",
                          "remote_endpoint": "remoteEndpoint", "body": "body"}),
    Response: ("response", {"request_id": "requestId", "status_code": "statusCode",
                            "status_description": "statusDescription",
                            "response_headers": "responseHeaders", "body": "body"}),
    RenewToken: ("renewToken", {"token": "token"}),
}
_KINDS = {kind: (cls, names) for cls, (kind, names) in _FIELDS.items()}
_REQUIRED = {Accept: ("address", "id"), Request: ("id",), Response: ("request_id",),
             RenewToken: ("token",)}


def encode(message: ControlMessage) -> str:
    """The JSON text frame of ``message``: ``{"<kind>": {<fields>}}`` (None fields omitted)."""
    kind, names = _FIELDS[type(message)]
    if isinstance(message, Request) and message.rendezvous:
        # Only address and id: a listener (the .NET one) tells a rendezvous request from
        # an inline one by whether ``body`` is present.
        return json.dumps({kind: {"address": message.address, "id": message.id}},
                          separators=(",", ":"))
    body: dict[str, Any] = {}
    for attr, name in names.items():
        value = getattr(message, attr)
        if value is None:
            continue
        if isinstance(value, RemoteEndpoint):
            value = {"address": value.address, "port": value.port}
        elif isinstance(value, Mapping):
            value = dict(value)
        body[name] = value
    return json.dumps({kind: body}, separators=(",", ":"))


def decode(frame: str | bytes) -> ControlMessage:
    """Parse one control frame.

    Raises:
        ProtocolError: not JSON, not one object with one known kind, or a field
            missing or of the wrong type. The message names the field, never its value.
    """
    try:
        raw = json.loads(frame)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("control frame is not JSON text") from None
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ProtocolError("control frame must be one JSON object with one key "
                            "(accept, request, response or renewToken)")
    (kind, body), = raw.items()
    if kind not in _KINDS:
        raise ProtocolError(f"unknown control message {kind[:40]!r}: expected accept, "
                            "request, response or renewToken")
    if not isinstance(body, dict):
        raise ProtocolError(f"control message {kind!r} must hold a JSON object")
    cls, names = _KINDS[kind]
    kwargs = {attr: _field(kind, name, body[name]) for attr, name in names.items()
              if name in body and body[name] is not None}
    for attr in _REQUIRED[cls]:
        if attr not in kwargs:
            raise ProtocolError(f"control message {kind!r} lacks {names[attr]!r}")
    if cls is Request and "method" in kwargs and "address" not in kwargs:
        kwargs["address"] = ""
    if cls is Request and "address" not in kwargs:
        raise ProtocolError("control message 'request' lacks 'address'")
    message: ControlMessage = cls(**kwargs)
    return message


_STR = {"address", "id", "requestTarget", "method", "requestId", "statusDescription", "token"}
_HEADERS = {"connectHeaders", "requestHeaders", "responseHeaders"}


def _field(kind: str, name: str, value: Any) -> Any:
    def bad(expected: str) -> ProtocolError:
        return ProtocolError(f"control message {kind!r}: field {name!r} must be {expected}")

    if name in _STR:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if name in _HEADERS:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise bad("an object of string values")
        return value
    if name == "body":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if name == "statusCode":
        # A number, or its digits as a string: the protocol article's own example writes
        # ``"statusCode" : "200"``.
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 999:
            raise bad("an HTTP status code (100-999)")
        return value
    # remoteEndpoint
    if not isinstance(value, dict):
        raise bad("an object with address and port")
    address, port = value.get("address", ""), value.get("port", 0)
    if not isinstance(address, str) or isinstance(port, bool) or not isinstance(port, int):
        raise bad("an object with a string address and an integer port")
    return RemoteEndpoint(address=address, port=port)


def headers_size(headers: Mapping[str, str]) -> int:
    """The size of ``headers`` as HTTP/1.1 lines (``name: value\\r\\n``), in bytes."""
    return sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items())
