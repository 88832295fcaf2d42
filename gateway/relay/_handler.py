"""What a relay listener's handler gets and gives, and a minimal ASGI driver.

A handler is ``async def handler(request: RelayRequest) -> RelayResponse``. An ASGI
application (``async def app(scope, receive, send)``) becomes one with
:func:`asgi_handler`: it is driven with one ``http`` scope per request, the whole
body in one ``http.request`` event, and its ``http.response.*`` events collected
into a :class:`RelayResponse`. Lifespan and WebSocket scopes are not driven.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from replication import GatewayError

__all__ = ["AsgiApp", "Handler", "RelayRequest", "RelayResponse", "asgi_handler"]


@dataclass(frozen=True, kw_only=True)
class RelayRequest:
    """An HTTP request that arrived through a hybrid connection.

    Attributes:
        method: ``GET``, ``POST``, ...
        target: the request target as the sender wrote it, from the hybrid
            connection's name on: ``/{hybrid-connection}/path?query``.
        headers: the sender's headers (without the relay's token).
        body: the whole body.
        namespace: the namespace it came through (its host and port).
        hybrid_connection: the hybrid connection's name.
        remote_address: the sender's address as the relay saw it, ``(host, port)``.
    """

    method: str
    target: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    namespace: str = ""
    hybrid_connection: str = ""
    remote_address: tuple[str, int] | None = None

    def header(self, name: str, default: str | None = None) -> str | None:
        """A header's value, looked up without regard to case."""
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), default)


@dataclass(frozen=True, kw_only=True)
class RelayResponse:
    """A listener's answer: status, reason, headers and the whole body."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    reason: str = ""


Handler = Callable[[RelayRequest], Awaitable[RelayResponse]]
"""A relay request handler: ``async (RelayRequest) -> RelayResponse``."""
AsgiApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                    Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]
"""An ASGI application (``scope, receive, send``), served by :func:`asgi_handler`."""


class AsgiError(GatewayError):
    """The ASGI application broke the protocol (for instance, never started a response)."""


def asgi_handler(app: AsgiApp) -> Handler:
    """A handler that serves each request with the ASGI application ``app``.

    The scope's ``root_path`` is ``/{hybrid-connection}``, and ``path`` the full path
    (ASGI 2.3: ``path`` includes ``root_path``).
    """

    async def handle(request: RelayRequest) -> RelayResponse:
        return await _AsgiCall(app, request).run()

    return handle


class _AsgiCall:
    def __init__(self, app: AsgiApp, request: RelayRequest) -> None:
        self.app, self.request = app, request
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.complete = False
        self._sent_body = False
        self._finished = asyncio.Event()

    def scope(self) -> dict[str, Any]:
        target = urlsplit(self.request.target)
        host, _, port = self.request.namespace.partition(":")
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1", "method": self.request.method.upper(), "scheme": "https",
            "path": unquote(target.path), "raw_path": target.path.encode("latin-1", "replace"),
            "query_string": target.query.encode("latin-1", "replace"),
            "root_path": f"/{self.request.hybrid_connection}" if self.request.hybrid_connection
            else "",
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1", "replace"))
                        for k, v in self.request.headers.items()],
            "client": self.request.remote_address,
            "server": (host, int(port)) if port.isdigit() else (host, 443),
            "extensions": {},
        }

    async def receive(self) -> dict[str, Any]:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self.request.body, "more_body": False}
        # As a server does: "disconnect" only once the response is over (apps that
        # stream listen for it meanwhile, and would stop at once).
        await self._finished.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            if self.status is not None:
                raise AsgiError("the ASGI app sent http.response.start twice")
            self.status = int(message["status"])
            for name, value in message.get("headers", []):
                key = bytes(name).decode("latin-1")
                text = bytes(value).decode("latin-1")
                self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text
        elif kind == "http.response.body":
            if self.status is None:
                raise AsgiError("the ASGI app sent a body before http.response.start")
            self.chunks.append(bytes(message.get("body", b"")))
            self.complete = not message.get("more_body", False)
            if self.complete:
                self._finished.set()
        else:
            raise AsgiError(f"the ASGI app sent an unsupported message {kind!r}")

    async def run(self) -> RelayResponse:
        try:
            await self.app(self.scope(), self.receive, self.send)
        finally:
            self._finished.set()
        if self.status is None:
            raise AsgiError("the ASGI app returned without starting a response")
        return RelayResponse(status=self.status, headers=self.headers,
                             body=b"".join(self.chunks))
