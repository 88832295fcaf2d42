"""The transactional outbox: an order row and its message commit together, or neither.

The application's database here is a SQLite file; the outbox tables live in it. A
dispatcher (a task of the application here; `geogateway outbox run` in a process of its
own works the same) sends what committed, in order, and deletes each row once sent.

Run: python examples/outbox_orders.py
"""

import sqlite3
import tempfile
from pathlib import Path

from gateway import GeoReceiver, GeoSender, Message, OutboxDispatcher, SqliteOutbox

with tempfile.TemporaryDirectory() as tmp:
    app_db = Path(tmp) / "shop.db"
    outbox = SqliteOutbox(app_db, entity="orders")
    conn = sqlite3.connect(app_db)
    conn.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)")

    # Each order: the row and its message in one transaction of the application's.
    for order_id, total in [("order-1", 30), ("order-2", 12)]:
        with conn:
            conn.execute("INSERT INTO orders VALUES (?, ?)", (order_id, total))
            outbox.add(conn, Message(f"{order_id}: {total}", message_id=order_id))
    try:
        with conn:  # this one fails after its add: neither the row nor the message stays
            conn.execute("INSERT INTO orders VALUES (?, ?)", ("order-3", 99))
            outbox.add(conn, Message("order-3: 99", message_id="order-3"))
            raise ValueError("card declined")
    except ValueError:
        pass
    print("waiting in the outbox:", outbox.stats().waiting)

    with GeoSender(primary="local://primary", secondary="local://secondary",
                   entity="orders", data_dir=tmp, state_dir=tmp) as sender, \
            OutboxDispatcher(outbox, sender) as dispatcher:
        while dispatcher.dispatch_once():
            pass
        print("sent:", dispatcher.stats.sent, "left:", outbox.stats().waiting)

    received = []
    with GeoReceiver(primary="local://primary", secondary="local://secondary",
                     entity="orders", dedup_store=Path(tmp) / "dedup.db",
                     data_dir=tmp) as receiver:
        receiver.run(lambda m: received.append(m.message_id), idle_timeout=1.0)
    print("received:", received)
    conn.close()
    outbox.close()
