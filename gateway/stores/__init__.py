"""What is kept between runs and shared between processes: the de-duplication store
(with its transactional inbox), the roles store and the sessions' positions, on
SQLite files.

Imported on first use (PEP 562): the stores bring in SQLite helpers that a sender
without de-duplication never needs.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.stores._dedup import SqliteDedupStore
    from gateway.stores._roles import RoleStore
    from gateway.stores._sessions import SqliteSessionStore

_LAZY = {
    "RoleStore": "gateway.stores._roles",
    "SqliteDedupStore": "gateway.stores._dedup",
    "SqliteSessionStore": "gateway.stores._sessions",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = ["RoleStore", "SqliteDedupStore", "SqliteSessionStore"]
