"""PrometheusMetrics: what each part of the gateway reports, read from a registry of the
test's own, over real local namespaces (FaultyTransport for the outages)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from durable_queue import DurableQueue
from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import (
    BalanceSettings,
    ConsumerGroupRef,
    PartitionProgress,
    ProcessorSettings,
)
from gateway.errors import MessageRejected
from gateway.geo.sender._buffering import Buffer
from gateway.observability import PrometheusMetrics, render_metrics
from gateway.relay import GeoRelayClient, RelayEndpoint
from gateway.transports import FaultyTransport, LocalNamespace, LocalTransport
from replication import Message, NamespaceRefused, StoreUnavailable
from tests.gateway.conftest import (
    ENTITY,
    Namespaces,
    ReceiverFactory,
    SenderFactory,
    wait_for,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series does not exist."""
    return registry.get_sample_value(name, labels) or 0.0


def test_metrics_share_their_registry_and_registering_twice_does_not_fail(
    registry: CollectorRegistry,
) -> None:
    # Given two PrometheusMetrics on one registry, and two on the global one
    first, second = PrometheusMetrics(registry=registry), PrometheusMetrics(registry=registry)
    PrometheusMetrics()
    PrometheusMetrics()
    assert PrometheusMetrics().registry is REGISTRY
    # When both count a failover
    first.on_failover(from_namespace="primary", to_namespace="secondary", at=0.0)
    second.on_failover(from_namespace="primary", to_namespace="secondary", at=0.0)
    # Then they counted into the same series of their registry, and only there
    assert value(registry, "geogateway_failovers_total", from_namespace="primary",
                 to_namespace="secondary") == 2
    body, content_type = render_metrics(registry)
    assert content_type.startswith("text/plain") and b"geogateway_failovers_total" in body
    assert b"# TYPE geogateway_buffered_messages gauge" in body


async def test_a_passive_failover_is_counted_with_its_sends_and_duration(
    make_sender: SenderFactory, primary: FaultyTransport, registry: CollectorRegistry,
    ns: Namespaces,
) -> None:
    # Given a passive sender with metrics
    sender = make_sender(hooks=PrometheusMetrics(registry=registry))
    await sender.send_batch([Message(b"a"), Message(b"b")])
    # When the primary goes down and the next send fails over
    primary.go_down()
    result = await sender.send(Message(b"c"))
    assert result.failed_over
    # Then the sends are counted by namespace and outcome
    sent = "geogateway_messages_sent_total"
    assert value(registry, sent, entity=ENTITY, namespace="primary", outcome="sent") == 2
    assert value(registry, sent, entity=ENTITY, namespace="secondary", outcome="sent") == 1
    # and the failover, its duration and the outage
    assert value(registry, "geogateway_failovers_total", from_namespace="primary",
                 to_namespace="secondary") == 1
    assert value(registry, "geogateway_failover_duration_seconds_count", entity=ENTITY) == 1
    assert value(registry, "geogateway_send_duration_seconds_count", entity=ENTITY) == 2
    assert value(registry, "geogateway_namespace_up", namespace="primary") == 0
    assert value(registry, "geogateway_namespace_up", namespace="secondary") == 1
    assert value(registry, "geogateway_namespace_outages_total", namespace="primary") == 1


async def test_a_send_refused_for_good_is_counted_as_rejected(
    make_sender: SenderFactory, primary: FaultyTransport, registry: CollectorRegistry,
) -> None:
    sender = make_sender(hooks=PrometheusMetrics(registry=registry))
    primary.fail_next(1, MessageRejected("no such queue"))
    with pytest.raises(MessageRejected):
        await sender.send(Message(b"a"))
    assert value(registry, "geogateway_messages_sent_total", entity=ENTITY, namespace="*",
                 outcome="rejected") == 1


