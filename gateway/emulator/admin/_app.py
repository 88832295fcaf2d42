"""The administration API of one namespace, as an ASGI application (starlette).

Routes, as ``ServiceBusAdministrationClient`` calls them (every one with ``api-version``):

- ``GET /$namespaceinfo``: the namespace's properties;
- ``GET /$Resources/queues`` and ``/$Resources/topics`` (``$skip``, ``$top``): lists;
- ``GET|PUT|DELETE /NAME``: a queue or a topic (a PUT's body says which; with
  ``If-Match: *`` it updates, else it creates);
- ``GET /TOPIC/subscriptions``, ``GET|PUT|DELETE /TOPIC/subscriptions/SUB``;
- ``GET /TOPIC/subscriptions/SUB/rules``, ``GET|PUT|DELETE .../rules/RULE``.

Every request needs ``Authorization: SharedAccessSignature ...`` signed with a key of one
of the namespace's policies, with the ``Manage`` right, for the namespace or for the
entity asked about (:func:`gateway.amqp.server.authorize`); otherwise 401, as on the
service. A get of what does not exist answers an empty feed (the SDK raises
``ResourceNotFoundError``), a delete or update of it 404, a create of what exists 409.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.amqp.server import AuthError, Policy, Right, authorize
from gateway.emulator.admin import _atom as atom
from gateway.emulator.admin import _descriptions as descriptions
from gateway.emulator.admin import _entities as entities
from gateway.transports import EntityKind, Rule, Store, subscription_path
from replication import ConfigError, GatewayError

__all__ = ["AdminNamespace", "create_app"]

_XML = "application/atom+xml;type=entry;charset=utf-8"


class AdminNamespace(Protocol):
    """What the administration API needs of a namespace (the emulator's ``Namespace``)."""

    name: str
    store: Store
    policies: tuple[Policy, ...]
    created: float

    def wrote(self, entities: Iterable[str]) -> None:
        """Wake the readers of ``entities`` (their messages or settings changed)."""


class _Failed(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _xml(body: str, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type=_XML)


class _Handler:
    """The requests of one namespace."""

    def __init__(self, namespace: AdminNamespace, clock: Callable[[], float]) -> None:
        self.ns, self.clock = namespace, clock

    @property
    def store(self) -> Store:
        return self.ns.store

    # -- the one route -------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        path = request.path_params["path"].strip("/")
        try:
            self._authorize(request, path)
            return await self._dispatch(request, path)
        except _Failed as exc:
            return _xml(atom.error(exc.status, exc.detail), exc.status)
        except entities.NoSuchEntity as exc:
            return _xml(atom.error(404, f"{exc}. TrackingId:emulator"), 404)
        except entities.EntityExists as exc:
            return _xml(atom.error(409, f"{exc}. TrackingId:emulator"), 409)
        except (descriptions.BadRequest, ConfigError, ValueError) as exc:
            return _xml(atom.error(400, str(exc)), 400)
        except GatewayError as exc:  # the namespace file is unavailable
            return _xml(atom.error(503, str(exc)), 503)

    def _authorize(self, request: Request, path: str) -> None:
        token = request.headers.get("authorization", "")
        # The entity asked about, as a URI (a path alone would be read as a host).
        audience = "sb://namespace/" + ("" if path.startswith("$") else path)
        try:
            grant = authorize(token, audience=audience, policies=self.ns.policies,
                              now=self.clock())
        except AuthError as exc:
            raise _Failed(401, f"InvalidSignature: {exc}") from None
        if Right.MANAGE not in grant.rights:
            raise _Failed(401, "Unauthorized: Manage claim(s) are required for this "
                               "operation")

    async def _dispatch(self, request: Request, path: str) -> Response:
        parts = path.split("/")
        low = [p.lower() for p in parts]
        method = request.method
        if low == ["$namespaceinfo"] and method == "GET":
            now = self.clock()
            return _xml(atom.namespace_entry(self.ns.name, str(request.url), self.ns.created, now))
        if len(parts) == 2 and low[0] == "$resources" and low[1] in ("queues", "topics"):
            kind = EntityKind.QUEUE if low[1] == "queues" else EntityKind.TOPIC
            found = entities.listing(self.store, kind, self.clock())
            return self._feed(request, parts[1].capitalize(), found)
        if len(parts) == 1 and not path.startswith("$"):
            return await self._entity(request, parts[0])
        if len(parts) >= 2 and low[1] == "subscriptions":
            topic = parts[0]
            if len(parts) == 2 and method == "GET":
                found = entities.listing(self.store, EntityKind.SUBSCRIPTION, self.clock(),
                                         topic=topic)
                return self._feed(request, "Subscriptions", found)
            sub = subscription_path(topic, parts[2]) if len(parts) > 2 else ""
            if len(parts) == 3:
                return await self._subscription(request, sub)
            if len(parts) == 4 and low[3] == "rules" and method == "GET":
                return self._rules(request, sub)
            if len(parts) == 5 and low[3] == "rules":
                return await self._rule(request, sub, parts[4])
        raise _Failed(400, f"{method} {path!r} is not an operation of the administration API")

    # -- queues and topics ---------------------------------------------------------------

    async def _entity(self, request: Request, name: str) -> Response:
        now = self.clock()
        if request.method == "GET":
            found = (entities.describe(self.store, name, EntityKind.QUEUE, now)
                     or entities.describe(self.store, name, EntityKind.TOPIC, now))
            return self._one(request, found)
        if request.method == "DELETE":  # a queue or a topic (an event hub is not theirs)
            queue = entities.describe(self.store, name, EntityKind.QUEUE, now)
            kind = EntityKind.QUEUE if queue is not None else EntityKind.TOPIC
            self.ns.wrote(entities.delete(self.store, name, kind))
            return _xml("", 200)
        if request.method != "PUT":
            raise _Failed(405, f"{request.method} is not allowed on an entity")
        body = await request.body()
        kind = descriptions.request_kind(body)
        return await self._put(request, name, kind, body)

    async def _put(self, request: Request, path: str, kind: EntityKind, body: bytes) -> Response:
        settings = descriptions.parse_settings(body, kind, forward_to=self._forward_name)
        now = self.clock()
        if request.headers.get("if-match") == "*":
            found = entities.update(self.store, path, kind, settings, now)
            self.ns.wrote([found.path])
            return _xml(atom.entry(found, str(request.url), self._forward_url(request, found)))
        found = entities.create(self.store, path, kind, settings, now)
        self.ns.wrote([found.path])
        return _xml(atom.entry(found, str(request.url), self._forward_url(request, found)), 201)

    async def _subscription(self, request: Request, sub: str) -> Response:
        now = self.clock()
        if request.method == "GET":
            return self._one(request, entities.describe(
                self.store, sub, EntityKind.SUBSCRIPTION, now))
        if request.method == "DELETE":
            self.ns.wrote(entities.delete(self.store, sub, EntityKind.SUBSCRIPTION))
            return _xml("", 200)
        if request.method != "PUT":
            raise _Failed(405, f"{request.method} is not allowed on a subscription")
        return await self._put(request, sub, EntityKind.SUBSCRIPTION, await request.body())

    # -- rules ---------------------------------------------------------------------------

    def _rules_of(self, sub: str) -> tuple[entities.Described, tuple[Rule, ...]]:
        found = entities.describe(self.store, sub, EntityKind.SUBSCRIPTION, self.clock())
        if found is None:
            raise entities.NoSuchEntity(f"no subscription {sub!r}")
        return found, found.settings.rules

    def _rules(self, request: Request, sub: str) -> Response:
        found, rules = self._rules_of(sub)
        skip, top = self._page(request)
        page = rules[skip:skip + top]
        base = str(request.url).split("?")[0]
        entries = [atom.rule_entry(r, f"{base}/{r.name}", found.created) for r in page]
        return _xml(atom.feed("Rules", str(request.url), entries, self.clock(),
                              self._next(request, skip, top, len(rules))))

    async def _rule(self, request: Request, sub: str, name: str) -> Response:
        found, rules = self._rules_of(sub)
        now = self.clock()
        existing = next((r for r in rules if r.name.lower() == name.lower()), None)
        if request.method == "GET":
            entries = [] if existing is None else [
                atom.rule_entry(existing, str(request.url), found.created)]
            if existing is None:
                return _xml(atom.feed(name, str(request.url), entries, now))
            return _xml(entries[0])
        if request.method == "DELETE":
            if existing is None:
                raise entities.NoSuchEntity(f"no rule {name!r} in {sub!r}")
            entities.set_rules(self.store, found.path, [r for r in rules if r is not existing],
                               now)
            return _xml("", 200)
        if request.method != "PUT":
            raise _Failed(405, f"{request.method} is not allowed on a rule")
        rule = descriptions.parse_rule(await request.body(), name)
        if request.headers.get("if-match") == "*":
            if existing is None:
                raise entities.NoSuchEntity(f"no rule {name!r} in {sub!r}")
            kept = [rule if r is existing else r for r in rules]
            status = 200
        else:
            if existing is not None:
                raise entities.EntityExists(f"rule {name!r} of {sub!r} exists already")
            kept, status = [*rules, rule], 201
        entities.set_rules(self.store, found.path, kept, now)
        return _xml(atom.rule_entry(rule, str(request.url), now), status)

    # -- answers -------------------------------------------------------------------------

    def _one(self, request: Request, found: entities.Described | None) -> Response:
        if found is None:  # as the service: an empty feed, which the SDK reports as 404
            return _xml(atom.feed(request.url.path.strip("/"), str(request.url), [],
                                  self.clock()))
        return _xml(atom.entry(found, str(request.url), self._forward_url(request, found)))

    def _feed(self, request: Request, title: str,
              found: Sequence[entities.Described]) -> Response:
        skip, top = self._page(request)
        base = f"{request.url.scheme}://{request.url.netloc}"
        entries = []
        for d in found[skip:skip + top]:
            entries.append(atom.entry(d, f"{base}/{d.path}", self._forward_url(request, d)))
        return _xml(atom.feed(title, str(request.url), entries, self.clock(),
                              self._next(request, skip, top, len(found))))

    @staticmethod
    def _page(request: Request) -> tuple[int, int]:
        try:
            skip = max(0, int(request.query_params.get("$skip", "0")))
            top = max(1, int(request.query_params.get("$top", "100")))
        except ValueError:
            raise _Failed(400, "$skip and $top must be integers") from None
        return skip, top

    @staticmethod
    def _next(request: Request, skip: int, top: int, total: int) -> str | None:
        if skip + top >= total:
            return None
        return str(request.url.include_query_params(**{"$skip": skip + top, "$top": top}))

    @staticmethod
    def _forward_name(target: str) -> str:
        # The SDK sends a full URL (https://HOST/NAME); the namespace keeps the name.
        return urlsplit(target).path.strip("/") if "://" in target else target.strip("/")

    @staticmethod
    def _forward_url(request: Request, found: entities.Described) -> str | None:
        target = found.settings.forward_to
        if target is None:
            return None
        return f"{request.url.scheme}://{request.url.netloc}/{target}"


def create_app(namespace: AdminNamespace, *,
               clock: Callable[[], float] = time.time) -> Starlette:
    """The administration API of ``namespace`` as an ASGI application."""
    endpoint: Callable[[Request], Awaitable[Any]] = _Handler(namespace, clock).handle
    methods = ["GET", "PUT", "DELETE", "POST", "PATCH"]
    return Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])
