"""Turning configuration into live objects: transports, queues, state paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from gateway.geo._namespace_config import NamespaceConfig
from gateway.transports.base import Transport
from replication import ConfigError

if TYPE_CHECKING:
    from gateway.transports.eventhubs import EventHubsTransport
    from gateway.transports.servicebus import ServiceBusTransport

__all__ = ["NamespaceLike", "check_entity", "default_state_dir", "open_transport"]

#: What the API accepts for a namespace: a url/connection string, a config, a transport.
NamespaceLike = str | NamespaceConfig | Transport


def default_state_dir() -> Path:
    """Where role state lives: ``$GEOGATEWAY_STATE_DIR`` or the user's state directory."""
    value = os.environ.get("GEOGATEWAY_STATE_DIR")
    return Path(value) if value else Path(platformdirs.user_state_dir("geogateway"))


def check_entity(entity: str) -> str:
    """Return ``entity`` if it can name a queue or event hub; raise ``ConfigError`` if not."""
    if not isinstance(entity, str) or not entity.strip() or entity != entity.strip():
        raise ConfigError(f"entity must be the name of a queue or event hub, not {entity!r}")
    return entity


def open_transport(
    namespace: NamespaceLike, *, data_dir: str | os.PathLike[str] | None = None
) -> tuple[Transport, bool]:
    """Return ``(transport, owned)``; ``owned`` means the caller must close it.

    Raises:
        ConfigError: an unusable url or connection string; for a local namespace, a
            data directory that is read-only or whose parent does not exist.
    """
    if isinstance(namespace, Transport):
        return namespace, False
    config = namespace if isinstance(namespace, NamespaceConfig) else NamespaceConfig.parse(
        namespace
    )
    if config.is_local:
        from gateway.transports import prepare_data_dir
        from gateway.transports.local import LocalTransport

        return LocalTransport(config.local_name, data_dir=prepare_data_dir(data_dir)), True
    # The SDK transports are imported only when an Azure namespace is opened.
    cls: type[ServiceBusTransport] | type[EventHubsTransport]
    if config.kind == "eventhubs":
        from gateway.transports.eventhubs import EventHubsTransport as cls
    else:
        from gateway.transports.servicebus import ServiceBusTransport as cls
    if config.connection_string:
        return cls.from_connection_string(config.connection_string, name=config.name), True
    return cls(config.fully_qualified_namespace, config.credential, name=config.name,
               use_development_emulator=config.use_development_emulator), True