async def test_the_backlog_gauges_follow_the_durable_queue_through_an_outage(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport,
    registry: CollectorRegistry, tmp_path: Path,
) -> None:
    # Given a sender with a durable queue, both namespaces down
    sender = make_sender(hooks=PrometheusMetrics(registry=registry),
                         durable_queue=tmp_path / "queue.db")
    primary.go_down()
    secondary.go_down()
    # When three batches are buffered
    for i in range(3):
        result = await sender.send_batch([Message(f"{i}-a"), Message(f"{i}-b")])
        assert result.buffered == ("*/orders",)
    # Then the gauge holds six, their age is counted, and the counter says six went in
    dest = {"destination": "*/orders"}
    assert value(registry, "geogateway_buffered_messages", **dest) == 6
    assert value(registry, "geogateway_messages_buffered_total", **dest) == 6
    age = value(registry, "geogateway_oldest_buffered_age_seconds", **dest)
    assert age > 0
    await asyncio.sleep(0.01)
    assert value(registry, "geogateway_oldest_buffered_age_seconds", **dest) > age
    # When the namespaces come back and the queue is replayed
    primary.come_up()
    secondary.come_up()
    assert await sender.replay() == 6
    # Then nothing waits, nothing is at risk, and the replay is counted
    assert value(registry, "geogateway_buffered_messages", **dest) == 0
    assert value(registry, "geogateway_oldest_buffered_age_seconds", **dest) == 0
    assert value(registry, "geogateway_messages_replayed_total", **dest) == 6
    assert value(registry, "geogateway_replay_duration_seconds_total", **dest) > 0
    assert value(registry, "geogateway_namespace_up", namespace="primary") == 1


