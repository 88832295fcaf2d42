"""What the outbox drill and its application process agree on: destinations, table.

A module of its own so that the drill (:mod:`gateway.drill.outbox._scenario`) need not import
the application's module: ``python -m gateway.drill.outbox._app`` loads the package
``gateway.drill`` first, which must not have loaded that module already.
"""

from __future__ import annotations

__all__ = ["DESTINATIONS", "ORDERS_TABLE"]

#: The destinations (queues) the drill's orders go to, in turn.
DESTINATIONS = ("drill-orders-a", "drill-orders-b")
#: The application's table of committed orders (message_id, entity, seq, at).
ORDERS_TABLE = "drill_orders"
