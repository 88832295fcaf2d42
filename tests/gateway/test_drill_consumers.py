"""The consumer drills: receiver processes SIGKILLed, added and removed mid-run.

Each drill runs real worker processes (``python -m gateway._drill_consumer``) on the
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
from tests.gateway.cli_support import ok_json, run_process

MESSAGES = 600

pytestmark = pytest.mark.anyio


async def drill(scenario: Scenario, root: Path, **kw: object) -> DrillReport:
    phases: set[str] = set()
    report = await run_drill(
        scenario=scenario, messages=MESSAGES, data_dir=root, settle_timeout=25.0,
        progress=lambda phase, done, total: phases.add(phase), **kw,  # type: ignore[arg-type]
    )
    assert {"sent", "delivered"} <= phases
    assert report.scenario == scenario.value
    assert report.sent == report.messages == MESSAGES
    assert report.lost == 0, report
    assert report.delivered == MESSAGES, report
    assert report.duplicates_delivered == 0, report
    assert report.passed
    return report


def stats(root: Path) -> dict[str, dict[str, int]]:
    """The counters each gracefully stopped worker wrote on exit."""
    return {p.stem: json.loads(p.read_text()) for p in (root / "stats").glob("*.json")}


def deliveries(root: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(root / "dedup.db")) as conn:
        return dict(conn.execute("SELECT message_id, count FROM drill_delivered"))


async def test_consumer_crash(tmp_path: Path) -> None:
    # Given three workers consuming both namespaces' copies (active mode by default)
    # When w2 is SIGKILLed at 40% delivered
    report = await drill(Scenario.CONSUMER_CRASH, tmp_path)
    # Then (drill() checked) nothing was lost and each id was delivered once
    assert report.mode == "active"
    assert len(deliveries(tmp_path)) == MESSAGES
    assert set(deliveries(tmp_path).values()) == {1}
    # And w2 really died without a graceful stop, while w1 and w3 stopped gracefully
    assert set(stats(tmp_path)) == {"w1", "w3"}
    # And the survivors suppressed copies (each id was sent to both namespaces)
    assert report.duplicates_suppressed > 0


async def test_consumer_scale(tmp_path: Path) -> None:
    # Given two workers; When a third joins at 30% and w1 leaves (SIGTERM) at 60%
    report = await drill(Scenario.CONSUMER_SCALE, tmp_path)
    # Then every worker, w1 included, stopped gracefully and wrote its counters
    assert set(stats(tmp_path)) == {"w1", "w2", "w3"}
    # And every second copy was suppressed: all workers' counters are in the report
    assert report.duplicates_suppressed == MESSAGES
    assert set(deliveries(tmp_path).values()) == {1}


def test_cli_consumer_scale_passive(tmp_path: Path) -> None:
    # Given --mode passive: one copy per message, in whichever namespace took it
    report = ok_json(run_process("drill", "--scenario", "consumer-scale", "--messages", "200",
                                 "--mode", "passive", "--json", "-", cwd=tmp_path))
    # Then the report passes, and there was nothing to suppress
    assert report["scenario"] == "consumer-scale" and report["mode"] == "passive"
    assert report["delivered"] == 200 and report["lost"] == 0
    assert report["duplicates_delivered"] == 0 and report["passed"] is True
    assert report["duplicates_suppressed"] == 0
