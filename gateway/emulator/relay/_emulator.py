"""``RelayEmulator``: Azure Relay Hybrid Connections on loopback, per namespace a port."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping

from gateway._support.service_thread import AsyncService
from gateway.amqp.server import DEFAULT_KEY, DEFAULT_KEY_NAME, client_host
from gateway.emulator.relay._namespace import RelayNamespace
from gateway.relay.protocol import RelayEndpoint
from gateway.transports import ControlFile, ControlState, namespace_files
from replication import ConfigError

__all__ = ["ANSWER_TIMEOUT", "RelayEmulator"]

_LOG = logging.getLogger("gateway.relay.emulator")
#: How long a listener has to answer a request (the service's 60 s).
ANSWER_TIMEOUT = 60.0
#: How often the control files are looked at (seconds).
_CONTROL_POLL = 0.1


class RelayEmulator(AsyncService):
    """Hybrid connections served over plain HTTP/WebSocket on loopback, one port per namespace.

    It speaks the Hybrid Connections protocol (listener control channel, inline and
    rendezvous requests, WebSocket accept, ``renewToken``), checks Service Bus
    shared access signatures, and obeys the same control files as the emulated
    namespaces: ``geogateway namespace down NAME`` closes the port and every
    connection until ``up``; ``namespace faults --latency`` delays every request;
    ``--lost-replies`` drops that share of listeners' answers (the sender gets 504
    after ``answer_timeout``: the outcome is unknown); ``hang`` (``ControlFile.update(
    hang=True)``) accepts connections and answers nothing, frames included, until cleared.

    Without a listener an HTTP sender gets 502: the protocol article says so in its
    text, while its table of relay errors says 503; senders fail over on either. A
    listener that goes away after it got a request gives its sender 504, the
    article's status for a request routed to a listener that did not answer: the
    outcome is unknown (see :mod:`gateway.emulator.relay._namespace`).

    Args:
        namespaces: namespace name → port (0 picks a free port, kept across down/up).
        hybrid_connections: the hybrid connections of every namespace.
        data_dir: where the namespaces' control files live (default: as for local
            namespaces, :func:`gateway.transports.default_data_dir`).
        key_name: the shared access policy that tokens must be signed with.
        key: its key (default: the well-known development key).
        host: the address to listen on.
        answer_timeout: seconds a listener has to answer before the sender gets 504.
        clock: the time source for token expiry (seconds since the epoch).

    Raises:
        ConfigError: no namespace or hybrid connection, a bad name, or two
            namespaces on one port.
    """

    def __init__(self, namespaces: Mapping[str, int], hybrid_connections: Iterable[str], *,
                 data_dir: str | os.PathLike[str] | None = None,
                 key_name: str = DEFAULT_KEY_NAME, key: str = DEFAULT_KEY,
                 host: str = "127.0.0.1", answer_timeout: float = ANSWER_TIMEOUT,
                 clock: Callable[[], float] = time.time) -> None:
        paths = frozenset(h.lower() for h in hybrid_connections)
        if not namespaces:
            raise ConfigError("a relay emulator serves at least one namespace")
        if not paths:
            raise ConfigError("a relay emulator serves at least one hybrid connection: "
                              "pass --hybrid-connection NAME")
        for path in paths:  # the same rules as a RelayEndpoint's path
            RelayEndpoint(namespace="127.0.0.1", path=path, key_name="k", key="k")
        fixed = [port for port in namespaces.values() if port]
        if len(fixed) != len(set(fixed)):
            raise ConfigError(f"two relay namespaces on one port: {dict(namespaces)}")
        if not key or not key_name:
            raise ConfigError("the key and the key name must not be empty")
        if not answer_timeout > 0:
            raise ConfigError(f"answer_timeout must be > 0 seconds, got {answer_timeout!r}")
        directory = None if data_dir is None else os.fspath(data_dir)
        self.host, self.key_name, self._key = host, key_name, key
        self.hybrid_connections = sorted(paths)
        self._namespaces = {
            name: RelayNamespace(name, port, host=host, paths=paths, key_name=key_name,
                                 key=key, control=ControlFile(namespace_files(name, directory)[1]),
                                 answer_timeout=answer_timeout, clock=clock)
            for name, port in namespaces.items()
        }
        self._watcher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        ports = {name: ns.port for name, ns in self._namespaces.items()}
        return f"RelayEmulator({ports}, {self.hybrid_connections})"

    async def start(self) -> None:
        """Start listening on every namespace's port.

        Raises:
            ConfigError: a port is in use.
        """
        try:
            for ns in self._namespaces.values():
                try:
                    await ns.start()
                except OSError as exc:
                    raise ConfigError(f"relay namespace {ns.name}: cannot listen on "
                                      f"{ns.host}:{ns.port}: {exc.strerror or exc}") from None
        except BaseException:
            await self.aclose()
            raise
        self._watcher = asyncio.get_running_loop().create_task(self._watch_control())

    async def aclose(self) -> None:
        """Close every connection and port. Safe to call twice."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        await asyncio.gather(*(ns.aclose() for ns in self._namespaces.values()),
                             return_exceptions=True)

    @property
    def namespaces(self) -> list[str]:
        """The names of the namespaces served."""
        return list(self._namespaces)

    def port(self, name: str) -> int:
        """The port namespace ``name`` listens on."""
        return self._get(name).port

    def control_state(self, name: str) -> ControlState:
        """What namespace ``name`` obeys now (its control file as last applied: the file
        is looked at every 0.1 s)."""
        return self._get(name).state

    def listener_count(self, name: str, hybrid_connection: str) -> int:
        """How many listeners are connected to ``hybrid_connection`` in namespace ``name``."""
        return len(self._get(name).listeners.get(hybrid_connection.lower(), []))

    def connection_string(self, name: str, hybrid_connection: str | None = None, *,
                          redact_key: bool = False) -> str:
        """The connection string of namespace ``name`` (with ``EntityPath`` when given).

        Args:
            redact_key: write ``SharedAccessKey=***`` (for printing a secret key).
        """
        host = client_host(self.host)
        key = "***" if redact_key else self._key
        entity = f";EntityPath={hybrid_connection}" if hybrid_connection else ""
        return (f"Endpoint=sb://{host}:{self.port(name)}/;SharedAccessKeyName={self.key_name};"
                f"SharedAccessKey={key}{entity};UseDevelopmentEmulator=true")

    def endpoint(self, name: str, hybrid_connection: str) -> RelayEndpoint:
        """The :class:`RelayEndpoint` of ``hybrid_connection`` in namespace ``name``."""
        return RelayEndpoint.from_connection_string(self.connection_string(name),
                                                    path=hybrid_connection)

    def _get(self, name: str) -> RelayNamespace:
        try:
            return self._namespaces[name]
        except KeyError:
            raise ConfigError(f"no relay namespace {name!r}: this emulator serves "
                              f"{sorted(self._namespaces)}") from None

    async def _watch_control(self) -> None:
        while True:
            await asyncio.sleep(_CONTROL_POLL)
            for ns in self._namespaces.values():
                try:
                    await self._poll(ns)
                except Exception:  # one namespace's trouble must not stop the others
                    _LOG.exception("relay namespace %s: applying its control file failed",
                                   ns.name)

    async def _poll(self, ns: RelayNamespace) -> None:
        state = ns.control.read()
        if state.hang != ns.state.hang:
            _LOG.info("relay namespace %s %s", ns.name, "hangs: it accepts connections and "
                      "answers nothing" if state.hang else "answers again")
        if not ns.apply(state):
            return
        if state.down:
            _LOG.info("relay namespace %s is down", ns.name)
            await ns.stop_serving()
        else:
            _LOG.info("relay namespace %s is up", ns.name)
            try:
                await ns.listen()
            except OSError:  # the port is taken for now: retried at the next poll
                ns.apply(dataclasses.replace(state, down=True))
