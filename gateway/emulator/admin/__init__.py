"""The Service Bus administration API of the emulator, over HTTP(S) on each namespace's
own port: what ``ServiceBusAdministrationClient`` (azure.servicebus.management, sync and
async) calls to create, get, update, delete and list queues, topics, subscriptions and
rules, read their runtime properties and the namespace's.

Rooms: ``_entities`` changes the namespace file (so what it creates is served over AMQP
at once and kept across restarts), ``_atom`` reads and writes the ATOM XML, ``_app`` is
the ASGI application (starlette) with its SAS check (the ``Manage`` right), ``_front``
tells HTTP from AMQP on the namespace's port and runs the HTTP servers (uvicorn),
``_tls`` makes the certificate HTTPS needs. starlette, uvicorn and cryptography come
with the ``serve`` extra (``pip install 'geogateway[serve]'``); :func:`missing_modules`
says which are absent.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports
from gateway.emulator.admin._entities import administered, prepare
from gateway.emulator.admin._tls import certificate_files

if TYPE_CHECKING:
    from gateway.emulator.admin._app import create_app
    from gateway.emulator.admin._front import AdminFront

#: What the administration API imports beyond the emulator's own dependencies.
MODULES = ("starlette", "uvicorn", "cryptography")

# starlette and uvicorn are imported on first use: an emulator without them still runs.
_LAZY = {
    "AdminFront": "gateway.emulator.admin._front",
    "create_app": "gateway.emulator.admin._app",
}
__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)


def missing_modules() -> list[str]:
    """The modules the administration API needs that are not installed."""
    return [m for m in MODULES if not _installed(m)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # None in sys.modules: taken away on purpose
        return False


__all__ = ["MODULES", "AdminFront", "administered", "certificate_files", "create_app",
           "missing_modules", "prepare"]
