"""``run_drill``: every scenario in both modes, small counts, and the report itself.

Each drill runs in a few seconds on the embedded namespaces. What every drill must
show: all messages sent and delivered, nothing lost, no duplicate delivered. On top of
that, each scenario has facts that hold whatever the timing; the ones that only hold
most of the time (e.g. that a lost reply produced a duplicate copy that the receiver
then suppressed before the drill ended) are not asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.drill import DrillReport, Scenario, run_drill
from replication import ConfigError

MESSAGES = 400

pytestmark = pytest.mark.anyio


async def drill(mode: str, scenario: Scenario, tmp_path: Path, batch_size: int = 1,
                messages: int = MESSAGES) -> DrillReport:
    phases: set[str] = set()
    report = await run_drill(
        mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
        data_dir=tmp_path / "drill", settle_timeout=30.0,
        progress=lambda phase, done, total: phases.add(phase),
    )
    assert {"sent", "delivered", "replaying"} <= phases
    assert report.scenario == scenario.value and report.mode == mode
    assert report.messages == report.sent == messages
    assert report.delivered == messages, report
    assert report.lost == 0, report
    assert report.duplicates_delivered == 0, report
    assert report.passed
    assert report.replayed == report.buffered, report
    assert report.elapsed_seconds > 0
    data = report.to_dict()
    assert data["passed"] is True and data["failover_p99_seconds"] == report.failover_p99
    return report


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_primary_outage(mode: str, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.PRIMARY_OUTAGE, tmp_path)
    assert report.failover_seconds, "an outage with the other namespace up is timed"
    assert max(report.failover_seconds) < 1.0, report.failover_seconds
    if mode == "passive":
        assert report.failovers >= 1
        assert report.buffered == 0  # the secondary was up all along
        assert report.replay_seconds is None
    else:
        assert report.buffered > 0  # the primary's copies waited for it
        assert report.replay_seconds is not None


@pytest.mark.parametrize("mode", ["passive", "active"])
@pytest.mark.parametrize("batch_size", [1, 5])
async def test_both_down(mode: str, batch_size: int, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.BOTH_DOWN, tmp_path, batch_size=batch_size)
    assert report.buffered > 0
    assert report.replayed == report.buffered
    assert report.replay_seconds is not None and report.replay_seconds >= 0
    if mode == "passive":
        assert report.failovers >= 1  # between the primary's and the secondary's outage


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_flapping(mode: str, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.FLAPPING, tmp_path)
    assert report.failover_seconds
    assert max(report.failover_seconds) < 1.0
    if mode == "passive":
        assert report.failovers >= 1
    else:
        assert report.buffered > 0


@pytest.mark.parametrize("mode", ["passive", "active"])
@pytest.mark.parametrize("batch_size", [1, 5])
async def test_lost_replies(mode: str, batch_size: int, tmp_path: Path) -> None:
    report = await drill(mode, Scenario.LOST_REPLIES, tmp_path, batch_size=batch_size)
    # Nothing went down, so no failover clock started.
    assert report.failover_seconds == []
    assert report.failover_p99 is None
    # A lost reply means the copy landed and is sent again; drill() checked that each
    # MessageId was still delivered once. (That a suppressed duplicate shows up in the
    # count before the drill ends is likely, not certain, so it is not asserted.)


async def test_drill_keeps_its_files_in_data_dir(tmp_path: Path) -> None:
    await drill("passive", Scenario.PRIMARY_OUTAGE, tmp_path, messages=50)
    names = {p.name for p in (tmp_path / "drill").iterdir()}
    assert {"namespaces", "buffer.db", "dedup.db"} <= names


async def test_drill_accepts_strings_and_rejects_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="unknown scenario 'meteor'"):
        await run_drill(scenario="meteor", messages=10)
    with pytest.raises(ConfigError):
        await run_drill(mode="sideways", messages=10)
    with pytest.raises(ValueError):
        await run_drill(messages=0)
    with pytest.raises(ValueError):
        await run_drill(messages=10, batch_size=0)


def report(**overrides: object) -> DrillReport:
    fields: dict[str, object] = {
        "scenario": "primary-outage", "mode": "passive", "messages": 10, "sent": 10,
        "delivered": 10, "lost": 0, "duplicates_delivered": 0, "duplicates_suppressed": 0,
        "buffered": 0, "replayed": 0, "failovers": 1, "failover_seconds": [0.05],
    }
    fields.update(overrides)
    return DrillReport(**fields)  # type: ignore[arg-type]


def test_report_passed() -> None:
    assert report().passed
    assert not report(lost=1, delivered=9).passed
    assert not report(duplicates_delivered=1).passed
    assert report(duplicates_suppressed=5).passed  # suppressed duplicates are fine
    data = report(lost=2).to_dict()
    assert data["passed"] is False and data["lost"] == 2


def test_report_failover_p99() -> None:
    assert report(failover_seconds=[]).failover_p99 is None
    assert report(failover_seconds=[0.2]).failover_p99 == 0.2
    many = [i / 100 for i in range(1, 101)]
    p99 = report(failover_seconds=many).failover_p99
    assert p99 is not None and 0.98 <= p99 <= 1.0
