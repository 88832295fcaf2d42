"""The fleet drill: three receiver processes, each with a directory of its own as if on
its own machine, active mode, one SIGKILLed mid-stream, the primary down and back.

On one shared PostgreSQL store nothing is lost and no effect happens twice. With a
SQLite file per machine (no shared store) the same run shows the duplicate effects,
so the drill's check can fail.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import psycopg
import pytest

from gateway.drill import run_drill
from tests.gateway.cli.cli_support import run_process
from tests.postgres import Pg

MESSAGES = 200

pytestmark = pytest.mark.anyio


async def test_the_fleet_on_postgresql_loses_nothing_and_duplicates_no_effect(
        tmp_path: Path, pg: Pg, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # Given three machines sharing the session's PostgreSQL server
    phases: set[str] = set()
    # When the drill runs (w2 SIGKILLed at 30% delivered, primary down 45%-70%)
    report = await run_drill(scenario="fleet", messages=MESSAGES, batch_size=10,
                             data_dir=tmp_path, settle_timeout=30.0, dsn=pg.dsn,
                             progress=lambda phase, done, total: phases.add(phase))
    # Then every message had its effect once, across machines and the crash
    assert report.mode == "active" and report.store == "postgres"
    assert report.sent == MESSAGES
    assert report.lost == 0, report
    assert report.duplicates_delivered == 0, report
    assert report.duplicates_suppressed > 0, report  # the second copies, removed
    assert report.buffered > 0, report  # the primary's copies while it was down
    # And the report has its own facts: the machine killed, the replay and its time
    assert [(a.worker, a.action) for a in report.worker_actions] == [("w2", "killed")]
    assert report.replayed > 0 and report.replay_seconds is not None, report
    rows = dict(report.rows())
    assert rows["replay time"] == f"{report.replay_seconds:.3f} s"
    assert rows["worker killed"].startswith("w2 at ")
    assert "failover time" not in rows and "-" not in rows.values(), rows
    assert report.to_dict()["replay_seconds"] == report.replay_seconds
    assert report.passed and report.state_dir is None
    assert {"sent", "delivered"} <= phases
    # And the schema it made in the server it was given is dropped once it passed
    with psycopg.connect(pg.dsn) as conn:
        left = conn.execute("SELECT count(*) FROM information_schema.schemata "
                            "WHERE schema_name LIKE 'fleet_drill_%'").fetchone()
    assert left == (0,)
    # And the server's password is in no log line and no report
    password = pg.dsn.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert password not in caplog.text and password not in json.dumps(report.to_dict())


async def test_a_file_per_machine_lets_the_copies_through(tmp_path: Path) -> None:
    # Given the same drill with no shared store: a SQLite dedup file per machine
    report = await run_drill(scenario="fleet", messages=MESSAGES, batch_size=10,
                             data_dir=tmp_path, settle_timeout=30.0, store="sqlite")
    # Then machines that took the two copies of an id both had its effect
    assert report.duplicates_delivered > 0, report
    assert not report.passed and report.state_dir is not None


def test_the_cli_runs_the_fleet_drill_on_its_own_postgresql_and_draws_it(
        tmp_path: Path) -> None:
    # When `geogateway drill --scenario fleet --html` runs with no DSN
    page = tmp_path / "fleet.html"
    code, out, err = run_process(
        "drill", "--scenario", "fleet", "--messages", "150", "--batch", "10",
        "--data-dir", str(tmp_path), "--html", str(page), "--json", "-", cwd=tmp_path,
        timeout=180)
    # Then it started PostgreSQL itself, passed, and printed the report as JSON
    assert code == 0, err
    report = json.loads(out)
    assert report["passed"] and report["store"] == "postgres" and report["lost"] == 0
    # And the page shows the machine that was killed and the effects by machine
    html = page.read_text()
    assert "effects by" in html and "w2" in html


def test_store_is_only_for_the_fleet_scenario(run) -> None:
    code, _, err = run("drill", "--scenario", "primary-outage", "--store", "sqlite")
    assert code == 2 and "only for" in err and "Traceback" not in err
