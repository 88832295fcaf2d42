"""The outbox drill: an application process commits orders with outbox rows (rolling
some back), two dispatcher processes are SIGKILLed and restarted mid-run, a receiver
counts effects by MessageId. On SQLite and on PostgreSQL, small counts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psycopg
import pytest

from gateway.drill import OutboxDrillReport, run_outbox_drill
from tests.gateway.cli.cli_support import expect_one_line_error, run_process
from tests.postgres import Pg

pytestmark = pytest.mark.anyio

ORDERS = 100


def check(report: OutboxDrillReport, store: str) -> None:
    assert report.passed, (report.failures(), report.to_dict())
    assert report.store == store and report.orders == ORDERS
    assert report.committed + report.rolled_back == ORDERS and report.rolled_back > 0
    assert report.delivered == report.committed and report.lost == 0
    assert report.rolled_back_delivered == 0 and report.duplicate_effects == 0
    assert report.dispatcher_kills == report.planned_kills == 2


async def test_the_sqlite_outbox_survives_killed_dispatchers(tmp_path: Path):
    phases: set[str] = set()
    report = await run_outbox_drill(store="sqlite", orders=ORDERS, kills=2, data_dir=tmp_path,
                                    seed=1, progress=lambda phase, d, t: phases.add(phase))
    check(report, "sqlite")
    assert phases == {"committed", "delivered"}
    assert report.state_dir is None and not any(tmp_path.iterdir())  # noqa: ASYNC240 (removed: passed)


async def test_the_postgres_outbox_survives_killed_dispatchers(tmp_path: Path, pg: Pg):
    # Given the session's server: the drill works in a schema of its own
    report = await run_outbox_drill(store="postgres", dsn=pg.dsn, orders=ORDERS, kills=2,
                                    mode="active", data_dir=tmp_path, seed=2)
    check(report, "postgres")
    # In active mode every message's second copy is removed by MessageId at least
    assert report.copies_removed >= report.committed
    # And the schema it made is dropped once it passed
    with psycopg.connect(pg.dsn) as conn:
        left = conn.execute("SELECT count(*) FROM information_schema.schemata "
                            "WHERE schema_name LIKE 'drill_%'").fetchone()
    assert left == (0,)


def test_the_cli_drill_starts_its_own_postgres_and_reports_json(tmp_path: Path):
    code, out, err = run_process("drill", "--scenario", "outbox", "--store", "postgres",
                                 "--messages", "40", "--json", "-", cwd=tmp_path, timeout=180)
    report = json.loads(out)
    assert code == 0, err
    assert report["passed"] and report["store"] == "postgres" and report["lost"] == 0
    assert report["failures"] == [] and report["dispatcher_kills"] == 4


def test_the_report_fails_on_anything_lost_resent_late_or_not_killed():
    good = OutboxDrillReport(store="sqlite", mode="passive", orders=10, committed=8,
                             rolled_back=2, delivered=8, lost=0, rolled_back_delivered=0,
                             duplicate_effects=0, copies_removed=1, out_of_order=0,
                             left_in_outbox=0, dispatcher_kills=4, planned_kills=4)
    assert good.passed and good.failures() == []
    for change, words in [({"lost": 1}, "not delivered"),
                          ({"rolled_back_delivered": 1}, "rolled-back orders delivered"),
                          ({"duplicate_effects": 2}, "duplicate effects"),
                          ({"out_of_order": 1}, "out of order"),
                          ({"left_in_outbox": 3}, "left in the outbox"),
                          ({"dispatcher_kills": 3}, "3 of 4 kills")]:
        bad = dataclasses.replace(good, **change)
        assert not bad.passed and any(words in why for why in bad.failures()), change


@pytest.mark.parametrize(("args", "words"), [
    (["--scenario", "outbox", "--dsn", "postgresql://x@h/db"], "--dsn goes with"),
    (["--scenario", "outbox", "--transport", "servicebus"], "--transport"),
    (["--scenario", "primary-outage", "--store", "postgres"], "only for --scenario outbox"),
])
def test_options_that_do_not_fit_the_outbox_scenario_are_refused(run, args, words):
    expect_one_line_error(run("drill", *args), 2, words)
