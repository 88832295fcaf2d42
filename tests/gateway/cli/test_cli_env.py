"""The command reads the GEOGATEWAY_* settings the library's GatewayConfig.load reads,
with or without --config, and its options win over them; a bad value is the library's
one-line error. Real ``geogateway`` processes, on the embedded namespaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_queue import DurableQueue
from tests.gateway.cli.cli_support import Run, expect_one_line_error, ok_json, run_process

pytestmark = pytest.mark.usefixtures("dirs")


def geogateway(dirs: dict[str, Path], *args: str, **env: str) -> tuple[int, str, str]:
    """``geogateway ARGS`` as a process in the test's directory, with ``env`` set."""
    return run_process(*args, cwd=dirs["tmp"], env=env)


def received(run: Run, entity: str, *options: str) -> list[dict[str, object]]:
    got = ok_json(run("receive", "-e", entity, "--json", "--wait", "0.3", *options))
    assert isinstance(got, list)
    return got


def a_queue_file(dirs: dict[str, Path]) -> Path:
    path = dirs["tmp"] / "buffer.db"
    DurableQueue(path).close()
    return path


@pytest.mark.parametrize("command", ["send", "receive", "queue replay"])
def test_a_bad_failback_in_env_is_the_librarys_one_line_error_without_config(
    run: Run, dirs: dict[str, Path], command: str
) -> None:
    # Given GEOGATEWAY_FAILBACK=maybe and no --config
    args = {"send": ["send", "-e", "orders", "hi"],
            "receive": ["receive", "-e", "orders", "--wait", "0"],
            "queue replay": ["queue", "replay", "-q", str(a_queue_file(dirs))]}[command]
    # When the command runs
    result = geogateway(dirs, *args, GEOGATEWAY_FAILBACK="maybe")
    # Then it exits 1 with GatewayConfig.load's message, naming the variable
    expect_one_line_error(result, 1, "$GEOGATEWAY_FAILBACK must be true or false", "'maybe'")
    # And nothing was sent
    assert received(run, "orders") == []


def test_the_entity_comes_from_env(run: Run, dirs: dict[str, Path]) -> None:
    # Given GEOGATEWAY_ENTITY=orders / When `geogateway send hi` runs without --entity
    code, _, err = geogateway(dirs, "send", "--json", "hi", GEOGATEWAY_ENTITY="orders")
    # Then the message is sent to that queue
    assert code == 0, err
    assert [m["body"] for m in received(run, "orders")] == ["hi"]
    # And with neither, the error says where an entity can come from
    expect_one_line_error(geogateway(dirs, "send", "hi"), 2, "--entity", "GEOGATEWAY_ENTITY")


def test_options_beat_env_and_env_beats_the_defaults(run: Run, dirs: dict[str, Path]) -> None:
    env = {"GEOGATEWAY_ENTITY": "orders", "GEOGATEWAY_MODE": "active",
           "GEOGATEWAY_PRIMARY": "local://east", "GEOGATEWAY_SECONDARY": "local://west"}
    # When sent with env alone: active mode, to env's namespaces
    sent = ok_json(geogateway(dirs, "send", "--json", "a", **env))
    assert sent[0]["namespaces"] == ["east", "west"]
    # When options are given too: they win, one by one
    sent = ok_json(geogateway(dirs, "send", "--json", "--mode", "passive", "-e", "payments",
                              "--primary", "local://north", "b", **env))
    assert sent[0]["namespaces"] == ["north"]
    assert [m["body"] for m in received(run, "payments", "--primary", "local://north",
                                        "--secondary", "local://west")] == ["b"]
    # And receive reads env's namespaces too (one copy of "a": de-duplicated)
    got = ok_json(geogateway(dirs, "receive", "--json", "--wait", "0.3", **env))
    assert [m["body"] for m in got] == ["a"] and got[0]["namespace"] in ("east", "west")


