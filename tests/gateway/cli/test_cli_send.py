"""``geogateway send``: -q, the summary past ten rows, application properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gateway.cli.cli_support import Run, expect_one_line_error, ok_json, run_process

pytestmark = pytest.mark.usefixtures("dirs")


def table_rows(out: str) -> list[str]:
    """The body rows of a rich table (the lines between its rules that hold an id)."""
    return [line for line in out.splitlines()
            if line.startswith("│") and not line.startswith("│ message_id")]


def test_send_takes_the_queue_file_as_q_like_the_queue_commands(
    run: Run, dirs: dict[str, Path]
) -> None:
    # Given both namespaces down
    run("namespace", "down", "primary")
    run("namespace", "down", "secondary")
    queue = dirs["tmp"] / "buffer.db"
    # When sent with -q FILE (and with the long form)
    assert all(r["buffered"] for r in ok_json(run("send", "-e", "orders", "--json",
                                                  "-q", str(queue), "a", "b")))
    assert ok_json(run("send", "-e", "orders", "--json", "--durable-queue", str(queue),
                       "c"))[0]["buffered"]
    # Then the queue commands find them there with the same option
    assert ok_json(run("queue", "stats", "-q", str(queue), "--json"))["count"] == 3


def test_a_few_messages_are_a_row_each_and_no_summary(run: Run) -> None:
    code, out, _ = run("send", "-e", "orders", "--count", "10")
    assert code == 0
    assert len(table_rows(out)) == 10
    assert "sent 10 messages" not in out and "first 10" not in out


def test_many_messages_are_ten_rows_and_a_summary_line(dirs: dict[str, Path]) -> None:
    # When 300 messages are sent from a real process
    code, out, err = run_process("send", "-e", "orders", "--count", "300", cwd=dirs["tmp"])
    # Then the table holds the first 10, says so, and one line sums them all up
    assert code == 0, err
    assert len(table_rows(out)) == 10
    assert "the first 10; --json lists all" in out
    assert out.strip().splitlines()[-1] == "sent 300 messages; accepted by primary 300; buffered 0"
    # And --json still lists every message
    code, out, _ = run_process("send", "-e", "orders", "--count", "300", "--json",
                               cwd=dirs["tmp"])
    assert code == 0 and len(json.loads(out)) == 300


def test_the_summary_counts_both_namespaces_buffered_and_failed_over(
    run: Run, dirs: dict[str, Path]
) -> None:
    # Active mode: every message accepted by both
    code, out, _ = run("send", "-e", "orders", "--count", "12", "--mode", "active")
    assert code == 0
    assert out.strip().splitlines()[-1] == (
        "sent 12 messages; accepted by primary 12, secondary 12; by both 12; buffered 0")
    # The primary down: passive sends fail over to the secondary (each went elsewhere
    # than the primary asked for, and one line on stderr says so)
    run("namespace", "down", "primary")
    code, out, err = run("send", "-e", "orders", "--count", "11")
    assert code == 0
    assert out.strip().splitlines()[-1] == (
        "sent 11 messages; accepted by secondary 11; buffered 0; failed over 11")
    assert "11 of 11 messages went to secondary, not to primary as asked" in err
    # Both down: buffered, per destination
    run("namespace", "down", "secondary")
    code, out, _ = run("send", "-e", "orders", "--count", "11", "-q",
                       str(dirs["tmp"] / "buffer.db"))
    assert code == 0
    assert out.strip().splitlines()[-1] == (
        "sent 11 messages; accepted by none; buffered 11 for */orders")


def test_properties_are_sent_as_text_or_json_scalars(run: Run) -> None:
    # When sent with a text property and typed ones
    assert run("send", "-e", "orders", "--property", "region=eu west",
               "--property", "n:=5", "--property", "ok:=true", "--property", "id=007",
               "x")[0] == 0
    # Then they arrive as given: text stays text, := gives JSON's type
    [got] = ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.3"))
    assert got["properties"] == {"region": "eu west", "n": 5, "ok": True, "id": "007"}


@pytest.mark.parametrize(
    ("value", "kind"), [('{"a": 1}', "dict"), ('[{"a": 1}, {"b": 2}]', "list")])
def test_a_nested_property_is_the_one_line_message_rejected_error(
    run: Run, dirs: dict[str, Path], value: str, kind: str
) -> None:
    # When a property is a nested dict, or a list of dicts
    result = run_process("send", "-e", "orders", "--property", f"tags:={value}", "x",
                         cwd=dirs["tmp"])
    # Then it is one line naming the property and the allowed types, and nothing is sent
    expect_one_line_error(result, 1, f"property 'tags' is a {kind}",
                          "str, int, float, bool or None")
    assert ok_json(run("receive", "-e", "orders", "--json", "--wait", "0.2")) == []


@pytest.mark.parametrize(
    ("option", "words"),
    [("tags", ["NAME=TEXT or NAME:=JSON", "'tags'"]), ("=x", ["NAME=TEXT"]),
     ("n:=abc", ["JSON value", "'abc'", "n=TEXT"])],
)
def test_a_malformed_property_option_is_a_usage_error(
    run: Run, option: str, words: list[str]
) -> None:
    expect_one_line_error(run("send", "-e", "orders", "--property", option, "x"), 2, *words)


def test_a_send_that_went_elsewhere_than_asked_says_so(run: Run) -> None:
    # Given a primary whose host name is mistyped (it does not resolve)
    args = ("send", "-e", "orders", "--primary", "contoso-east.invalid",
            "--secondary", "local://secondary", "--json", "hi")
    for _ in range(2):  # the second run finds the secondary active since the first
        # When a message is sent
        code, out, err = run(*args)
        # Then the secondary took it, --json says it failed over, and one line on
        # stderr says it went elsewhere than asked
        assert code == 0, err
        [row] = json.loads(out)
        assert row["namespaces"] == ["secondary"] and row["failed_over"] is True
        lines = [line for line in err.splitlines() if "not to contoso-east" in line]
        assert len(lines) == 1, err
        assert "secondary" in lines[0]


def test_a_send_where_asked_prints_nothing_on_stderr(run: Run) -> None:
    code, out, err = run("send", "-e", "orders", "--json", "hi")
    assert code == 0 and err == ""
    assert json.loads(out)[0]["failed_over"] is False
