"""The sessions drill: many sessions interleaved, the primary down and back mid-stream,
every session in the sender's order; over the embedded namespaces and over the
Service Bus SDK against the emulator. A plain geo receiver in the same drill does
reorder, so the drill's order check can fail."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.drill import Scenario, run_drill
from gateway.drill._common import new_state_dir
from gateway.drill._sessions import run_sessions_drill
from replication import ConfigError, Mode
from tests.gateway.cli.cli_support import run_process

pytestmark = [
    pytest.mark.anyio,
    # As in test_drill_transports: SDK sockets the emulator force-closes while the SDK
    # closes them too are sometimes left to the garbage collector.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_here() -> Iterator[None]:
    yield
    gc.collect()


@pytest.mark.parametrize(("transport", "mode", "messages"), [
    ("local", "passive", 160), ("local", "active", 160),
    ("servicebus", "passive", 48), ("servicebus", "active", 48),
])
async def test_every_session_comes_out_in_order(transport: str, mode: str, messages: int,
                                                tmp_path: Path) -> None:
    report = await run_drill(scenario=Scenario.SESSIONS, mode=mode, transport=transport,
                             messages=messages, data_dir=tmp_path, settle_timeout=30.0,
                             keep_state=True)
    assert report.passed, report
    assert report.sent == report.delivered == messages
    assert (report.lost, report.duplicates_delivered, report.out_of_order) == (0, 0, 0)
    assert report.failovers == 1
    # and the per-session rows add up
    assert len(report.per_session) == 8
    assert sum(row["delivered"] for row in report.per_session.values()) == messages
    assert all(row["out_of_order"] == 0 for row in report.per_session.values())
    if mode == "active":
        assert report.buffered > 0 and report.replayed == report.buffered
        # (the second copies read before the drill stops; the others wait in the queue)
        assert report.duplicates_suppressed > 0


async def test_a_plain_geo_receiver_in_the_same_drill_delivers_out_of_order(
        tmp_path: Path) -> None:
    report = await run_sessions_drill(
        mode=Mode.PASSIVE, messages=240, batch_size=1, root=new_state_dir(tmp_path),
        settle_timeout=30.0, progress=None, receiver="plain")
    assert (report.lost, report.duplicates_delivered) == (0, 0)
    assert report.out_of_order > 0 and not report.passed
    assert sum(r["out_of_order"] for r in report.per_session.values()) == report.out_of_order


async def test_sessions_are_not_an_event_hubs_drill(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Service Bus sessions"):
        await run_drill(scenario="sessions", transport="eventhubs", data_dir=tmp_path)


def test_the_cli_shows_each_session(tmp_path: Path) -> None:
    code, out, err = run_process("drill", "--scenario", "sessions", "--messages", "80",
                                 "--data-dir", str(tmp_path), "--json",
                                 str(tmp_path / "r.json"), cwd=tmp_path, timeout=120)
    assert code == 0, err
    for words in ("out of order", "s000", "s007", "PASS"):
        assert words in out, out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["out_of_order"] == 0 and report["passed"]
    assert report["per_session"]["s003"]["sent"] == 10
