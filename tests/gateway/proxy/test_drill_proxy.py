"""``--transport proxy``: the queue drill with an azure-servicebus client on the far
side of a proxy."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.drill import run_drill
from gateway.transports.base import ReceivedMessage
from gateway.transports.servicebus import ServiceBusTransport
from replication import ConfigError, MessageRejected

pytestmark = pytest.mark.anyio


async def test_the_primary_outage_drill_through_the_proxy_loses_nothing(tmp_path: Path) -> None:
    # Given the default queue scenario (the primary goes down, then comes back)
    # When its messages go through a proxy
    report = await run_drill(scenario="primary-outage", messages=60, batch_size=5,
                             data_dir=tmp_path, settle_timeout=20, transport="proxy")
    # Then every message was delivered once, and the sends failed over
    assert (report.sent, report.lost, report.duplicates_delivered) == (60, 0, 0), report
    assert report.passed and report.transport == "proxy"
    assert report.role_swaps >= 1 and report.failover_seconds


async def test_the_proxy_does_not_carry_consumer_or_fleet_drills(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="proxy"):
        await run_drill(scenario="consumer-crash", transport="proxy", data_dir=tmp_path)


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_the_sessions_drill_through_the_proxy_keeps_each_sessions_order(
        tmp_path: Path, mode: str) -> None:
    # Given the sessions scenario (the primary down from 30% to 60% of the messages, the
    # client's session receivers starting with the outage)
    # When the client sends and receives its sessions through a proxy
    report = await run_drill(scenario="sessions", mode=mode, messages=40, batch_size=4,
                             data_dir=tmp_path, settle_timeout=20, transport="proxy")
    # Then every session came whole, once, in the sender's order
    assert report.transport == "proxy", report
    assert (report.sent, report.lost, report.duplicates_delivered) == (40, 0, 0), report
    assert report.out_of_order == 0 and report.per_session, report
    assert report.passed


QUEUE_SCENARIOS = ("primary-outage", "both-down", "flapping", "lost-replies", "hang")


@pytest.mark.parametrize("mode", ["passive", "active"])
@pytest.mark.parametrize("scenario", QUEUE_SCENARIOS)
async def test_every_queue_scenario_through_the_proxy_loses_nothing(
        tmp_path: Path, scenario: str, mode: str) -> None:
    # Given a queue scenario in one replication mode
    # When its messages go through a proxy (a small run)
    report = await run_drill(scenario=scenario, mode=mode, messages=30, batch_size=5,
                             data_dir=tmp_path, settle_timeout=20, transport="proxy")
    # Then every message was delivered once
    assert (report.sent, report.lost, report.duplicates_delivered) == (30, 0, 0), report
    assert report.passed and report.transport == "proxy", report


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_the_topic_drill_through_the_proxy_reaches_each_subscription_once(
        tmp_path: Path, mode: str) -> None:
    # Given the primary outage over a topic with two subscriptions
    # When the client sends to the topic and receives its subscriptions through a proxy
    report = await run_drill(scenario="primary-outage", mode=mode, messages=30, batch_size=5,
                             data_dir=tmp_path, settle_timeout=20, transport="proxy",
                             entity="topic")
    # Then each subscription got every message once
    assert report.entity == "topic" and report.transport == "proxy", report
    assert (report.sent, report.lost, report.duplicates_delivered) == (30, 0, 0), report
    assert report.subscriptions and all(
        s["delivered"] == 30 and s["lost"] == 0 for s in report.subscriptions.values()), report
    assert report.passed


async def test_a_settlement_the_client_sees_fail_is_not_the_end_of_the_drill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a client whose first complete fails before it is sent (its lock lost, as
    # the SDK says of a lock that expired while it was handled)
    complete = ServiceBusTransport.complete
    failed: list[str] = []

    async def first_fails(self: ServiceBusTransport, received: ReceivedMessage) -> None:
        if not failed:
            failed.append(received.message_id)
            raise MessageRejected("lock lost (test)")
        await complete(self, received)

    monkeypatch.setattr(ServiceBusTransport, "complete", first_fails)
    # When the queue drill runs through a proxy
    report = await run_drill(scenario="primary-outage", messages=20, batch_size=5,
                             data_dir=tmp_path, settle_timeout=20, transport="proxy")
    # Then it goes on to the end and loses nothing; the message left unsettled comes
    # again once its 5 s lock expired, if the drill still runs then, and the report
    # counts that second delivery
    assert failed and "drill: lock lost (test)" in caplog.text
    assert (report.sent, report.delivered, report.lost) == (20, 20, 0), report
    assert report.duplicates_delivered in (0, 1), report
    assert report.passed == (report.duplicates_delivered == 0)
