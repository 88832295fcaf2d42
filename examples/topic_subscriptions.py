"""A topic with two subscriptions in both namespaces: a SQL rule selects the big orders
for one, the other takes everything; receivers of both share one dedup store, and each
subscription's handler sees each order once (active replication: two copies of each).

Run: python examples/topic_subscriptions.py
"""

import tempfile
from pathlib import Path

from gateway import GeoReceiver, GeoSender, Message, ReceivedMessage
from gateway.transports import LocalNamespace, Rule, SqlFilter, SqlRuleAction

with tempfile.TemporaryDirectory() as data_dir:
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data_dir) as ns:
            ns.create_topic("orders")
            ns.create_subscription("orders", "audit")  # every message ($Default rule)
            ns.create_subscription("orders", "big", rules=[Rule(
                name="big", filter=SqlFilter("quantity >= 10"),
                action=SqlRuleAction("SET priority = 'high'"))])

    with GeoSender(primary="local://primary", secondary="local://secondary",
                   entity="orders", mode="active", data_dir=data_dir,
                   state_dir=data_dir) as sender:
        for i, quantity in enumerate((1, 12, 3, 40)):
            sender.send(Message(f"order {i}", message_id=f"order-{i}",
                                properties={"quantity": quantity}))

    def handled(subscription: str) -> list[str]:
        """The ids a subscription's receiver handled (``!``: the rule's action set priority)."""
        seen: list[str] = []

        def handle(message: ReceivedMessage) -> None:
            mark = "!" if "priority" in message.message.properties else ""
            seen.append(message.message_id + mark)

        with GeoReceiver(primary="local://primary", secondary="local://secondary",
                         entity=f"orders/Subscriptions/{subscription}",
                         dedup_store=Path(data_dir) / "dedup.db", data_dir=data_dir) as receiver:
            receiver.run(handle, idle_timeout=1.0)
        return sorted(seen)

    print("audit:", handled("audit"))
    print("big:", handled("big"))
