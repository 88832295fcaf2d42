"""Connecting the PostgreSQL stores to a real server: one clear error per fault, never
the password, versioned schemas, and a store that survives a server restart."""

from __future__ import annotations

import os
import stat
import threading

import psycopg
import pytest

from gateway.stores import EmbeddedPostgres, describe_dsn, is_dsn, migrate, open_pool
from replication import ConfigError, StoreUnavailable
from tests.postgres import Pg

STEPS = ["CREATE TABLE {schema}.things (id integer PRIMARY KEY)",
         "ALTER TABLE {schema}.things ADD COLUMN name text"]


def _password(dsn: str) -> str:
    return dsn.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def test_the_embedded_server_takes_its_password_and_keeps_it_private(pg: Pg):
    # Given the session's embedded server
    server = pg.server
    # When we look at its files and its printable DSN
    password = _password(server.dsn)
    dsn_file = server.data_dir / "geogateway-dsn"
    # Then the DSN works, the file holding it is the owner's only, the safe form hides it
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("geogateway",)
    assert stat.S_IMODE(os.stat(dsn_file).st_mode) == 0o600
    assert password not in server.safe_dsn and password not in repr(server)


def test_a_wrong_password_is_one_clear_error_without_the_password(pg: Pg):
    bad = pg.dsn.replace(_password(pg.dsn), "not-the-password")
    with pytest.raises(ConfigError) as caught:
        open_pool(bad, what="dedup store")
    message = str(caught.value)
    assert "refused the credentials" in message and "127.0.0.1" in message
    assert "not-the-password" not in message and _password(pg.dsn) not in message


def test_a_missing_database_is_named(pg: Pg):
    missing = pg.dsn.rsplit("/", 1)[0] + "/nosuchdb"
    with pytest.raises(ConfigError, match="database 'nosuchdb' does not exist"):
        open_pool(missing, what="dedup store")


def test_an_unreachable_server_names_the_host_not_the_password(pg: Pg):
    # Given a DSN whose port nothing listens on
    with socket_closed_port() as port:
        dsn = f"postgresql://geogateway:s3cret-pw@127.0.0.1:{port}/geogateway"
        # When a store opens it
        with pytest.raises(ConfigError) as caught:
            open_pool(dsn, what="dedup store", connect_timeout=2)
    # Then one line names host and port, and says what to do
    message = str(caught.value)
    assert f"127.0.0.1:{port}/geogateway" in message and "unreachable" in message
    assert "s3cret-pw" not in message and "\n" not in message


def test_a_path_is_not_taken_for_a_dsn():
    assert is_dsn("postgresql://u@h/db") and is_dsn("host=h dbname=d")
    assert not is_dsn("/var/lib/dedup.db") and not is_dsn("dedup.db")
    assert describe_dsn("postgresql://u:pw@a:1,b:2/db?target_session_attrs=read-write") \
        == "a:1,b:2/db as u"


def test_migrations_run_once_even_when_instances_start_together(pg: Pg):
    # Given four instances opening the same component at the same moment
    errors: list[BaseException] = []

    def start() -> None:
        try:
            target = open_pool(pg.dsn, what="test", schema=pg.schema)
            migrate(target, "things", STEPS)
            target.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then none failed and the table is at the last version
    assert errors == []
    with psycopg.connect(pg.dsn) as conn:
        version = conn.execute(f"SELECT version FROM {pg.schema}.geogateway_schema "
                               "WHERE component = 'things'").fetchone()
        columns = conn.execute("SELECT count(*) FROM information_schema.columns WHERE "
                               "table_schema = %s AND table_name = 'things'",
                               (pg.schema,)).fetchone()
    assert version == (2,) and columns == (2,)


def test_a_schema_newer_than_the_code_is_refused(pg: Pg):
    target = open_pool(pg.dsn, what="test", schema=pg.schema)
    migrate(target, "things", STEPS)
    try:
        with pytest.raises(ConfigError, match="version 2, newer than this geogateway knows"):
            migrate(target, "things", STEPS[:1])
    finally:
        target.close()


