"""``geogateway consumer status`` on a PostgreSQL checkpoint store: ``--store`` takes a
DSN (and ``--schema``), the report is the SQLite one's, it only reads (nothing is
created, every transaction is READ ONLY), and the password never shows."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import psycopg
import pytest

from gateway.cli import _common
from gateway.consumer import PostgresCheckpointStore
from tests.gateway.cli.cli_support import Run, expect_one_line_error, ok_json, run_process
from tests.postgres import Pg

from .test_cli_consumer import AGE, HUB, by_partition, fill, hub  # noqa: F401  (a fixture)

# Every test reads the local namespaces' partitions: the consumer status tests' hub.
pytestmark = pytest.mark.usefixtures("hub")


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_common.out, "_width", 200)


@pytest.fixture
def pg_store(pg: Pg) -> str:
    """The PostgreSQL store in ``pg.schema``, filled as the SQLite one of the
    consumer status tests; returns the DSN."""
    clock = [time.time() - AGE]

    def now() -> None:
        clock[0] = time.time()

    async def go() -> None:
        async with PostgresCheckpointStore(pg.dsn, schema=pg.schema,
                                           clock=lambda: clock[0]) as made:
            await fill(made, now=now)

    anyio.run(go)
    return pg.dsn


def _password(dsn: str) -> str:
    return dsn.split(":")[2].split("@")[0]


def _table_count(pg: Pg) -> int:
    with psycopg.connect(pg.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s",
                           (pg.schema,)).fetchone()
    return 0 if row is None else int(row[0])


def test_status_reads_a_postgres_store(run: Run, pg: Pg, pg_store: str,
                                       dirs: dict[str, Path]) -> None:
    result = run("consumer", "status", "--store", pg_store, "--schema", pg.schema, "-e", HUB,
                 "--json")
    report = ok_json(result)
    assert report["store"].startswith("PostgreSQL 127.0.0.1:") and pg.schema in report["store"]
    primary = by_partition(report, "primary")
    assert {p: (r["owner"], r["owner_alive"], r["checkpoint_sequence_number"], r["lag"])
            for p, r in primary.items()} == {
        "0": ("proc-a", True, 1, 0),
        "1": ("proc-a", True, None, 2),
        "2": ("proc-b", True, 0, 0),
        "3": ("proc-c", False, None, 1),
    }
    assert by_partition(report, "secondary")["0"]["owner"] == "proc-a"
    assert _password(pg_store) not in result[1] + result[2]


def test_status_from_the_environment_as_a_table(run: Run, pg: Pg, pg_store: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEOGATEWAY_CHECKPOINT_STORE", pg_store)
    monkeypatch.setenv("GEOGATEWAY_PG_SCHEMA", pg.schema)
    code, out, err = run("consumer", "status", "-e", HUB)
    assert code == 0, err
    assert "proc-c" in out and "PostgreSQL 127.0.0.1" in out
    assert _password(pg_store) not in out + err


def test_a_schema_without_a_store_is_an_error_and_nothing_is_created(
    run: Run, pg: Pg,
) -> None:
    line = expect_one_line_error(
        run("consumer", "status", "--store", pg.dsn, "--schema", pg.schema, "-e", HUB), 1,
        "no checkpoint store in schema", pg.schema)
    assert _password(pg.dsn) not in line
    assert _table_count(pg) == 0


def test_a_wrong_password_is_one_line_without_it(pg: Pg, dirs: dict[str, Path]) -> None:
    wrong = pg.dsn.replace(_password(pg.dsn), "not-the-password")
    result = run_process("consumer", "status", "--store", wrong, "-e", HUB, cwd=dirs["tmp"])
    expect_one_line_error(result, 1, "refused the credentials")
    assert "not-the-password" not in result[1] + result[2]