class CountThenPause(DurableQueue):
    """A queue whose count, once armed, lets the test know it was taken and then
    returns it late: what happens meanwhile is not in it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.armed: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def count(self, destination: str | None = None) -> int:
        n = super().count(destination)
        if self.armed is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.armed.set)
            time.sleep(0.3)
        return n


async def test_the_backlog_gauge_counts_a_send_buffered_while_a_replay_stops(
    registry: CollectorRegistry, data_dir: Path, tmp_path: Path,
) -> None:
    # Given a sender's buffer with two messages for both namespaces, counted by the gauge
    transports = {n: LocalTransport(n, data_dir=data_dir) for n in ("primary", "secondary")}
    queue = CountThenPause(tmp_path / "queue.db")
    buffer = Buffer(queue, transports=transports, entity=ENTITY,
                    hooks=[PrometheusMetrics(registry=registry)])
    dest = f"*/{ENTITY}"
    await buffer.put(dest, [Message("a"), Message("b")], cause=None)

    async def refused(batch: Sequence[Message]) -> None:
        raise NamespaceRefused("down", namespace="secondary")

    async def buffer_one_more() -> None:
        assert queue.armed is not None
        await queue.armed.wait()
        await buffer.put(dest, [Message("c")], cause=None)

    # When a replay stops on its first send, and a send is buffered just after the
    # replay counted what remains
    queue.armed, queue.loop = asyncio.Event(), asyncio.get_running_loop()
    async with anyio.create_task_group() as tg:
        tg.start_soon(buffer_one_more)
        replayed, _, stopped_by = await buffer.drain(dest, refused)
    queue.armed = None
    # Then the gauge holds what the file holds: the replay's count did not hide it
    assert replayed == 0 and isinstance(stopped_by, NamespaceRefused)
    assert queue.count(dest) == 3
    assert value(registry, "geogateway_buffered_messages", destination=dest) == 3
    buffer.close()
    queue.close()
    for t in transports.values():
        await t.aclose()


async def test_a_backlog_left_by_an_earlier_run_is_reported_by_the_next_sender(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport,
    registry: CollectorRegistry, tmp_path: Path,
) -> None:
    # Given four messages buffered by a sender that is gone (no metrics then)
    primary.go_down()
    secondary.go_down()
    earlier = make_sender(durable_queue=tmp_path / "queue.db")
    await earlier.send_batch([Message(str(i)) for i in range(4)])
    await earlier.aclose()
    # When a new sender with metrics looks at the queue (a replay while still down)
    sender = make_sender(hooks=PrometheusMetrics(registry=registry),
                         durable_queue=tmp_path / "queue.db")
    report = await sender.replay()
    # Then the gauges show what the earlier run left
    assert report == 0 and report.still_waiting == 4
    assert value(registry, "geogateway_buffered_messages", destination="*/orders") == 4
    assert value(registry, "geogateway_oldest_buffered_age_seconds",
                 destination="*/orders") > 0


async def test_duplicates_and_the_dedup_store_are_measured_on_the_receive_side(
    ns: Namespaces, make_receiver: ReceiverFactory, registry: CollectorRegistry,
) -> None:
    # Given ten messages with a copy in each namespace (active replication)
    messages = [Message(f"m{i}", message_id=f"id-{i}") for i in range(10)]
    await ns.put("primary", *messages)
    await ns.put("secondary", *messages)
    receiver = await make_receiver(hooks=PrometheusMetrics(registry=registry))
    handled: list[str] = []

    class Done:
        def is_set(self) -> bool:
            return len(handled) == 10 and receiver.stats.duplicates_suppressed == 10

    # When the receiver runs until every id was handled and every copy settled
    await receiver.run(lambda m: handled.append(m.message_id), stop=Done())
    # Then the ten second copies are counted, by the namespace they came from
    suppressed = sum(value(registry, "geogateway_duplicates_suppressed_total", namespace=n)
                     for n in ("primary", "secondary"))
    assert suppressed == 10
    # and every call to the dedup store was timed
    assert value(registry, "geogateway_dedup_store_duration_seconds_count",
                 operation="check") >= 1
    assert value(registry, "geogateway_dedup_store_duration_seconds_count",
                 operation="done") >= 1
    # and no label names a MessageId
    body = render_metrics(registry)[0].decode()
    assert not any(f"id-{i}" in body for i in range(10))


async def test_a_namespace_that_refuses_to_be_read_is_flagged(
    ns: Namespaces, data_dir: Path, make_receiver: ReceiverFactory,
    registry: CollectorRegistry,
) -> None:
    # Given a queue that exists on the primary only, namespaces that refuse unknown
    # queues (as Azure does)
    ns.primary.create_queue("only-here")
    async with LocalTransport("primary", data_dir=data_dir, auto_create=False) as p, \
            LocalTransport("secondary", data_dir=data_dir, auto_create=False) as s:
        receiver = await make_receiver(entity="only-here", primary=p, secondary=s,
                                       hooks=PrometheusMetrics(registry=registry))
        # When the receiver has heard from both namespaces
        await receiver.wait_answered(within=10.0)
        assert set(receiver.refused) == {"secondary"}
        await receiver.aclose()
    # Then the secondary is flagged refused and down, the primary not
    assert value(registry, "geogateway_namespace_refused", namespace="secondary") == 1
    assert value(registry, "geogateway_namespace_up", namespace="secondary") == 0
    assert value(registry, "geogateway_namespace_refused", namespace="primary") == 0


HUB = "telemetry"
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)


async def test_partitions_owned_and_checkpoint_lag_per_partition_per_namespace(
    tmp_path: Path, registry: CollectorRegistry,
) -> None:
    # Given 40 events over 4 partitions in both namespaces, and a geo receiver that
    # never checkpoints while it runs (no count, no age): all it reads stays unsaved
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=tmp_path) as admin:
            admin.create_partitioned(HUB, partitions=4)
        async with LocalTransport(name, data_dir=tmp_path) as transport:
            await transport.send(HUB, [Message(f"e{i}", message_id=f"e{i}",
                                               partition_key=str(i % 4)) for i in range(40)])
    settings = ProcessorSettings(poll_wait=0.05, checkpoint_every_events=None,
                                 checkpoint_every_seconds=None)
    geo = AsyncGeoPartitionReceiver(
        primary="local://primary", secondary="local://secondary", entity=HUB,
        data_dir=tmp_path, checkpoint_store=tmp_path / "cp.db",
        dedup_store=tmp_path / "dedup.db", settings=settings, balance=FAST,
        hooks=PrometheusMetrics(registry=registry))
    seen: set[str] = set()

    def lag(namespace: str, partition: str) -> float:
        return value(registry, "geogateway_checkpoint_lag_events", namespace=namespace,
                     entity=HUB, consumer_group="$Default", partition=partition)

    def all_read() -> bool:
        return all(sum(lag(n, p) for p in "0123") == 40 for n in ("primary", "secondary"))

    async with geo:
        # When it has read everything
        await geo.start(lambda event: seen.add(event.message.message_id))
        await wait_for(lambda: len(seen) == 40 and all_read())
        # Then it owns the four partitions of each namespace, all 40 events past their
        # (missing) checkpoints, the oldest of them some time ago
        for namespace in ("primary", "secondary"):
            assert value(registry, "geogateway_partitions_owned", namespace=namespace,
                         entity=HUB, consumer_group="$Default") == 4
            assert max(value(registry, "geogateway_checkpoint_lag_seconds",
                             namespace=namespace, entity=HUB, consumer_group="$Default",
                             partition=p) for p in "0123") > 0
        # When it stops (each partition is checkpointed, then handed over)
        await geo.stop(handover_timeout=0)
    # Then it owns none, and the partitions' lag series are gone
    assert value(registry, "geogateway_partitions_owned", namespace="primary", entity=HUB,
                 consumer_group="$Default") == 0
    assert registry.get_sample_value("geogateway_checkpoint_lag_events", {
        "namespace": "primary", "entity": HUB, "consumer_group": "$Default",
        "partition": "0"}) is None


KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
A = RelayEndpoint(namespace="a.servicebus.windows.net", path="orders", key_name="send", key=KEY)
B = RelayEndpoint(namespace="b.servicebus.windows.net", path="orders", key_name="send", key=KEY)


def test_relay_requests_are_counted_by_namespace_status_and_outcome(
    registry: CollectorRegistry,
) -> None:
    # Given a relay client whose first namespace answers 503 and the other its listener
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == A.namespace:
            return httpx.Response(503)
        return httpx.Response(200, headers={"Via": "1.1 listener"})

    with GeoRelayClient(A, B, transport=httpx.MockTransport(answer), randomize=False,
                        sleep=lambda s: None,
                        hooks=[PrometheusMetrics(registry=registry)]) as client:
        # When two requests go through it (the first fails over)
        assert client.post(content=b"1").status_code == 200
        assert client.post(content=b"2").status_code == 200
    # Then each attempt is counted, and the failover
    relay = "geogateway_relay_requests_total"
    assert value(registry, relay, namespace=A.namespace, status="503",
                 outcome="unavailable") == 1
    assert value(registry, relay, namespace=B.namespace, status="200", outcome="answered") == 2
    assert value(registry, "geogateway_failovers_total", from_namespace=A.namespace,
                 to_namespace=B.namespace) == 1


def test_a_plain_partition_processor_reports_through_its_callback(
    registry: CollectorRegistry,
) -> None:
    # Given the callback a plain AsyncPartitionProcessor takes (on_progress)
    metrics = PrometheusMetrics(registry=registry)
    group = ConsumerGroupRef(fully_qualified_namespace="ns1", eventhub_name=HUB,
                             consumer_group="$Default")
    labels = {"namespace": "ns1", "entity": HUB, "consumer_group": "$Default"}
    # When it reports a partition read past its checkpoint, then handed over
    metrics.partition_progress(PartitionProgress(group=group, partition_id="3", owned=True,
                                                 lag_events=7, oldest_unsaved_at=1.0))
    assert value(registry, "geogateway_partitions_owned", **labels) == 1
    assert value(registry, "geogateway_checkpoint_lag_events", partition="3", **labels) == 7
    assert value(registry, "geogateway_checkpoint_lag_seconds", partition="3", **labels) > 1
    metrics.partition_progress(PartitionProgress(group=group, partition_id="3", owned=False,
                                                 lag_events=0, oldest_unsaved_at=None))
    # Then the gauges follow
    assert value(registry, "geogateway_partitions_owned", **labels) == 0


def test_a_shared_store_outage_is_counted_and_its_state_kept() -> None:
    # Given metrics on a registry of their own
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    store = "dedup store at db:5432/orders as app"
    # When the store goes away, comes back and goes away again
    metrics.on_store_down(store=store, error=StoreUnavailable("away"))
    metrics.on_store_up(store=store)
    metrics.on_store_down(store=store, error=StoreUnavailable("away"))
    # Then two outages are counted, and it is down now
    assert value(registry, "geogateway_store_outages_total", store=store) == 2
    assert value(registry, "geogateway_store_up", store=store) == 0