def test_a_bad_kind_or_mode_in_env_names_the_variable(dirs: dict[str, Path]) -> None:
    expect_one_line_error(geogateway(dirs, "send", "-e", "orders", "x", GEOGATEWAY_KIND="sb"),
                          1, "unknown kind 'sb' in $GEOGATEWAY_KIND")
    expect_one_line_error(geogateway(dirs, "send", "-e", "orders", "x", GEOGATEWAY_MODE="both"),
                          1, "unknown mode 'both' in $GEOGATEWAY_MODE")


def test_the_durable_queue_and_dedup_store_come_from_env(run: Run, dirs: dict[str, Path]) -> None:
    # Given both namespaces down and GEOGATEWAY_DURABLE_QUEUE set to a relative path
    run("namespace", "down", "primary")
    run("namespace", "down", "secondary")
    # When sent without -q
    sent = ok_json(geogateway(dirs, "send", "-e", "orders", "--json", "a",
                              GEOGATEWAY_DURABLE_QUEUE="env-buffer.db"))
    # Then it is buffered there, in the current directory
    assert sent[0]["buffered"]
    queue = dirs["tmp"] / "env-buffer.db"
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 1
    # And receive keeps its window where GEOGATEWAY_DEDUP_STORE says
    run("namespace", "up", "primary")
    run("namespace", "up", "secondary")
    code, _, err = geogateway(dirs, "receive", "-e", "orders", "--wait", "0",
                              GEOGATEWAY_DEDUP_STORE="env-dedup.db")
    assert code == 0, err
    assert (dirs["tmp"] / "env-dedup.db").exists()


def test_queue_replay_sends_to_the_namespaces_env_names(run: Run, dirs: dict[str, Path]) -> None:
    # Given messages buffered for local://east and local://west (named by env)
    env = {"GEOGATEWAY_PRIMARY": "local://east", "GEOGATEWAY_SECONDARY": "local://west"}
    queue = dirs["tmp"] / "buffer.db"
    run("namespace", "down", "east", "--new")
    run("namespace", "down", "west", "--new")
    sent = ok_json(geogateway(dirs, "send", "-e", "orders", "-q", str(queue), "--json",
                              "a", "b", **env))
    assert all(r["buffered"] for r in sent)
    run("namespace", "up", "east")
    run("namespace", "up", "west")
    # When replayed with the same env and no namespace options
    replayed = ok_json(geogateway(dirs, "queue", "replay", "-q", str(queue), "--json", **env))
    # Then they reach env's namespaces
    assert replayed == [{"entity": "orders", "replayed": 2, "remaining": [], "down": [],
                         "why": {}}]
    got = received(run, "orders", "--primary", "local://east", "--secondary", "local://west")
    assert sorted(m["body"] for m in got) == ["a", "b"]


def test_with_config_env_beats_the_file_and_options_beat_env(
    run: Run, dirs: dict[str, Path]
) -> None:
    # Given a config file in another directory naming the queue "orders"
    config = dirs["tmp"] / "conf" / "geogateway.toml"
    config.parent.mkdir()
    config.write_text('primary = "local://primary"\nsecondary = "local://secondary"\n'
                      'entity = "orders"\nfailback = false\n')
    # When env names another queue, and then an option a third
    assert geogateway(dirs, "send", "--config", str(config), "a",
                      GEOGATEWAY_ENTITY="payments")[0] == 0
    assert geogateway(dirs, "send", "--config", str(config), "-e", "audit", "b",
                      GEOGATEWAY_ENTITY="payments")[0] == 0
    # Then each went where the strongest setting said
    assert [m["body"] for m in received(run, "payments")] == ["a"]
    assert [m["body"] for m in received(run, "audit")] == ["b"]
    assert received(run, "orders") == []
    # And env's bad value is the same error with the file as without
    expect_one_line_error(geogateway(dirs, "send", "--config", str(config), "c",
                                     GEOGATEWAY_FAILBACK="maybe"), 1, "GEOGATEWAY_FAILBACK")