def test_a_restarted_server_is_unavailable_then_used_again(pg_server_factory):
    # Given a store on a server of its own
    server: EmbeddedPostgres = pg_server_factory()
    target = open_pool(server.dsn, what="test", connect_timeout=3)
    try:
        assert target.run("ping", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        # When the server stops
        server.stop(mode="immediate")
        # Then a call is StoreUnavailable, naming the server without the password
        with pytest.raises(StoreUnavailable) as caught:
            target.run("ping", lambda c: c.execute("SELECT 1").fetchone())
        assert "127.0.0.1" in str(caught.value)
        assert _password(server.dsn) not in str(caught.value)
        # And once it is back the same store works again
        server.start()
        assert target.run("ping", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
    finally:
        target.close()


def held_across_a_restart(target, server: EmbeddedPostgres, n: int) -> list[psycopg.Connection]:
    """``n`` pooled connections opened and in use while the server restarts, then given
    back to the pool (broken, and not known to be)."""
    held = [target.pool.getconn(timeout=3) for _ in range(n)]
    for conn in held:
        conn.execute("SELECT 1")
        conn.rollback()
    server.stop(mode="fast")
    server.start()
    for conn in held:
        target.pool.putconn(conn)
    return held


def test_each_connection_a_restart_broke_is_replaced_within_one_call(
        pg_server_factory, monkeypatch):
    # Given a pool of 3 connections, all opened before the server restarted, and a
    # pool check that cannot see them (as when they were in use while it ran, and
    # went back to the pool after it)
    server: EmbeddedPostgres = pg_server_factory()
    target = open_pool(server.dsn, what="test", max_size=3, connect_timeout=3)
    try:
        held = held_across_a_restart(target, server, 3)
        monkeypatch.setattr(target, "drop_broken", lambda: None)
        # When a call runs after the restart
        # Then it meets the three broken connections one after another, and answers
        assert target.run("ping", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        assert all(conn.broken or conn.closed for conn in held)
        # And so does a retried attempt (the inbox's and the claims' way), after another
        # restart with three connections held across it
        held_across_a_restart(target, server, 3)

        def attempt(deadline: float) -> object:
            with target.checked("ping", deadline) as conn:
                return conn.execute("SELECT 1").fetchone()

        assert target.retried(attempt) == (1,)
    finally:
        target.close()


class socket_closed_port:
    """A port of 127.0.0.1 that nothing listens on (bound, then released)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_private_data_directory_keeps_its_permissions(tmp_path):
    # Given a data directory inside a private (0700) directory
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    server = EmbeddedPostgres(private / "server", fsync=False)
    try:
        # When the server starts in it (as root: it runs as nobody, who cannot reach it)
        dsn = server.start()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # Then no permission of the user's directories was changed, and the password
        # stays in the data directory
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
        assert (private / "server" / "geogateway-password").exists()
        # And a second handle on the same directory finds the same server
        assert EmbeddedPostgres(private / "server").running()
    finally:
        server.cleanup()
    assert not server.home.exists() or server.home == private / "server"


@pytest.mark.skipif(os.geteuid() != 0, reason="the binaries are copied only for root")
def test_binaries_nobody_cannot_reach_are_copied_with_their_libraries(tmp_path, monkeypatch):
    # Given binaries in a place the user the server runs as cannot reach (a venv under
    # a private directory), as seen by the server's runner
    from gateway.stores import _pg_server

    real = _pg_server._reachable_by_others
    source = _pg_server.binaries()
    monkeypatch.setattr(_pg_server, "_reachable_by_others",
                        lambda path: False if path == source else real(path))
    server = EmbeddedPostgres(tmp_path / "server", fsync=False)
    try:
        # When it starts, it runs a copy, which finds its shared libraries
        with psycopg.connect(server.start()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert server._bin_dir() != source
    finally:
        server.cleanup()
