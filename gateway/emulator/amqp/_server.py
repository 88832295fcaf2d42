"""The emulator: several namespaces, each on its own port, in one event loop or thread."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping

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
from replication import ConfigError

__all__ = ["Emulator", "EmulatorThread"]


def _queues(queues: Iterable[str | QueueSpec]) -> list[QueueSpec]:
    return [q if isinstance(q, QueueSpec) else QueueSpec(name=q) for q in queues]


def _hubs(hubs: Mapping[str, int] | Iterable[EventHubSpec]) -> list[EventHubSpec]:
    if isinstance(hubs, Mapping):
        return [EventHubSpec(name=n, partitions=p) for n, p in hubs.items()]
    return list(hubs)


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

    Raises:
        ConfigError: no namespace, a bad name or port, two namespaces on one port,
            a max_message_size outside 1 KiB to 100 MiB, or two policies of one name
            on the same scope.
    """

    def __init__(self, namespaces: Mapping[str, int], *,
                 data_dir: str | os.PathLike[str] | None = None,
                 queues: Iterable[str | QueueSpec] = (),
                 event_hubs: Mapping[str, int] | Iterable[EventHubSpec] = (),
                 key_name: str = DEFAULT_KEY_NAME, key: str = DEFAULT_KEY,
                 host: str = "127.0.0.1",
                 max_message_size: int = SERVICE_BUS_MAX_MESSAGE_SIZE,
                 topics: Iterable[TopicSpec] = (),
                 policies: Iterable[Policy] = ()) -> None:
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

    async def start(self) -> None:
        """Create the declared entities and start listening.

        Raises:
            ConfigError: a port is in use, or an entity exists with other settings.
        """
        try:
            for ns in self._namespaces.values():
                await ns.start()
        except BaseException:
            await self.aclose()
            raise
        self._started = True

    async def aclose(self) -> None:
        """Close every connection and listener. Safe to call twice."""
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
