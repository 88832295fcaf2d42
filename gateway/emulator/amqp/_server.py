"""The emulator: several namespaces, each on its own port, in one event loop or thread."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from gateway._support.service_thread import AsyncService, ServiceThread
from gateway.amqp.server import (
    DEFAULT_KEY,
    DEFAULT_KEY_NAME,
    Policy,
    client_host,
    pick_policy,
    with_default,
)
from gateway.emulator._config import (
    SERVICE_BUS_MAX_MESSAGE_SIZE,
    EventHubSpec,
    QueueSpec,
    parse_size,
)
from gateway.emulator._servicebus_config import TopicSpec
from gateway.emulator.amqp._namespace import Namespace
from gateway.transports import Store
from replication import ConfigError

__all__ = ["Emulator", "EmulatorThread"]


def _queues(queues: Iterable[str | QueueSpec]) -> list[QueueSpec]:
    return [q if isinstance(q, QueueSpec) else QueueSpec(name=q) for q in queues]


def _hubs(hubs: Mapping[str, int] | Iterable[EventHubSpec]) -> list[EventHubSpec]:
    if isinstance(hubs, Mapping):
        return [EventHubSpec(name=n, partitions=p) for n, p in hubs.items()]
    return list(hubs)


def _admin(wanted: bool | None) -> bool:
    from gateway.emulator.admin import missing_modules

    missing = missing_modules() if wanted is not False else []
    if wanted and missing:
        raise ConfigError(f"the administration API needs {', '.join(missing)}: "
                          "pip install 'geogateway[serve]'")
    return wanted is not False and not missing


def _prepare(store: Store) -> None:
    from gateway.emulator.admin import prepare

    prepare(store, time.time())


class Emulator(AsyncService):
    """Service Bus / Event Hubs namespaces that the unmodified Azure SDKs connect to.

    Each namespace is served over AMQP (no TLS) on its own port, and keeps its
    entities in the local namespace of the same name (``local://NAME`` sees the same
    queues and event hubs). Clients use :meth:`connection_string`. The same port
    serves AMQP over WebSockets (plain ``ws://``, ``/$servicebus/websocket``): the SDKs
    drop the endpoint's port for WebSockets, so they are given it once more as
    ``custom_endpoint_address="sb://HOST:PORT"`` (``gateway.amqp.server._websocket``
    says why one port).

    Args:
        namespaces: namespace name → port (0 picks a free port).
        data_dir: the local namespaces' data directory (default: ``$GEOGATEWAY_DATA_DIR``
            or the platform's, see :func:`gateway.transports.default_data_dir`).
        queues: queues to declare in every namespace (names or :class:`QueueSpec`).
        event_hubs: event hubs to declare in every namespace (name → partition count,
            or :class:`EventHubSpec`).
        key_name: the default shared access policy, with every right.
        key: its key (default: the well-known development key, :data:`DEFAULT_KEY`).
        policies: more shared access policies (:class:`Policy`, e.g. from
            :func:`parse_policy`): Listen, Send or Manage rights, on the namespace or
            on one entity; each namespace served has them all.
        host: the address to listen on.
        max_message_size: the largest Service Bus message each namespace accepts, in
            bytes (256 KiB, the standard tier's, by default); a queue's own smaller
            limit applies too. Event hubs keep their own limit.
        topics: topics to declare in every namespace, with their subscriptions and
            rules (:class:`TopicSpec`).
        admin: serve the administration API (``ServiceBusAdministrationClient``) on each
            namespace's port, over HTTP and HTTPS (:attr:`certificate`); None (the
            default): when its modules (the ``serve`` extra) are installed.

    Raises:
        ConfigError: no namespace, a bad name or port, two namespaces on one port,
            a max_message_size outside 1 KiB to 100 MiB, two policies of one name
            on the same scope, or ``admin=True`` without the ``serve`` extra.
    """

    def __init__(self, namespaces: Mapping[str, int], *,
                 data_dir: str | os.PathLike[str] | None = None,
                 queues: Iterable[str | QueueSpec] = (),
                 event_hubs: Mapping[str, int] | Iterable[EventHubSpec] = (),
                 key_name: str = DEFAULT_KEY_NAME, key: str = DEFAULT_KEY,
                 host: str = "127.0.0.1",
                 max_message_size: int = SERVICE_BUS_MAX_MESSAGE_SIZE,
                 topics: Iterable[TopicSpec] = (),
                 policies: Iterable[Policy] = (),
                 admin: bool | None = None) -> None:
        if not namespaces:
            raise ConfigError("an emulator serves at least one namespace")
        fixed = [p for p in namespaces.values() if p]
        if len(fixed) != len(set(fixed)):
            raise ConfigError(f"two namespaces on one port: {dict(namespaces)}")
        if not key or not key_name:
            raise ConfigError("the key and the key name must not be empty")
        limit = parse_size(max_message_size)
        self.policies = with_default(Policy(name=key_name, key=key), policies)
        directory = None if data_dir is None else os.fspath(data_dir)
        qs, hs, ts = _queues(queues), _hubs(event_hubs), tuple(topics)
        self.host = host
        self.key_name = key_name
        self._namespaces = {
            name: Namespace(name, port, host=host, data_dir=directory,
                            policies=self.policies, queues=qs, event_hubs=hs,
                            max_message_size=limit, topics=ts)
            for name, port in namespaces.items()
        }
        self._started = False
        self.admin = _admin(admin)
        self._fronts: list[Any] = []
        self._certificate: str | None = None

    @property
    def certificate(self) -> str | None:
        """The PEM file of the certificate the administration API's HTTPS uses (for the
        SDK's ``connection_verify=``), once started; None without the API."""
        return self._certificate

    async def start(self) -> None:
        """Create the declared entities and start listening.

        Raises:
            ConfigError: a port is in use, or an entity exists with other settings.
        """
        from gateway.emulator.admin import administered

        try:
            if self.admin:
                self._start_admin()
            for ns in self._namespaces.values():
                ns.kept = administered  # even without the API now, what it set holds
                await ns.start()
                if self.admin:
                    await ns.run(_prepare, ns.store)
        except BaseException:
            await self.aclose()
            raise
        self._started = True

    def _start_admin(self) -> None:
        from gateway.emulator.admin import AdminFront, certificate_files

        first = next(iter(self._namespaces.values()))
        try:
            files = certificate_files(os.path.dirname(first.db_path), self.host)
        except OSError as exc:
            raise ConfigError(f"cannot write the emulator's certificate: {exc}") from None
        self._certificate = str(files[0])
        for ns in self._namespaces.values():
            front = AdminFront(ns, files, state=ns.refresh)
            ns.front = front.accept
            self._fronts.append(front)

    async def aclose(self) -> None:
        """Close every connection and listener. Safe to call twice."""
        fronts, self._fronts = self._fronts, []
        await asyncio.gather(*(f.aclose() for f in fronts), return_exceptions=True)
        namespaces = list(self._namespaces.values())
        await asyncio.gather(*(ns.aclose() for ns in namespaces), return_exceptions=True)
        self._started = False

    @property
    def namespaces(self) -> list[str]:
        """The names of the namespaces served."""
        return list(self._namespaces)

    def port(self, name: str) -> int:
        """The port namespace ``name`` listens on (the one chosen when 0 was asked)."""
        return self._get(name).port

    def connection_string(self, name: str, *, redact_key: bool = False,
                          policy: str | None = None) -> str:
        """The connection string of namespace ``name`` for the Azure SDKs.

        Args:
            redact_key: write ``SharedAccessKey=***`` (for printing a secret key).
            policy: the name of the shared access policy to use (default: the default
                one, every right); an entity-level one adds its ``EntityPath``.

        Raises:
            ConfigError: no such namespace or policy, or two entity-level policies of
                that name.
        """
        chosen = pick_policy(self.policies, policy)
        host = client_host(self.host)
        key = "***" if redact_key else chosen.key
        entity = f"EntityPath={chosen.entity};" if chosen.entity else ""
        return (f"Endpoint=sb://{host}:{self.port(name)};SharedAccessKeyName={chosen.name};"
                f"SharedAccessKey={key};{entity}UseDevelopmentEmulator=true")

    def _get(self, name: str) -> Namespace:
        try:
            return self._namespaces[name]
        except KeyError:
            raise ConfigError(f"no namespace {name!r}: this emulator serves "
                              f"{sorted(self._namespaces)}") from None


class EmulatorThread(ServiceThread[Emulator]):
    """Runs an :class:`Emulator` on its own event loop in a background thread.

    For synchronous code and tests: ``with EmulatorThread(Emulator(...)) as emu:``
    starts it and returns once every namespace listens; leaving stops it.
    """

    thread_name = "geogateway-emulator"

    def __init__(self, emulator: Emulator) -> None:
        super().__init__(emulator)

    @property
    def emulator(self) -> Emulator:
        """The emulator run."""
        return self.service
