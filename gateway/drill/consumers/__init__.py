"""The consumer drills: partition-balanced consumers, one of them killed."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.drill.consumers._scenario import CONSUMER_SCENARIOS, run_consumer_drill

_LAZY = {
    "CONSUMER_SCENARIOS": "gateway.drill.consumers._scenario",
    "run_consumer_drill": "gateway.drill.consumers._scenario",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "CONSUMER_SCENARIOS",
    "run_consumer_drill",
]
