"""The consumer drills: receiver processes SIGKILLed, added and removed mid-run.

Each drill runs real worker processes (``python -m gateway.drill.consumers._worker``) on the
embedded namespaces and must show: every message delivered, none lost, no duplicate
delivered (a second delivery of an id would be counted in ``drill_delivered``).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from gateway.drill import DrillReport, Scenario, run_drill
from gateway.drill._timeline import REPLAYED
from tests.gateway.cli.cli_support import ok_json, run_process
from tests.gateway.drill.drill_support import kill_drill_midway

MESSAGES = 300

pytestmark = pytest.mark.anyio


async def drill(scenario: Scenario, tmp_path: Path, **kw: object) -> tuple[DrillReport, Path]:
    """The report and the kept state folder of one drill that must pass."""
    phases: set[str] = set()
    report = await run_drill(
        scenario=scenario, messages=MESSAGES, data_dir=tmp_path, settle_timeout=25.0,
        progress=lambda phase, done, total: phases.add(phase), keep_state=True,
        **kw,  # type: ignore[arg-type]
    )
    assert report.state_dir is not None
    assert {"sent", "delivered"} <= phases
    assert report.scenario == scenario.value
    assert report.sent == report.messages == MESSAGES
    assert report.lost == 0, report
    assert report.delivered == MESSAGES, report
    assert report.duplicates_delivered == 0, report
    assert report.passed
    return report, Path(report.state_dir)


def stats(root: Path) -> dict[str, dict[str, int]]:
    """The counters each gracefully stopped worker wrote on exit."""
    return {p.stem: json.loads(p.read_text()) for p in (root / "stats").glob("*.json")}


def deliveries(root: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(root / "dedup.db")) as conn:
        return dict(conn.execute("SELECT message_id, count FROM drill_delivered"))


async def test_consumer_crash(tmp_path: Path) -> None:
    # Given three workers consuming both namespaces' copies (active mode by default)
    # When w2 is SIGKILLed at 40% delivered
    report, root = await drill(Scenario.CONSUMER_CRASH, tmp_path)
    # Then (drill() checked) nothing was lost and each id was delivered once
    assert report.mode == "active"
    assert len(deliveries(root)) == MESSAGES
    assert set(deliveries(root).values()) == {1}
    # And w2 really died without a graceful stop, while w1 and w3 stopped gracefully
    assert set(stats(root)) == {"w1", "w3"}
    # And the survivors suppressed copies (each id was sent to both namespaces)
    assert report.duplicates_suppressed > 0
    # And its timeline (the picture's) has every delivery by its worker, both copies of
    # every send, and the kill as a moment
    timeline = report.timeline
    assert timeline is not None and timeline.delivered_label == "delivered by"
    assert sum(len(t) for t in timeline.delivered.values()) == MESSAGES
    assert set(timeline.delivered) <= {"w1", "w2", "w3"}
    # (a copy a busy namespace did not take within its deadline is buffered instead)
    assert sum(len(t) for ns, t in timeline.sent.items() if ns != REPLAYED) == 2 * MESSAGES
    assert [(a, w) for _, a, w in timeline.events()] == [("kill", "w2")]
    assert len(timeline.duplicates) > 0
    # And the report names the worker killed, the partitions it left, and how long
    # they went unread: w2's partitions are taken once its 2 s heartbeat expired
    (killed,) = report.worker_actions
    assert (killed.worker, killed.action) == ("w2", "killed") and killed.at > 0
    moved = report.partitions_moved
    assert "w2" in {m.from_worker for m in moved}, moved
    assert {m.to_worker for m in moved} <= {"w1", "w3"}
    assert all(m.at >= killed.at for m in moved)
    longest = report.longest_unread
    assert longest is not None and 1.0 <= (longest.unread_seconds or 0) < 20, moved
    # And its rows are the consumer drill's own: no failover rows, no "-"
    rows = dict(report.rows())
    assert rows["worker killed"] == f"w2 at {killed.at:.2f} s"
    assert rows["partitions moved"].startswith(f"{len(moved)} (")
    assert rows["longest unread"].startswith(f"{longest.unread_seconds:.3f} s (")
    assert not {"failovers", "failover time", "role swaps"} & set(rows), rows
    assert "-" not in rows.values() and ("replay time" in rows) == (report.replayed > 0)
    # And the JSON carries the same facts
    data = report.to_dict()
    assert data["worker_actions"] == [{"worker": "w2", "action": "killed", "at": killed.at}]
    assert len(data["partitions_moved"]) == len(moved)
    assert data["longest_unread_seconds"] == longest.unread_seconds


async def test_consumer_scale(tmp_path: Path) -> None:
    # Given two workers; When a third joins at 30% and w1 leaves (SIGTERM) at 60%
    report, root = await drill(Scenario.CONSUMER_SCALE, tmp_path)
    # Then every worker, w1 included, stopped gracefully and wrote its counters
    assert set(stats(root)) == {"w1", "w2", "w3"}
    # And every second copy was suppressed: all workers' counters are in the report
    assert report.duplicates_suppressed == MESSAGES
    assert set(deliveries(root).values()) == {1}
    # And the report says who joined and who left, and what moved after each: w1's
    # partitions at least, handed over to the others (w3 may or may not have taken
    # some from w1 and w2 before that, as the balancing's timing goes)
    assert [(a.worker, a.action) for a in report.worker_actions] == [
        ("w3", "started"), ("w1", "stopped")]
    moves = report.partitions_moved
    assert "w1" in {m.from_worker for m in moves}, moves
    stopped = report.worker_actions[1].at
    assert {m.to_worker for m in moves if m.from_worker == "w1" and m.at >= stopped} <= {
        "w2", "w3"}, moves
    rows = dict(report.rows())
    assert {"worker started", "worker stopped", "partitions moved"} <= set(rows), rows


def test_cli_consumer_scale_passive(tmp_path: Path) -> None:
    # Given --mode passive: one copy per message, in whichever namespace took it
    report = ok_json(run_process("drill", "--scenario", "consumer-scale", "--messages", "200",
                                 "--mode", "passive", "--json", "-", cwd=tmp_path))
    # Then the report passes, and there was nothing to suppress
    assert report["scenario"] == "consumer-scale" and report["mode"] == "passive"
    assert report["delivered"] == 200 and report["lost"] == 0
    assert report["duplicates_delivered"] == 0 and report["passed"] is True
    assert report["duplicates_suppressed"] == 0


def test_a_killed_consumer_drill_leaves_no_worker(tmp_path: Path) -> None:
    # Given a consumer-crash drill with its three worker processes, consuming
    # When the drill itself is SIGKILLed (no chance to stop its workers)
    root = tmp_path / "drill"
    left = kill_drill_midway(root, "--scenario", "consumer-crash", "--messages", "1000000",
                             children=3)
    # Then every worker went with it
    assert left == {}, left
    # And the workers stopped gracefully, releasing their partitions: each wrote its
    # counters on the way out (w2 may have been the one the script SIGKILLs)
    (state,) = root.iterdir()
    assert {"w1", "w3"} <= set(stats(state)), list(state.iterdir())
