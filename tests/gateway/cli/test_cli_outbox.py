"""``geogateway outbox run|stats`` on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gateway.transports import LocalNamespace
from replication import Message
from tests.gateway.cli.cli_support import expect_one_line_error, ok_json
from tests.gateway.conftest import Namespaces, wait_for_sync
from tests.gateway.stores.outbox_support import App

pytestmark = pytest.mark.usefixtures("dirs")

PROJECT = Path(__file__).resolve().parents[3]


def schema_args(app: App) -> list[str]:
    return [] if app.kind == "sqlite" else ["--schema", app.pg.schema]


def test_stats_then_run_drain_sends_every_destination(outbox_app: App, run, dirs):
    # Given rows for two destinations
    for entity in ("orders", "payments"):
        with LocalNamespace("primary", data_dir=dirs["data"]) as ns:
            ns.create_queue(entity)
        for i in range(3):
            outbox_app.order(f"{entity}{i}", Message("x", message_id=f"{entity}-{i}"),
                             entity=entity)
    target = ["--outbox", outbox_app.target, *schema_args(outbox_app)]
    # When stats are asked for
    stats = ok_json(run("outbox", "stats", *target, "--json"))
    # Then each destination's rows are counted
    assert stats["waiting"] == 6 and stats["dead"] == 0
    assert {k: v["waiting"] for k, v in stats["destinations"].items()} == {"orders": 3,
                                                                           "payments": 3}
    # When the dispatcher drains the outbox
    sent = ok_json(run("outbox", "run", *target, "--drain", "--json"))
    # Then every row was sent to its destination, in order, and none is left
    assert sent["sent"] == 6 and sent["waiting"] == 0
    ns = Namespaces(dirs["data"])
    try:
        assert anyio.run(ns.drain_ids, "primary", "orders") == [f"orders-{i}" for i in range(3)]
        assert anyio.run(ns.drain_ids, "primary", "payments") == [f"payments-{i}"
                                                                   for i in range(3)]
    finally:
        ns.close()


def test_run_can_keep_to_the_destinations_it_is_given(outbox_app: App, run):
    outbox_app.order("a", "x", entity="orders")
    outbox_app.order("b", "y", entity="not-mine")
    sent = ok_json(run("outbox", "run", "--outbox", outbox_app.target,
                       *schema_args(outbox_app), "--entity", "orders", "--drain", "--json"))
    assert sent["sent"] == 1 and sent["waiting"] == 1


def test_a_missing_file_or_server_is_one_line_without_the_password(run, tmp_path: Path):
    expect_one_line_error(run("outbox", "stats", "--outbox", str(tmp_path / "nope.db")), 2,
                          "no SQLite file", "nope.db")
    line = expect_one_line_error(
        run("outbox", "run", "--outbox", "postgresql://app:s3cret-pw@127.0.0.1:9/shop"), 2,
        "127.0.0.1:9/shop", "unreachable")
    assert "s3cret-pw" not in line


def test_the_dispatcher_process_runs_until_sigterm(tmp_path: Path, dirs):
    # Given an application file with one row, and the dispatcher started on it
    app = App("sqlite", path=tmp_path / "app.db")
    app.order("o1", Message("x", message_id="m1"))
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "GEOGATEWAY_OUTBOX": app.target}
    with subprocess.Popen([sys.executable, "-m", "gateway.cli", "outbox", "run", "--json"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        try:
            # When it sent the row (and the application adds another)
            wait_for_sync(lambda: app.outbox.stats().waiting == 0, within=30)
            app.order("o2", Message("y", message_id="m2"))
            wait_for_sync(lambda: app.outbox.stats().waiting == 0, within=30)
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=30)
    # Then SIGTERM ends it with exit 0 and its counts
    assert process.returncode == 0, err
    assert json.loads(out)["sent"] == 2 and "dispatching the outbox" in err
    app.close()
