"""The queue drills over a topic (``--entity topic``): a sender on a topic, a receiver on
each of two subscriptions sharing one dedup store; each subscription must get every
message once, over the embedded namespaces and the Service Bus SDK on the emulator."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.drill import Scenario, run_drill
from gateway.drill._topics import TopicDrill
from replication import ConfigError, Mode
from tests.gateway.cli.cli_support import Run, expect_one_line_error

pytestmark = [
    pytest.mark.anyio,
    # As in test_drill_transports: a socket the SDK leaves to the garbage collector now
    # and then is not what these tests judge.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_here() -> Iterator[None]:
    yield
    gc.collect()


def _check(report, messages: int) -> None:
    assert report.entity == "topic"
    assert report.sent == report.delivered == messages, report
    assert report.lost == 0 and report.duplicates_delivered == 0 and report.passed, report
    assert set(report.subscriptions) == {"a", "b"}
    for counts in report.subscriptions.values():
        assert (counts["delivered"], counts["lost"], counts["duplicates_delivered"]) == (
            messages, 0, 0), report.subscriptions
    assert report.replayed == report.buffered


@pytest.mark.parametrize(("scenario", "mode"), [
    (Scenario.PRIMARY_OUTAGE, "passive"), (Scenario.BOTH_DOWN, "active"),
    (Scenario.FLAPPING, "passive"), (Scenario.LOST_REPLIES, "active"),
    (Scenario.HANG, "passive"),
])
async def test_every_queue_scenario_over_a_topic_on_the_local_namespaces(
        scenario: Scenario, mode: str, tmp_path: Path) -> None:
    report = await run_drill(scenario=scenario, mode=mode, messages=80, entity="topic",
                             data_dir=tmp_path, settle_timeout=30.0)
    _check(report, 80)
    if mode == "active":  # both namespaces had copies: the second one of each was dropped
        assert all(s["duplicates_suppressed"] > 0 for s in report.subscriptions.values())


@pytest.mark.parametrize(("scenario", "mode"), [
    (Scenario.PRIMARY_OUTAGE, "passive"), (Scenario.BOTH_DOWN, "active"),
])
async def test_a_topic_drill_over_the_service_bus_sdk(scenario: Scenario, mode: str,
                                                      tmp_path: Path) -> None:
    report = await run_drill(scenario=scenario, mode=mode, messages=80, entity="topic",
                             transport="servicebus", data_dir=tmp_path, settle_timeout=30.0)
    assert report.transport == "servicebus"
    _check(report, 80)


def test_a_subscription_that_misses_a_message_fails_the_drill(tmp_path: Path) -> None:
    # Given a topic drill where subscription b got one message fewer, and a one twice
    drill = TopicDrill(Mode.PASSIVE, Scenario.PRIMARY_OUTAGE, 3, 1, tmp_path, None, "local")
    drill.sent_ids = ["m0", "m1", "m2"]
    drill.by_subscription["a"].update(["m0", "m1", "m2", "m2"])
    drill.by_subscription["b"].update(["m0", "m1"])
    # When its report is made
    report = drill._report(0, None, 1.0)
    # Then each subscription says what went wrong, and the drill fails
    assert report.subscriptions["a"]["duplicates_delivered"] == 1
    assert report.subscriptions["b"]["lost"] == 1
    assert (report.delivered, report.lost, report.duplicates_delivered) == (2, 1, 1)
    assert not report.passed


async def test_topics_are_refused_where_they_cannot_run(dirs: dict[str, Path],
                                                        run: Run) -> None:
    with pytest.raises(ConfigError, match="local or servicebus"):
        await run_drill(entity="topic", transport="eventhubs", messages=5)
    with pytest.raises(ConfigError, match="unknown entity"):
        await run_drill(entity="hub", messages=5)
    expect_one_line_error(run("drill", "--entity", "topic", "--transport", "eventhubs"), 2,
                          "--entity topic")


def test_the_command_reports_each_subscription(dirs: dict[str, Path], run: Run) -> None:
    code, out, err = run("drill", "--entity", "topic", "--messages", "40", "--json", "-",
                         "--data-dir", str(dirs["tmp"]))
    assert code == 0, err
    report = json.loads(out)
    assert report["entity"] == "topic" and report["passed"]
    assert {k: v["delivered"] for k, v in report["subscriptions"].items()} == {"a": 40, "b": 40}
    code, out, err = run("drill", "--entity", "topic", "--messages", "40",
                         "--data-dir", str(dirs["tmp"]))
    assert code == 0, err
    assert "subscription a" in out and "subscription b" in out and "topic" in out
