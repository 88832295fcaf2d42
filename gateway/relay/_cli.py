"""The relay part of ``geogateway emulator`` (``--hybrid-connection NAME``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.relay._emulator import RelayEmulator

__all__ = ["make_relay", "relay_ready"]


def make_relay(namespaces: Sequence[str], hybrid_connections: Sequence[str],
               relay_ports: Mapping[str, int], *, data_dir: str | os.PathLike[str] | None,
               key_name: str, key: str, host: str) -> RelayEmulator | None:
    """The relay emulator of ``namespaces`` (None without hybrid connections).

    Raises:
        ConfigError: a bad hybrid connection name, a port for an unknown namespace,
            or two namespaces on one port.
    """
    from replication._errors import ConfigError

    if not hybrid_connections:
        if relay_ports:
            raise ConfigError("--relay-port needs --hybrid-connection NAME")
        return None
    unknown = sorted(set(relay_ports) - set(namespaces))
    if unknown:
        raise ConfigError(f"--relay-port for unknown namespace(s) {', '.join(unknown)}: "
                          f"the namespaces are {', '.join(namespaces)}")
    from gateway.relay._emulator import RelayEmulator

    return RelayEmulator({n: relay_ports.get(n, 0) for n in namespaces}, hybrid_connections,
                         data_dir=data_dir, key_name=key_name, key=key, host=host)


def relay_ready(relay: RelayEmulator, *, secret: bool) -> tuple[dict[str, Any], list[str]]:
    """The relay's ready report: its JSON object, and its text lines."""
    report = {name: {"port": relay.port(name),
                     "hybrid_connections": relay.hybrid_connections,
                     "connection_string": relay.connection_string(name, redact_key=secret)}
              for name in relay.namespaces}
    lines = [f"relay {name} ready on {relay.host}:{relay.port(name)} "
             f"({', '.join(relay.hybrid_connections)}): "
             f"{relay.connection_string(name, redact_key=secret)}" for name in relay.namespaces]
    return report, lines
