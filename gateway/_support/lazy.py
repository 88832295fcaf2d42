"""PEP 562 lazy exports: a package's names imported on first use.

The packages of geogateway keep their import light (the ``geogateway`` command must
start without the Azure SDKs, aiohttp or httpx) and import the rest when it is first
asked for::

    _LAZY = {"GeoSender": "gateway.geo._client", "LocalTransport": ".local"}
    __getattr__ = lazy_exports(__name__, _LAZY)
    __dir__ = lazy_dir(__name__, _LAZY)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_dir", "lazy_exports"]


def lazy_exports(module_name: str, table: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``name`` from module ``table[name]``.

    Args:
        module_name: the package's ``__name__``; a module in ``table`` starting with a
            dot is relative to it.
        table: exported name → the module that defines it.

    The value found is stored in the package's globals, so later lookups do not come
    back here; a name not in ``table`` raises :class:`AttributeError` as Python does.
    """

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, module_name), name)
        vars(sys.modules[module_name])[name] = value
        return value

    return __getattr__


def lazy_dir(module_name: str, table: Mapping[str, str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` listing the package's globals and its lazy names."""

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module_name])) | set(table))

    return __dir__
