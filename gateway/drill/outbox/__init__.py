"""The outbox drill: orders committed with their messages, dispatchers killed."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.drill.outbox._report import OutboxDrillReport
    from gateway.drill.outbox._scenario import OUTBOX_SCENARIO, STORES, run_outbox_drill

_LAZY = {
    "OUTBOX_SCENARIO": "gateway.drill.outbox._scenario",
    "OutboxDrillReport": "gateway.drill.outbox._report",
    "run_outbox_drill": "gateway.drill.outbox._scenario",
    "STORES": "gateway.drill.outbox._scenario",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "OUTBOX_SCENARIO",
    "STORES",
    "OutboxDrillReport",
    "run_outbox_drill",
]
