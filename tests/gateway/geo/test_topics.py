"""GeoSender to a topic in both modes, GeoReceivers on its subscriptions: each subscription
gets every message once, its de-duplication kept apart from the other's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gateway import GeoReceiver, GeoSender
from gateway.aio import AsyncGeoReceiver, AsyncGeoSender
from gateway.transports import LocalNamespace, ReceivedMessage, Rule, SqlFilter
from replication import InMemoryDedupStore, Message, Verdict, scoped

pytestmark = pytest.mark.anyio

TOPIC = "orders"
SUBS = ("audit", "billing")


@pytest.fixture
def topic(data_dir: Path) -> None:
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data_dir) as ns:
            ns.create_topic(TOPIC)
            ns.create_subscription(TOPIC, "audit")
            ns.create_subscription(TOPIC, "billing", rules=[
                Rule(name="paid", filter=SqlFilter("amount > 0"))])


def receiver(sub: str, data_dir: Path, dedup: Path) -> AsyncGeoReceiver:
    return AsyncGeoReceiver(primary="local://primary", secondary="local://secondary",
                            entity=f"{TOPIC}/Subscriptions/{sub}", dedup_store=dedup,
                            data_dir=data_dir, poll_wait=0.05)


@pytest.mark.parametrize("mode", ["passive", "active"])
@pytest.mark.usefixtures("topic")
async def test_each_subscription_gets_every_message_once_through_a_failover(
        mode: str, data_dir: Path, state_dir: Path, tmp_path: Path) -> None:
    # Given a topic in both namespaces, and a receiver per subscription, both sharing
    # ONE dedup store file
    dedup = tmp_path / "dedup.db"
    got: dict[str, Counter[str]] = {sub: Counter() for sub in SUBS}
    sent: list[str] = []
    copies = 0  # how many namespaces took each message, added up
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity=TOPIC, mode=mode, data_dir=data_dir,
                              state_dir=state_dir, recovery=False) as sender, \
            receiver("audit", data_dir, dedup) as audit, \
            receiver("billing", data_dir, dedup) as billing:
        # When messages are sent to the topic while the primary goes down and comes back
        for i in range(30):
            if i == 10:
                LocalNamespace("primary", data_dir=data_dir).down()
            if i == 20:
                LocalNamespace("primary", data_dir=data_dir).up()
            result = await sender.send(Message(f"{i}", message_id=f"m{i}",
                                               properties={"amount": i % 2}))
            sent.append(f"m{i}")
            copies += len(result.namespaces)

        async def take(r: AsyncGeoReceiver, sub: str) -> None:
            for m in await r.receive(max_messages=50, max_wait=0.1):
                got[sub][m.message_id] += 1
                await r.complete(m)

        paid = {f"m{i}" for i in range(30) if i % 2}

        async def done() -> bool:
            await take(audit, "audit")
            await take(billing, "billing")
            # Every copy in audit accounted for: delivered, or suppressed as a duplicate
            stats = audit.stats
            return (stats.delivered + stats.duplicates_suppressed >= copies
                    and set(got["billing"]) == paid)

        for _ in range(300):
            if await done():
                break
        # Then audit got every message and billing every paid one, each exactly once,
        # although the same MessageIds went through one dedup store
        assert set(got["audit"]) == set(sent) and set(got["billing"]) == paid
        assert max(got["audit"].values()) == max(got["billing"].values()) == 1
        # (active: both namespaces took most messages; the second copy was suppressed)
        assert audit.stats.duplicates_suppressed == copies - 30
        assert copies > 30 if mode == "active" else copies == 30


@pytest.mark.usefixtures("topic")
def test_the_sync_api_over_a_topic(data_dir: Path, state_dir: Path, tmp_path: Path) -> None:
    with GeoSender(primary="local://primary", secondary="local://secondary", entity=TOPIC,
                   data_dir=data_dir, state_dir=state_dir) as sender:
        sender.send_batch([Message("a", message_id="a", properties={"amount": 1}),
                           Message("b", message_id="b", properties={"amount": 0})])
    seen: list[str] = []

    def handle(message: ReceivedMessage) -> None:
        seen.append(message.message_id)

    with GeoReceiver(primary="local://primary", secondary="local://secondary",
                     entity=f"{TOPIC}/subscriptions/billing", dedup_store=tmp_path / "d.db",
                     data_dir=data_dir) as r:
        r.run(handle, idle_timeout=0.5)
    assert seen == ["a"]


def test_a_scoped_store_keeps_one_window_per_subscription() -> None:
    # Given one store, seen by the receivers of two subscriptions
    store = InMemoryDedupStore()
    a, b = scoped(store, "orders/subscriptions/a"), scoped(store, "orders/subscriptions/b")
    # When subscription a handled m1
    assert a.claim(["m1"], owner="x", now=0, lease=60) == [Verdict.DELIVER]
    a.finish("m1", owner="x", succeeded=True, now=1)
    # Then b's copy of m1 is still to deliver, and a's second copy is a duplicate
    assert b.claim(["m1"], owner="y", now=2, lease=60) == [Verdict.DELIVER]
    assert a.claim(["m1"], owner="z", now=2, lease=60) == [Verdict.DUPLICATE]
    # Without a scope the two would be one window: b's copy would be dropped
    assert store.claim(["orders/subscriptions/a|m1"], owner="w", now=3, lease=60) == [
        Verdict.DUPLICATE]
    with pytest.raises(ValueError, match=r"without '\|'"):
        scoped(store, "a|b")
