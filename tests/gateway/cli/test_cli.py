"""The ``geogateway`` command, in-process through ``main()`` and as a real process.

Every test points ``GEOGATEWAY_DATA_DIR`` and ``GEOGATEWAY_STATE_DIR`` at a temporary
directory, so nothing touches the user's real namespaces or role state. Bad input must
give one line on stderr (``error: ...``), a non-zero exit, and never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.cli.cli_support import (
    Run,
    expect_one_line_error,
    ok_json,
    run_process,
)

SECRET = "SECRET123"
CONN = (
    "Endpoint=sb://geogateway-test.invalid/;SharedAccessKeyName=RootManageSharedAccessKey;"
    f"SharedAccessKey={SECRET}="
)



pytestmark = pytest.mark.usefixtures("dirs")


def status(run: Run) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in ok_json(run("namespace", "status", "--json"))}


# -- namespace ----------------------------------------------------------------------------


def test_namespace_down_status_up(run: Run, dirs: dict[str, Path]) -> None:
    code, out, _ = run("namespace", "down", "primary")
    assert code == 0 and "primary is down" in out

    state = status(run)
    assert set(state) == {"primary", "secondary"}
    assert state["primary"]["up"] is False and state["secondary"]["up"] is True
    assert Path(state["primary"]["path"]).parent == dirs["data"]

    code, out, _ = run("namespace", "status", "primary")
    assert code == 0 and "DOWN" in out

    code, out, _ = run("namespace", "up", "local://primary")
    assert code == 0 and "primary is up" in out
    assert status(run)["primary"]["up"] is True


def test_namespace_faults_set_and_clear(run: Run) -> None:
    code, out, _ = run("namespace", "faults", "primary", "--latency", "0.05",
                       "--lost-replies", "0.25")
    assert code == 0 and "25%" in out
    primary = status(run)["primary"]
    assert primary["latency"] == 0.05 and primary["lost_replies"] == 0.25

    assert run("namespace", "faults", "primary")[0] == 0
    primary = status(run)["primary"]
    assert primary["latency"] == 0.0 and primary["lost_replies"] == 0.0


def test_namespace_data_dir_option_beats_env(run: Run, dirs: dict[str, Path]) -> None:
    other = dirs["tmp"] / "other"
    assert run("namespace", "down", "primary", "--data-dir", str(other))[0] == 0
    assert (other / "primary.control.json").exists()
    assert status(run)["primary"]["up"] is True  # the env's data dir is untouched


def test_namespace_unknown_name_changes_nothing(run: Run, dirs: dict[str, Path]) -> None:
    expect_one_line_error(run("namespace", "down", "nosuch"), 2, "nosuch")
    assert not (dirs["data"] / "nosuch.control.json").exists()
    assert not (dirs["data"] / "nosuch.db").exists()


def test_the_receivers_dedup_file_is_not_taken_for_a_namespace(
    run: Run, dirs: dict[str, Path],
) -> None:
    # Given a data dir where `receive` keeps its de-dup window (<data dir>/dedup.db)
    assert run("receive", "-e", "orders", "--wait", "0")[0] == 0
    assert (dirs["data"] / "dedup.db").exists()
    # When "dedup" is taken down / Then it is an unknown namespace, and nothing is written
    line = expect_one_line_error(run("namespace", "down", "dedup"), 2, "'dedup'")
    assert "known namespaces: primary, secondary (" in line
    assert not (dirs["data"] / "dedup.control.json").exists()


def test_namespace_new_and_then_existing_names(run: Run, dirs: dict[str, Path]) -> None:
    # Given a namespace that does not exist yet: --new takes it down (and so creates it)
    code, out, _ = run("namespace", "down", "--new", "local://eu")
    assert code == 0 and "eu is down" in out
    # Then it exists, so it is known without --new, and listed among the known names
    assert run("namespace", "up", "eu")[0] == 0
    assert ok_json(run("namespace", "status", "eu", "--json"))[0]["up"] is True
    line = expect_one_line_error(run("namespace", "down", "us"), 2)
    assert "eu, primary, secondary" in line


def test_namespace_configured_names_are_known(run: Run, dirs: dict[str, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Given namespaces named by the environment and by the config file
    monkeypatch.setenv("GEOGATEWAY_PRIMARY", "local://east")
    config = write_config(dirs["tmp"], 'primary = "local://north"\nsecondary = '
                          '"local://south"\nentity = "orders"\n')
    monkeypatch.setenv("GEOGATEWAY_CONFIG", str(config))
    # Then they may be taken down before they exist; others still may not
    assert run("namespace", "down", "east")[0] == 0
    assert run("namespace", "down", "south")[0] == 0
    line = expect_one_line_error(run("namespace", "down", "west"), 2)
    assert "east" in line and "south" in line


def test_namespace_status_lists_entities(run: Run) -> None:
    assert run("send", "-e", "orders", "hello")[0] == 0
    entities = status(run)["primary"]["entities"]
    assert [e["name"] for e in entities] == ["orders"]


# -- send and receive ---------------------------------------------------------------------


def test_send_receive_round_trip(run: Run) -> None:
    sent = ok_json(run("send", "-e", "orders", "--json", "hello", "world"))
    assert [r["namespaces"] for r in sent] == [["primary"], ["primary"]]
    assert all(r["buffered"] == [] for r in sent)

    got = ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.5"))
    assert [(r["message_id"], r["body"]) for r in got] == [
        (sent[0]["message_id"], "hello"), (sent[1]["message_id"], "world")]
    assert all(r["namespace"] == "primary" and r["delivery_count"] == 1 for r in got)

    # Completed: they are gone.
    assert ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.2")) == []
    code, out, _ = run("receive", "-e", "orders", "--wait", "0.1")
    assert code == 0 and "no messages" in out


def test_send_table_and_generated_count(run: Run) -> None:
    code, out, _ = run("send", "-e", "orders", "--count", "3")
    assert code == 0 and out.count("primary") == 3
    got = ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.5"))
    assert [r["body"] for r in got] == ["message 0", "message 1", "message 2"]


def test_receive_peek_leaves_messages(run: Run) -> None:
    assert run("send", "-e", "orders", "--message-id", "m-1", "x")[0] == 0
    first = ok_json(run("receive", "-e", "orders", "--json", "--peek", "--wait", "0.5"))
    assert [r["message_id"] for r in first] == ["m-1"]
    again = ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.5"))
    assert [r["message_id"] for r in again] == ["m-1"]


def test_failover_is_remembered_in_state_dir(run: Run, dirs: dict[str, Path]) -> None:
    assert run("namespace", "down", "primary")[0] == 0
    sent = ok_json(run("send", "-e", "orders", "--json", "a"))
    assert sent[0]["namespaces"] == ["secondary"]
    assert list(dirs["state"].iterdir()), "role state goes to GEOGATEWAY_STATE_DIR"

    # Roles persist across processes: the primary is back, the secondary stays active.
    assert run("namespace", "up", "primary")[0] == 0
    assert ok_json(run("send", "-e", "orders", "--json", "b"))[0]["namespaces"] == ["secondary"]


def test_send_with_config_uses_its_state_dir(
    run: Run, dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without GEOGATEWAY_STATE_DIR the config's state_dir must be used (and if it were
    # not, the user's state dir is redirected into tmp here, so nothing leaks).
    monkeypatch.delenv("GEOGATEWAY_STATE_DIR")
    monkeypatch.setenv("HOME", str(dirs["tmp"] / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(dirs["tmp"] / "xdg-state"))
    config = dirs["tmp"] / "cfg" / "geogateway.toml"
    config.parent.mkdir()
    config.write_text('primary = "local://primary"\nsecondary = "local://secondary"\n'
                      'entity = "orders"\nstate_dir = "state"\n')
    assert run("namespace", "down", "primary")[0] == 0
    sent = ok_json(run("send", "--config", str(config), "--json", "a"))
    assert sent[0]["namespaces"] == ["secondary"]
    assert list((config.parent / "state").iterdir())
    assert not (dirs["tmp"] / "xdg-state").exists()


def test_send_both_down_without_queue_fails(run: Run) -> None:
    run("namespace", "down", "primary")
    run("namespace", "down", "secondary")
    expect_one_line_error(run("send", "-e", "orders", "a"), 1, "no durable queue")


# -- the durable queue --------------------------------------------------------------------


def buffer_three(run: Run, queue: Path) -> list[str]:
    """Both namespaces down, three sends buffered in ``queue``; returns their ids."""
    run("namespace", "down", "primary")
    run("namespace", "down", "secondary")
    sent = ok_json(run("send", "-e", "orders", "--json", "--durable-queue", str(queue),
                       "a", "b", "c"))
    assert all(r["namespaces"] == [] and r["buffered"] for r in sent)
    return [r["message_id"] for r in sent]


def test_queue_inspect_replay(run: Run, dirs: dict[str, Path]) -> None:
    queue = dirs["tmp"] / "buffer.db"
    ids = buffer_three(run, queue)

    stats = ok_json(run("queue", "stats", "-q", str(queue), "--json"))
    assert stats["count"] == 3 and stats["dead_letters"] == 0
    assert [d["count"] for d in stats["destinations"]] == [3]
    code, out, _ = run("queue", "stats", "-q", str(queue))
    assert code == 0 and "waiting: 3" in out

    listed = ok_json(run("queue", "list", "-q", str(queue), "--json"))
    assert [r["message_id"] for r in listed] == ids
    assert ok_json(run("queue", "list", "-q", str(queue), "--json", "--limit", "1"))[0][
        "message_id"] == ids[0]
    assert ok_json(run("queue", "list", "-q", str(queue), "--json", "--dead-letters")) == []

    code, out, err = run("queue", "export", "-q", str(queue))
    assert code == 0 and "exported 3" in err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(x["message_id"], x["body"]) for x in lines] == list(zip(ids, "abc", strict=True))
    exported = dirs["tmp"] / "out.jsonl"
    assert run("queue", "export", "-q", str(queue), "-o", str(exported))[0] == 0
    assert len(exported.read_text().splitlines()) == 3

    run("namespace", "up", "primary")
    run("namespace", "up", "secondary")
    replayed = ok_json(run("queue", "replay", "-q", str(queue), "--json"))
    assert replayed == [{"entity": "orders", "replayed": 3, "remaining": [], "down": [],
                         "why": {}}]
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 0

    got = ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.5"))
    assert [(r["message_id"], r["body"]) for r in got] == list(zip(ids, "abc", strict=True))


def test_queue_path_from_env(run: Run, dirs: dict[str, Path],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    monkeypatch.setenv("GEOGATEWAY_DURABLE_QUEUE", str(queue))
    assert ok_json(run("queue", "stats", "--json"))["count"] == 3


def test_queue_purge(run: Run, dirs: dict[str, Path]) -> None:
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)

    # Not a terminal and no --yes: refuse, even with a "y" waiting on stdin.
    expect_one_line_error(run("queue", "purge", "-q", str(queue), stdin="y\n"), 2, "--yes")
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 3

    code, out, _ = run("queue", "purge", "-q", str(queue), "--yes")
    assert code == 0 and "purged 3" in out
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 0


def test_queue_commands_on_corrupt_file(run: Run, dirs: dict[str, Path]) -> None:
    bad = dirs["tmp"] / "corrupt.db"
    garbage = bytes(range(256)) * 16 + b"not a database"
    bad.write_bytes(garbage)
    before = sorted(p.name for p in dirs["tmp"].iterdir())
    for command in (["stats"], ["list"], ["export"], ["purge", "--yes"], ["replay"]):
        result = run("queue", *command, "-q", str(bad))
        expect_one_line_error(result, 1, str(bad), "corrupt")
        assert bad.read_bytes() == garbage
    assert sorted(p.name for p in dirs["tmp"].iterdir()) == before


def test_queue_commands_leave_an_empty_file_alone(run: Run, dirs: dict[str, Path]) -> None:
    # Given an empty file where a queue was expected
    empty = dirs["tmp"] / "empty.db"
    empty.write_bytes(b"")
    empty.chmod(0o644)
    # When any queue command is pointed at it
    for command in (["stats"], ["list"], ["export"], ["purge", "--yes"], ["replay"]):
        result = run("queue", *command, "-q", str(empty))
        # Then it is one clear error, and the file is neither written nor re-permissioned
        expect_one_line_error(result, 1, str(empty), "empty file")
        assert empty.read_bytes() == b""
        assert empty.stat().st_mode & 0o777 == 0o644


def test_queue_replay_reports_progress_and_counts(run: Run, dirs: dict[str, Path]) -> None:
    # Given three buffered messages and the namespaces back up
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    run("namespace", "up", "primary")
    run("namespace", "up", "secondary")
    # When replayed with --json
    result = ok_json(run("queue", "replay", "-q", str(queue), "--json"))
    # Then all three were sent and nothing waits any more
    assert sum(r["replayed"] for r in result) == 3
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 0


def test_queue_config_supplies_path(run: Run, dirs: dict[str, Path]) -> None:
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    config = dirs["tmp"] / "geogateway.toml"
    config.write_text('primary = "local://primary"\nsecondary = "local://secondary"\n'
                      'entity = "orders"\n[durable_queue]\npath = "buffer.db"\n')
    assert ok_json(run("queue", "stats", "--config", str(config), "--json"))["count"] == 3
    run("namespace", "up", "primary")
    run("namespace", "up", "secondary")
    replayed = ok_json(run("queue", "replay", "--config", str(config), "--json"))
    assert replayed[0]["replayed"] == 3


# -- drill --------------------------------------------------------------------------------


def test_drill_json_to_stdout(run: Run) -> None:
    report = ok_json(run("drill", "--messages", "300", "--json", "-"))
    assert report["scenario"] == "primary-outage" and report["mode"] == "passive"
    assert report["messages"] == report["sent"] == report["delivered"] == 300
    assert report["lost"] == 0 and report["duplicates_delivered"] == 0
    assert report["passed"] is True
    assert report["failovers"] >= 1
    assert report["failover_seconds"] and report["failover_p99_seconds"] is not None
    for key in ("duplicates_suppressed", "buffered", "replayed", "replay_seconds",
                "elapsed_seconds"):
        assert key in report


def test_drill_table_and_json_file(run: Run, dirs: dict[str, Path]) -> None:
    path = dirs["tmp"] / "report.json"
    code, out, _ = run("drill", "--messages", "200", "--scenario", "both-down", "--batch", "5",
                       "--json", str(path), "--data-dir", str(dirs["tmp"] / "drill"))
    assert code == 0
    assert "PASS" in out and "report written" in out
    report = json.loads(path.read_text())
    assert report["passed"] is True and report["buffered"] > 0
    assert report["replayed"] == report["buffered"]


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--bogus"], 2, ["--bogus"]),
        (["frobnicate"], 2, ["frobnicate"]),
        (["drill", "--mode", "bogus"], 2, ["--mode", "bogus"]),
        (["drill", "--messages", "0"], 2, ["--messages"]),
        (["drill", "--scenario", "meteor"], 2, ["--scenario"]),
        (["send", "-e", "orders", "--mode", "bogus", "a"], 2, ["--mode"]),
        (["send", "-e", "orders"], 2, ["bodies"]),
        (["send", "a"], 2, ["--entity"]),
        (["send", "-e", "orders", "--message-id", "x", "a", "b"], 2, ["--message-id"]),
        (["send", "--primary", "local://a", "--secondary", "local://a", "-e", "x", "m"], 2,
         ["same namespace"]),
        (["send", "--primary", "local://secondary", "-e", "x", "m"], 2, ["same namespace"]),
        (["send", "--primary", "local://a/b", "-e", "x", "m"], 1, ["local://a/b"]),
        (["receive", "-e", "orders", "--max", "0"], 2, ["--max"]),
        (["queue", "stats", "-q", "/nonexistent.db"], 1, ["/nonexistent.db"]),
        (["queue", "stats"], 2, ["--queue"]),
        (["queue", "replay", "-q", "/nonexistent.db"], 1, ["/nonexistent.db"]),
        (["queue", "frobnicate"], 2, ["frobnicate"]),
        (["namespace", "down", "a/b"], 2, ["a/b"]),
        (["namespace", "status", "bad name"], 2, ["bad name"]),
        (["namespace", "faults", "primary", "--lost-replies", "2"], 2, ["--lost-replies"]),
        # A name that is not primary, secondary, configured or existing: a typo would
        # take down a namespace nobody uses and leave the real one up.
        (["namespace", "down", "nosuch"], 2, ["'nosuch'", "known namespaces: primary, "
                                              "secondary", "--new"]),
        (["namespace", "up", "nosuch"], 2, ["'nosuch'", "primary, secondary"]),
        (["namespace", "faults", "nosuch", "--latency", "1"], 2, ["'nosuch'"]),
        (["namespace", "status", "primary", "nosuch"], 2, ["'nosuch'"]),
        # Text that is not valid Unicode (what Python makes of argv bytes that are not
        # UTF-8) and endpoints that are not host[:port].
        (["send", "-e", "orders", "--message-id", "id\udcff", "a"], 1, ["message_id"]),
        (["send", "-e", "orders", "caf\udce9"], 1, ["body", "Unicode"]),
        (["send", "--primary", "sb://host:abc", "-e", "x", "m"], 1, ["sb://host:abc"]),
        (["send", "--primary", "sb://[::1", "-e", "x", "m"], 1, ["sb://[::1"]),
        (["receive", "--secondary", "sb://host:99999", "-e", "x"], 1, ["sb://host:99999"]),
    ],
)
def test_bad_input(run: Run, args: list[str], code: int, words: list[str]) -> None:
    expect_one_line_error(run(*args), code, *words)
    assert not Path("/nonexistent.db").exists()


def test_send_to_a_corrupt_queue_file(run: Run, dirs: dict[str, Path]) -> None:
    bad = dirs["tmp"] / "corrupt.db"
    bad.write_bytes(b"garbage" * 100)
    expect_one_line_error(
        run("send", "-e", "orders", "--durable-queue", str(bad), "a"), 1, str(bad))
    assert bad.read_bytes() == b"garbage" * 100


def write_config(tmp: Path, text: str) -> Path:
    path = tmp / "geogateway.toml"
    path.write_text(text)
    return path


def test_invalid_toml(run: Run, dirs: dict[str, Path]) -> None:
    config = write_config(dirs["tmp"], "entity = = 'orders'\n")
    for args in (["send", "a"], ["receive"], ["queue", "stats"]):
        expect_one_line_error(run(*args, "--config", str(config)), 1, str(config), "TOML")


def test_config_file_that_is_not_utf8(run: Run, dirs: dict[str, Path]) -> None:
    config = dirs["tmp"] / "latin1.toml"
    config.write_bytes('primary = "local://primary"\nsecondary = "local://secondary"\n'
                       'entity = "r\u00e9gion"\n'.encode("latin-1"))
    for args in (["send", "a"], ["receive"], ["queue", "stats"]):
        expect_one_line_error(run(*args, "--config", str(config)), 1, str(config), "UTF-8")


def test_failback_env_that_is_not_a_boolean(run: Run, dirs: dict[str, Path],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(dirs["tmp"], 'primary = "local://primary"\nsecondary = '
                          '"local://secondary"\nentity = "orders"\n')
    monkeypatch.setenv("GEOGATEWAY_FAILBACK", "maybe")
    expect_one_line_error(run("send", "--config", str(config), "a"), 1,
                          "GEOGATEWAY_FAILBACK", "maybe")


def test_unknown_config_key(run: Run, dirs: dict[str, Path]) -> None:
    config = write_config(dirs["tmp"], 'primary = "local://primary"\nsecondary = '
                          '"local://secondary"\nentity = "orders"\nbogus = 1\n')
    expect_one_line_error(run("send", "--config", str(config), "a"), 1, "bogus")
    expect_one_line_error(run("queue", "stats", "--config", str(config)), 1, "bogus")


def test_missing_config_file(run: Run, dirs: dict[str, Path]) -> None:
    missing = dirs["tmp"] / "missing.toml"
    expect_one_line_error(run("send", "--config", str(missing), "a"), 1, str(missing))


# -- secrets ------------------------------------------------------------------------------


def secret_config(tmp: Path, **extra: str) -> Path:
    lines = [f'{k} = "{v}"' for k, v in extra.items()]
    return write_config(tmp, "\n".join([
        'entity = "orders"', 'secondary = "local://secondary"', *lines,
        "[primary]", f'connection_string = "{CONN}"', ""]))


def test_secrets_stay_out_of_output(run: Run, dirs: dict[str, Path]) -> None:
    config = secret_config(dirs["tmp"])
    results = [
        run("send", "--config", str(config), "hello"),
        run("send", "--config", str(config), "--json", "hello"),
        run("receive", "--config", str(config), "--wait", "0.1"),
        run("send", "--primary", CONN, "-e", "orders", "hello"),
    ]
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    results.append(run("queue", "replay", "-q", str(queue), "--config", str(config)))
    for result in results:
        assert SECRET not in result[1] + result[2], result
        assert "Traceback" not in result[2]


def test_secret_in_bad_config_stays_out(run: Run, dirs: dict[str, Path]) -> None:
    config = secret_config(dirs["tmp"], bogus=f"SharedAccessKey={SECRET}=")
    result = run("send", "--config", str(config), "hello")
    expect_one_line_error(result, 1)
    assert SECRET not in result[1] + result[2]


# -- as a real process --------------------------------------------------------------------


def test_process_happy_path(dirs: dict[str, Path]) -> None:
    code, out, err = run_process("--version", cwd=dirs["tmp"])
    assert code == 0 and "geogateway" in out
    code, out, err = run_process("namespace", "down", "primary", cwd=dirs["tmp"])
    assert code == 0 and "down" in out and err == ""
    assert (dirs["data"] / "primary.control.json").exists()
    code, out, _ = run_process("namespace", "status", "--json", cwd=dirs["tmp"])
    assert code == 0
    assert {e["name"]: e["up"] for e in json.loads(out)} == {"primary": False,
                                                            "secondary": True}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--bogus"], 2),
        (["frobnicate"], 2),
        (["drill", "--mode", "bogus"], 2),
        (["queue", "stats", "-q", "/nonexistent.db"], 1),
        (["send", "-e", "orders"], 2),
        (["namespace", "down", "nosuch"], 2),
        # A command-line byte that is not UTF-8 (0xff) in a message id and in a body.
        (["send", "-e", "orders", "--message-id", "id\udcff", "a"], 1),
        (["send", "-e", "orders", "caf\udce9"], 1),
        (["send", "--primary", "sb://host:abc", "-e", "orders", "a"], 1),
    ],
)
def test_process_bad_input(dirs: dict[str, Path], args: list[str], code: int) -> None:
    expect_one_line_error(run_process(*args, cwd=dirs["tmp"]), code)


def test_process_corrupt_queue_file(dirs: dict[str, Path]) -> None:
    bad = dirs["tmp"] / "corrupt.db"
    garbage = os.urandom(4096)
    bad.write_bytes(garbage)
    mode = bad.stat().st_mode
    expect_one_line_error(run_process("queue", "stats", "-q", str(bad), cwd=dirs["tmp"]), 1,
                          str(bad))
    assert bad.read_bytes() == garbage and bad.stat().st_mode == mode
    assert not Path(f"{bad}-wal").exists() and not Path(f"{bad}-journal").exists()


def test_process_bad_config(dirs: dict[str, Path]) -> None:
    config = write_config(dirs["tmp"], "[[[\n")
    expect_one_line_error(run_process("send", "--config", str(config), "a", cwd=dirs["tmp"]),
                          1, str(config))


def test_process_config_that_is_not_utf8(dirs: dict[str, Path]) -> None:
    config = dirs["tmp"] / "latin1.toml"
    config.write_bytes(b'entity = "r\xe9gion"\n')
    expect_one_line_error(run_process("send", "--config", str(config), "a", cwd=dirs["tmp"]),
                          1, str(config), "UTF-8")


def test_process_purge_needs_yes(dirs: dict[str, Path], run: Run) -> None:
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    expect_one_line_error(run_process("queue", "purge", "-q", str(queue), cwd=dirs["tmp"]), 2,
                          "--yes")
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 3


def test_process_secrets_even_verbose(dirs: dict[str, Path]) -> None:
    config = secret_config(dirs["tmp"])
    for first, args in ((True, ["-vvv", "send", "--config", str(config), "hello"]),
                        (False, ["-vvv", "send", "--primary", CONN, "-e", "orders",
                                 "--secondary", "local://secondary", "hello"])):
        result = run_process(*args, cwd=dirs["tmp"])
        # The primary's host does not resolve: the SDK's debug lines and the failover
        # warning are logged, redacted, and the message goes to the secondary (which
        # stays the active namespace for the second send).
        assert SECRET not in result[1] + result[2]
        assert result[0] == 0 and "Traceback" not in result[2], result
        assert "secondary" in result[1]
        if first:
            assert "failover" in result[2] and "azure." in result[2]
