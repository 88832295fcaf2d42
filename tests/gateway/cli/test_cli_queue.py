"""``geogateway queue``: damaged files, exit codes of replay, exported file modes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.durable_queue._damage import damaged_queue
from tests.gateway.cli.cli_support import (
    Run,
    expect_one_line_error,
    ok_json,
    run_process,
)

pytestmark = pytest.mark.usefixtures("dirs")


def buffer_three(run: Run, queue: Path) -> None:
    run("namespace", "down", "primary")
    run("namespace", "down", "secondary")
    ok_json(run("send", "-e", "orders", "--json", "--durable-queue", str(queue), "a", "b", "c"))


def test_replay_of_a_file_damaged_in_the_middle_fails(run: Run, dirs: dict[str, Path]) -> None:
    # Given a queue file of 300 messages whose middle page is damaged
    queue = dirs["tmp"] / "buffer.db"
    damaged_queue(queue, "*/orders")
    # When it is replayed
    result = run("queue", "replay", "-q", str(queue))
    # Then the exit code is non-zero, with one line naming the file
    expect_one_line_error(result, 1, str(queue), "corrupt")


def test_export_to_a_file_is_private(run: Run, dirs: dict[str, Path]) -> None:
    # Given buffered messages
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    # When they are exported to a file
    exported = dirs["tmp"] / "out.jsonl"
    code, _, err = run("queue", "export", "-q", str(queue), "-o", str(exported))
    # Then the file holds them and only its owner may read it
    assert code == 0 and "exported 3" in err
    assert len(exported.read_text().splitlines()) == 3
    assert exported.stat().st_mode & 0o777 == 0o600


def test_export_over_an_existing_file_makes_it_private(run: Run, dirs: dict[str, Path]) -> None:
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    exported = dirs["tmp"] / "out.jsonl"
    exported.write_text("old\n" * 10)
    exported.chmod(0o644)
    assert run("queue", "export", "-q", str(queue), "-o", str(exported))[0] == 0
    assert exported.stat().st_mode & 0o777 == 0o600
    assert "old" not in exported.read_text()


def test_replay_while_both_namespaces_are_down_exits_3(run: Run, dirs: dict[str, Path]) -> None:
    # Given three buffered messages and both namespaces still down
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    # When replayed
    result = run("queue", "replay", "-q", str(queue), "--json")
    # Then nothing was sent, the report says so, and the exit code is 3
    code, out, err = result
    assert code == 3, result
    [report] = json.loads(out)
    assert report == {"entity": "orders", "replayed": 0, "remaining": ["*/orders"],
                      "down": ["primary", "secondary"], "why": report["why"]}
    # And why they wait is said, in the JSON and on the one error line
    assert "is down" in report["why"]["*/orders"]
    assert report["why"]["*/orders"] in err
    assert "*/orders" in err and "primary" in err and "Traceback" not in err
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 3


def test_replay_into_another_data_dir_is_refused(run: Run, dirs: dict[str, Path]) -> None:
    # Given messages buffered (as a drill does) for the namespaces of the data dir
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    other = dirs["tmp"] / "other-data"
    # When replayed into the namespaces of another data dir
    result = run("queue", "replay", "-q", str(queue), "--data-dir", str(other))
    # Then it is one clear error naming both, and nothing was sent
    expect_one_line_error(result, 1, str(dirs["data"] / "primary.db"),
                          str(other / "primary.db"))
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 3
    # And with the data dir they were buffered for, they replay
    run("namespace", "up", "primary")
    assert ok_json(run("queue", "replay", "-q", str(queue), "--json"))[0]["replayed"] == 3


def test_stats_shows_which_namespaces_the_messages_are_for(
    run: Run, dirs: dict[str, Path],
) -> None:
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    stats = ok_json(run("queue", "stats", "-q", str(queue), "--json"))
    owner = stats["destinations"][0]["owner"]
    assert str(dirs["data"] / "primary.db") in owner and "orders" in owner


def test_replay_of_a_destination_without_namespace_is_one_line(
    run: Run, dirs: dict[str, Path],
) -> None:
    # Given a queue file written through DurableQueue directly, its destination a bare entity
    from durable_queue import DurableQueue
    from replication import Message

    queue = dirs["tmp"] / "foreign.db"
    q = DurableQueue(queue)
    q.put("orders", Message(b"a", message_id="m1"))
    q.close()
    # When it is replayed / Then one line names the destination and the form expected
    expect_one_line_error(run("queue", "replay", "-q", str(queue)), 1,
                          "'orders'", "namespace/entity")
    # And the message still waits
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 1


def test_replay_of_a_damaged_file_leaves_it_byte_for_byte_and_says_so(
    dirs: dict[str, Path],
) -> None:
    # Given a damaged queue file (300 messages, a page in the middle overwritten), and
    # stderr that is not a terminal (a script, a log)
    queue = dirs["tmp"] / "buffer.db"
    damaged_queue(queue, "*/orders")
    before = sha256(queue)
    assert run_process("send", "-e", "orders", "one", cwd=dirs["tmp"])[0] == 0
    # When the installed command replays it
    code, _, err = run_process("queue", "replay", "-q", str(queue), cwd=dirs["tmp"])
    # Then it exits 1 with one error line (no blank line left by the progress display)
    assert code == 1
    assert err.startswith("error: ") and err.count("\n") == 1, repr(err)
    # And the line says what happened and what to run
    assert "replay stopped before sending anything" in err
    assert f"queue file {queue} is corrupt" in err and "it was not modified" in err
    assert f"`geogateway queue salvage -q {queue} -o NEW`" in err
    # And it is true: the file is byte for byte what it was (300 rows, no lease), and
    # nothing reached the namespaces (they hold the one message sent before)
    assert sha256(queue) == before
    status = ok_json(run_process("namespace", "status", "--json", cwd=dirs["tmp"]))
    assert sum(e["active_count"] for ns in status for e in ns["entities"]) == 1


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_salvage_copies_what_can_be_read_and_the_copy_replays(
    run: Run, dirs: dict[str, Path],
) -> None:
    # Given a queue file of 300 messages whose middle page is damaged
    queue, new = dirs["tmp"] / "buffer.db", dirs["tmp"] / "salvaged.db"
    damaged_queue(queue, "*/orders")
    before = sha256(queue)
    # When it is salvaged
    code, out, err = run("queue", "salvage", "-q", str(queue), "-o", str(new), "--json")
    # Then it exits 3 (some rows could not be read), reports them, and says what next
    assert code == 3, err
    report = json.loads(out)
    assert report["complete"] is False and report["messages"] + report["unreadable"][0][
        "count"] == 300
    [gap] = report["unreadable"]
    assert gap["table"] == "messages" and gap["destinations"] == ["*/orders"]
    assert err.startswith("warning: ") and err.count("\n") == 1
    assert f"{gap['count']} rows could not be read" in err
    assert f"geogateway queue replay -q {new}" in err
    # And the damaged file was only read
    assert sha256(queue) == before
    # And the new file replays what it holds, in order
    run("namespace", "up", "primary")
    assert ok_json(run("queue", "replay", "-q", str(new), "--json"))[0]["replayed"] == \
        report["messages"]
    # And the table form names the gap
    code, out, _ = run("queue", "salvage", "-q", str(queue), "-o", str(new), "--force")
    assert code == 3 and f"messages ids {gap['first_id']} to {gap['last_id']}" in out


def test_salvage_never_overwrites_without_force(run: Run, dirs: dict[str, Path]) -> None:
    # Given buffered messages and an output file that exists
    queue, new = dirs["tmp"] / "buffer.db", dirs["tmp"] / "salvaged.db"
    buffer_three(run, queue)
    new.write_text("keep me")
    # When it is salvaged there / Then one line says what to do, and it is untouched
    expect_one_line_error(run("queue", "salvage", "-q", str(queue), "-o", str(new)), 1,
                          f"{new} exists", "--force")
    assert new.read_text() == "keep me"
    # And the queue file itself is refused as the output, even with --force
    expect_one_line_error(
        run("queue", "salvage", "-q", str(queue), "-o", str(queue), "--force"), 1,
        "is the queue file being salvaged")
    # And an output in a directory that does not exist is one line saying so
    missing = dirs["tmp"] / "nowhere" / "salvaged.db"
    expect_one_line_error(run("queue", "salvage", "-q", str(queue), "-o", str(missing)), 1,
                          f"the directory {missing.parent} does not exist", "choose another -o")
    # And with --force a sound file is copied whole: exit 0
    code, out, _ = run("queue", "salvage", "-q", str(queue), "-o", str(new), "--force")
    assert code == 0 and "copied 3 messages" in out
    assert ok_json(run("queue", "stats", "-q", str(new), "--json"))["count"] == 3
    assert new.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("where", "words"), [
    ("missing/out.jsonl", ("does not exist", "create it or choose another -o")),
    ("afile/out.jsonl", ("is not a directory", "choose another -o")),
])
def test_export_to_a_path_that_cannot_be_written_is_one_line(
        run: Run, dirs: dict[str, Path], where: str, words: tuple[str, ...]) -> None:
    # Given buffered messages, and an output path in a missing directory or under a file
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    (dirs["tmp"] / "afile").write_text("x")
    target = dirs["tmp"] / where
    # When they are exported there
    result = run("queue", "export", "-q", str(queue), "-o", str(target))
    # Then one line names the path and says what to do, and the messages still wait
    line = expect_one_line_error(result, 1, f"cannot write {target}", *words)
    assert "Errno" not in line
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 3


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_export_into_a_directory_without_write_permission_is_one_line(
        run: Run, dirs: dict[str, Path]) -> None:
    # Given buffered messages and a directory its owner may not write
    queue = dirs["tmp"] / "buffer.db"
    buffer_three(run, queue)
    locked = dirs["tmp"] / "locked"
    locked.mkdir(mode=0o500)
    # When they are exported there / Then one line says what to do
    result = run("queue", "export", "-q", str(queue), "-o", str(locked / "out.jsonl"))
    expect_one_line_error(result, 1, "cannot write", "permission denied",
                          "choose another -o")


def test_list_of_a_file_damaged_in_the_middle_fails(run: Run, dirs: dict[str, Path]) -> None:
    # Given a queue file of 300 messages whose middle page is damaged
    queue = dirs["tmp"] / "buffer.db"
    damaged_queue(queue, "*/orders")
    # When its oldest messages are listed (they sit on pages before the damage)
    for args in ((), ("--json",), ("--destination", "*/orders"), ("--dead-letters",)):
        result = run("queue", "list", "-q", str(queue), *args)
        # Then the exit code is non-zero, with one line naming the file
        expect_one_line_error(result, 1, str(queue), "corrupt")
