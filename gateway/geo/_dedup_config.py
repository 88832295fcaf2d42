"""The ``[dedup]`` table of the configuration: a SQLite file, or PostgreSQL for a fleet.

```toml
[dedup]
path = "dedup.db"                        # one machine: a SQLite file
# or
store = "postgresql://app@db.example.com/orders?sslmode=require"
schema = "geogateway"
fallback = "dedup-fallback.db"           # optional: a local window while it is away
```

A DSN is never taken for a file name: ``store`` holds it, and a DSN given as ``path``
(by ``$GEOGATEWAY_DEDUP_STORE`` or ``--dedup-store`` too) moves to ``store``. The DSN's
password never appears in a repr, a log line or an error; keep it out of the file
with ``$GEOGATEWAY_DEDUP_STORE``, libpq's ``$PGPASSWORD`` or a ``~/.pgpass`` file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.stores import describe_dsn, is_dsn
from replication import ConfigError, DedupStore, DedupWindow

__all__ = ["DedupConfig", "dedup_layer", "settle_dedup_layer"]


@dataclass(frozen=True, kw_only=True, repr=False)
class DedupConfig:
    """The receive side's persistent ``MessageId`` window.

    Exactly one of ``path`` (a SQLite file, shared by the processes of one machine)
    and ``store`` (a PostgreSQL DSN: one window for a fleet, in ``schema``) is set.
    ``fallback`` (with ``store`` only) is a SQLite file to de-duplicate against while
    the PostgreSQL store stays unreachable (at-least-once meanwhile).

    Raises:
        ConfigError: neither or both of ``path`` and ``store``; ``store`` not a DSN;
            ``fallback`` without ``store``.
    """

    path: Path | None = None
    store: str | None = None
    schema: str = "geogateway"
    fallback: Path | None = None
    window: DedupWindow = field(default_factory=DedupWindow)

    def __post_init__(self) -> None:
        if self.path is not None and is_dsn(os.fspath(self.path)) and self.store is None:
            object.__setattr__(self, "store", os.fspath(self.path))
            object.__setattr__(self, "path", None)
        if (self.path is None) == (self.store is None):
            raise ConfigError("[dedup] takes either path (a SQLite file) or store (a "
                              "PostgreSQL DSN)")
        if self.store is not None and not is_dsn(self.store):
            raise ConfigError("[dedup] store must be a PostgreSQL DSN (postgresql://user@"
                              "host:port/database, or host=... dbname=...)")
        if self.fallback is not None and self.store is None:
            raise ConfigError("[dedup] fallback is for a PostgreSQL store")
        for name in ("path", "fallback"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).expanduser())

    def __repr__(self) -> str:
        where = f"path={str(self.path)!r}" if self.path is not None else (
            f"store={describe_dsn(str(self.store))!r}, schema={self.schema!r}")
        fallback = f", fallback={str(self.fallback)!r}" if self.fallback else ""
        return f"DedupConfig({where}{fallback}, window={self.window!r})"

    def open_store(self) -> DedupStore:
        """The store this table describes (the caller closes it).

        Raises:
            ConfigError: the file or the server cannot be used (one line, no password).
        """
        from gateway.stores import (
            FallbackDedupStore,
            PostgresDedupStore,
            SqliteDedupStore,
        )

        if self.store is None:
            assert self.path is not None
            return SqliteDedupStore(self.path, window=self.window)
        store = PostgresDedupStore(self.store, schema=self.schema, window=self.window)
        if self.fallback is None:
            return store
        return FallbackDedupStore(store, self.fallback)


def dedup_layer(value: str | os.PathLike[str] | None) -> dict[str, Any]:
    """``[dedup]`` values for one setting of "the dedup store" (an env variable, an
    option): a DSN goes to ``store``, anything else to ``path``."""
    if value is None:
        return {}
    if isinstance(value, str) and is_dsn(value):
        return {"store": value}
    return {"path": value}


def settle_dedup_layer(merged: dict[str, Any], layer: dict[str, Any]) -> None:
    """A layer that names the store one way (``path`` or ``store``) replaces the other
    way of a layer below it."""
    if layer.get("store") is not None and layer.get("path") is None:
        merged.pop("path", None)
    if layer.get("path") is not None and layer.get("store") is None:
        merged.pop("store", None)
        if "fallback" not in layer:
            merged.pop("fallback", None)  # a fallback is for a PostgreSQL store only
