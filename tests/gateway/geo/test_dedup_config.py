"""``[dedup]`` with a PostgreSQL store: the file, ``$GEOGATEWAY_DEDUP_STORE`` and
``geogateway receive --dedup-store`` take a DSN, never as a file name, never printed
with its password."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gateway import DedupConfig, FallbackDedupStore, GatewayConfig, PostgresDedupStore
from gateway.transports import LocalNamespace, LocalTransport
from replication import ConfigError, DedupWindow, Message
from tests.gateway.cli.cli_support import expect_one_line_error, ok_json, run_process
from tests.postgres import Pg

BASE = 'entity = "orders"\nprimary = "local://primary"\nsecondary = "local://secondary"\n'
DSN = "postgresql://app:s3cret@db1.example.com:5432,db2.example.com:5432/orders" \
      "?target_session_attrs=read-write"


def load(tmp_path: Path, text: str, **env: str) -> GatewayConfig:
    path = tmp_path / "geogateway.toml"
    path.write_text(BASE + text)
    return GatewayConfig.load(path, env=env)


def test_a_store_in_the_file_with_its_schema_and_fallback(tmp_path: Path) -> None:
    config = load(tmp_path, f'[dedup]\nstore = "{DSN}"\nschema = "fleet"\n'
                            'fallback = "local.db"\nwindow_seconds = 60\n')
    assert config.dedup == DedupConfig(store=DSN, schema="fleet",
                                       fallback=tmp_path / "local.db",
                                       window=DedupWindow(seconds=60))
    # The password is in no repr; the hosts are
    for text in (repr(config.dedup), repr(config)):
        assert "s3cret" not in text
    assert "db1.example.com:5432,db2.example.com:5432/orders as app" in repr(config.dedup)


def test_a_dsn_is_never_taken_for_a_path(tmp_path: Path) -> None:
    # Given a DSN written as the dedup path, in the file or in the environment
    in_file = load(tmp_path, f'[dedup]\npath = "{DSN}"\n')
    in_env = load(tmp_path, '[dedup]\npath = "dedup.db"\nwindow_count = 10\n',
                  GEOGATEWAY_DEDUP_STORE=DSN, GEOGATEWAY_DEDUP_SCHEMA="fleet")
    # Then both are the store, untouched (not made absolute, not resolved)
    assert in_file.dedup is not None and in_file.dedup.store == DSN
    assert in_file.dedup.path is None
    assert in_env.dedup is not None and in_env.dedup.store == DSN
    assert (in_env.dedup.path, in_env.dedup.schema, in_env.dedup.window.count) == (
        None, "fleet", 10)
    # And a path in the environment replaces a store in the file (and its fallback)
    back = load(tmp_path, f'[dedup]\nstore = "{DSN}"\nfallback = "f.db"\n',
                GEOGATEWAY_DEDUP_STORE="mine.db")
    assert back.dedup is not None and back.dedup.store is None
    assert back.dedup.path == Path.cwd() / "mine.db" and back.dedup.fallback is None
    # And so does a command line's option, either way
    over = GatewayConfig.load(None, env={}, defaults={"entity": "o",
                              "primary": "local://a", "secondary": "local://b"},
                              overrides={"dedup": {"store": DSN}})
    assert over.dedup is not None and over.dedup.store == DSN


@pytest.mark.parametrize("text, words", [
    (f'[dedup]\npath = "d.db"\nstore = "{DSN}"\n', "either path"),
    ('[dedup]\nstore = "/var/lib/dedup.db"\n', "must be a PostgreSQL DSN"),
    ('[dedup]\npath = "d.db"\nfallback = "f.db"\n', "fallback is for a PostgreSQL store"),
    ('[dedup]\nstore = 5\n', "must be a string"),
])
def test_a_bad_dedup_table_is_one_clear_error(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        load(tmp_path, text)
    assert "s3cret" not in str(caught.value)


def test_the_table_opens_its_store(pg: Pg, tmp_path: Path) -> None:
    plain = DedupConfig(store=pg.dsn, schema=pg.schema).open_store()
    assert isinstance(plain, PostgresDedupStore)
    plain.close()
    wrapped = DedupConfig(store=pg.dsn, schema=pg.schema,
                          fallback=tmp_path / "f.db").open_store()
    assert isinstance(wrapped, FallbackDedupStore)
    wrapped.close()


def test_receive_takes_a_dsn(pg: Pg, tmp_path: Path) -> None:
    # Given a message in both local namespaces
    data = tmp_path / "data"

    async def put(name: str) -> None:
        async with LocalTransport(name, data_dir=data) as transport:
            await transport.send("orders", [Message("hi", message_id="m-cli")])

    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data) as namespace:
            namespace.create_queue("orders")
        anyio.run(put, name)
    args = ("receive", "-e", "orders", "--data-dir", str(data), "--wait", "1", "--json")
    # When `geogateway receive` keeps its window in PostgreSQL (option, then env)
    first = ok_json(run_process(*args, "--dedup-store", pg.dsn, cwd=tmp_path, env={}))
    again = ok_json(run_process(*args, cwd=tmp_path, env={"GEOGATEWAY_DEDUP_STORE": pg.dsn}))
    # Then the message came once, the second copy was suppressed by the shared window
    assert [m["message_id"] for m in first] == ["m-cli"] and again == []
    assert not any(p.name.startswith("postgres") for p in tmp_path.rglob("*"))


def test_receive_names_an_unreachable_store_without_its_password(tmp_path: Path) -> None:
    dsn = "postgresql://app:s3cret@127.0.0.1:9/orders?connect_timeout=1"
    result = run_process("receive", "-e", "orders", "--data-dir", str(tmp_path), "--wait",
                         "0", "--dedup-store", dsn, cwd=tmp_path, env={})
    line = expect_one_line_error(result, 1, "127.0.0.1:9/orders", "unreachable")
    assert "s3cret" not in line
