"""Turning configuration into live objects: transports, queues, state paths."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from gateway._config import NamespaceConfig
from gateway.transports.base import Transport
from replication import ConfigError

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
        ConfigError: an unusable url or a kind of namespace this version cannot open.
    """
    if isinstance(namespace, Transport):
        return namespace, False
    config = namespace if isinstance(namespace, NamespaceConfig) else NamespaceConfig.parse(
        namespace
    )
    if config.is_local:
        from gateway.transports.local import LocalTransport

        return LocalTransport(config.local_name, data_dir=data_dir), True
    raise ConfigError(
        f"namespace {config.name!r}: Azure namespaces are not supported by this version "
        "of geogateway yet; use local://NAME"
    )
