"""The fleet drill: receiver machines sharing one store, one of them killed."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.drill.fleet._scenario import STORES, run_fleet_drill

_LAZY = {
    "run_fleet_drill": "gateway.drill.fleet._scenario",
    "STORES": "gateway.drill.fleet._scenario",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "STORES",
    "run_fleet_drill",
]
