"""The report of the outbox drill (:func:`gateway.drill.run_outbox_drill`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["OutboxDrillReport"]


@dataclass(frozen=True, kw_only=True)
class OutboxDrillReport:
    """What the outbox drill saw. It passes when every committed order's message was
    delivered (``lost`` 0), no rolled-back order's was (``rolled_back_delivered`` 0),
    no message had its effect twice (``duplicate_effects`` 0), each destination's
    messages took effect in the order they were committed (``out_of_order`` 0), nothing
    was left in the outbox, and the dispatchers were killed as planned.

    ``copies_removed`` counts the copies the receiver removed by MessageId: messages a killed
    dispatcher had sent without deleting them, sent again (and, in active mode, the
    second namespace's copy of each message).
    """

    store: str
    mode: str
    orders: int
    committed: int
    rolled_back: int
    delivered: int
    lost: int
    rolled_back_delivered: int
    duplicate_effects: int
    copies_removed: int
    out_of_order: int
    left_in_outbox: int
    dispatcher_kills: int
    planned_kills: int
    dispatchers: int = 2
    elapsed_seconds: float = 0.0
    state_dir: str | None = None

    @property
    def passed(self) -> bool:
        return (self.lost == 0 and self.rolled_back_delivered == 0
                and self.duplicate_effects == 0 and self.out_of_order == 0
                and self.left_in_outbox == 0 and self.committed > 0
                and self.dispatcher_kills >= self.planned_kills)

    def failures(self) -> list[str]:
        """What made the drill fail, one phrase each (empty when it passed)."""
        why = [f"{n} {what}" for n, what in (
            (self.lost, "committed orders not delivered"),
            (self.rolled_back_delivered, "rolled-back orders delivered"),
            (self.duplicate_effects, "duplicate effects"),
            (self.out_of_order, "out of order"),
            (self.left_in_outbox, "rows left in the outbox")) if n]
        if self.committed == 0:
            why.append("no order was committed")
        if self.dispatcher_kills < self.planned_kills:
            why.append(f"{self.dispatcher_kills} of {self.planned_kills} kills made")
        return why

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["failures"] = self.failures()
        return data
