"""The official Service Bus emulator's configuration file, read unchanged: its sample
starts ``geogateway emulator`` and the Azure SDK uses its entities; what a file asks
for that is not emulated is refused, by name, in one line."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from gateway.emulator import Emulator, load_config
from gateway.transports import CorrelationFilter, LocalNamespace, LocalTransport, Rule, SqlFilter
from replication import ConfigError, Message, MessageRejected
from tests.gateway.cli.cli_support import Run, expect_one_line_error

SAMPLE = Path(__file__).parent / "official" / "Config.json"


def sample() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAMPLE.read_text())
    return data


def namespace(data: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = data["UserConfig"]["Namespaces"][0]
    return found


def test_the_sample_reads_as_the_official_emulator_would_serve_it() -> None:
    config = load_config(SAMPLE)
    # One namespace, on the official emulator's port
    assert config.namespaces == {"sbemulatorns": 5672}
    [queue] = config.queues
    assert (queue.name, queue.lock_duration, queue.max_delivery_count,
            queue.default_message_time_to_live, queue.forward_to) == (
        "queue.1", 60.0, 3, 3600.0, None)
    [topic] = config.topics
    assert topic.name == "topic.1" and topic.default_message_time_to_live == 3600.0
    subs = {s.name: s for s in topic.subscriptions}
    assert list(subs) == ["subscription.1", "subscription.2", "subscription.3",
                          "subscription.4"]
    assert subs["subscription.1"].rules == (Rule(name="app-prop-filter-1", filter=CorrelationFilter(
        content_type="application/text", correlation_id="id1", subject="subject1",
        message_id="msgid1", reply_to="someQueue", reply_to_session_id="sessionId",
        session_id="session1", to="xyz")),)
    assert subs["subscription.2"].rules[0].filter == CorrelationFilter(
        properties={"prop1": "value1"})
    assert subs["subscription.3"].rules == ()
    rule = subs["subscription.4"].rules[0]
    assert rule.filter == SqlFilter("sys.MessageId = '123456' AND userProp1 = 'value1'")
    assert rule.action is not None and rule.action.expression == "SET sys.To = 'Entity'"
    assert config.logging == ("file",)


def _start(*args: str, data: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "emulator", "--json", "--data-dir", str(data),
         *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONWARNINGS": "error"})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=20)
        raise AssertionError(proc.stderr.read() if proc.stderr else "no ready line")
    return proc, json.loads(line)["namespaces"]


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    return err


def _receive(c: ServiceBusClient, subscription: str, count: int) -> list[Any]:
    got: list[Any] = []
    with c.get_subscription_receiver("topic.1", subscription, max_wait_time=3) as r:
        while len(got) < count:
            more = r.receive_messages(max_message_count=count - len(got), max_wait_time=3)
            if not more:
                break
            got += more
        for m in got:
            r.complete_message(m)
        assert r.receive_messages(max_wait_time=0.2) == []
    return got


def test_the_official_sample_starts_the_emulator_unchanged(tmp_path: Path) -> None:
    # Given the official emulator's sample configuration, as published
    before = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    # When geogateway emulator is started on it (its namespace on a free port)
    proc, ready = _start("--config", str(SAMPLE), "-n", "sbemulatorns=0", data=tmp_path)
    try:
        conn = ready["sbemulatorns"]["connection_string"]
        with ServiceBusClient.from_connection_string(conn, retry_total=0) as c:
            # Then the SDK uses its queue
            with c.get_queue_sender("queue.1") as s:
                s.send_messages(ServiceBusMessage("q", message_id="q1"))
            with c.get_queue_receiver("queue.1", max_wait_time=3) as r:
                [m] = r.receive_messages(max_wait_time=3)
                assert m.message_id == "q1"
                r.complete_message(m)
            # and its topic: each subscription gets what its rules select
            with c.get_topic_sender("topic.1") as s:
                s.send_messages([
                    ServiceBusMessage("all fields", message_id="msgid1", correlation_id="id1",
                                      content_type="application/text", subject="subject1",
                                      reply_to="someQueue", reply_to_session_id="sessionId",
                                      session_id="session1", to="xyz"),
                    ServiceBusMessage("prop", message_id="p1",
                                      application_properties={"prop1": "value1"}),
                    ServiceBusMessage("sql", message_id="123456",
                                      application_properties={"userProp1": "value1"}),
                    ServiceBusMessage("near miss", message_id="msgid1", correlation_id="id1"),
                ])
            assert [m.message_id for m in _receive(c, "subscription.1", 1)] == ["msgid1"]
            assert [m.message_id for m in _receive(c, "subscription.2", 1)] == ["p1"]
            assert [m.message_id for m in _receive(c, "subscription.3", 4)] == [
                "msgid1", "p1", "123456", "msgid1"]
            [tagged] = _receive(c, "subscription.4", 1)
            assert (tagged.message_id, tagged.to) == ("123456", "Entity")
    finally:
        _stop(proc)
    # Its Logging.Type File: the emulator's log lines go to the data directory
    assert "namespace sbemulatorns serves on 127.0.0.1:" in (
        tmp_path / "emulator.log").read_text()
    assert hashlib.sha256(SAMPLE.read_bytes()).hexdigest() == before


def test_its_entities_go_to_every_namespace_named(tmp_path: Path) -> None:
    proc, ready = _start("--config", str(SAMPLE), "-n", "primary=0", "-n", "secondary=0",
                         "-q", "extra", "--topic", "more:a,b", data=tmp_path)
    _stop(proc)
    assert set(ready) == {"primary", "secondary"}
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=tmp_path) as ns:
            names = {e.name for e in ns.entities()}
        assert names == {"queue.1", "extra", "topic.1", *(
            f"topic.1/Subscriptions/subscription.{i}" for i in range(1, 5)),
            "more", "more/Subscriptions/a", "more/Subscriptions/b"}


def test_console_logging_goes_to_stderr(tmp_path: Path) -> None:
    path = tmp_path / "Config.json"
    data = sample()
    data["UserConfig"]["Logging"]["Type"] = "Console"
    path.write_text(json.dumps(data))
    proc, _ = _start("--config", str(path), "-n", "sbemulatorns=0", data=tmp_path / "data")
    err = _stop(proc)
    assert "namespace sbemulatorns serves on 127.0.0.1:" in err
    assert not (tmp_path / "data" / "emulator.log").exists()


def _edit(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(sample())
    change(data)
    return data


def _queue(data: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = namespace(data)["Queues"][0]["Properties"]
    return found


def _sub(data: dict[str, Any], i: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = namespace(data)["Topics"][0]["Subscriptions"][i]
    return found


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], list[str]]] = [
    ("bad duplicate window", lambda d: _queue(d).update(
        DuplicateDetectionHistoryTimeWindow="20s"), ["DuplicateDetectionHistoryTimeWindow"]),
    ("dead-letter forwarding", lambda d: _sub(d, 2)["Properties"].update(
        ForwardDeadLetteredMessagesTo="queue.1"),
     ["subscription 'subscription.3'", "ForwardDeadLetteredMessagesTo"]),
    ("unknown property", lambda d: _queue(d).update(MaxSizeInMegabytes=1024),
     ["queue 'queue.1'", "MaxSizeInMegabytes is not emulated"]),
    ("unknown filter", lambda d: _sub(d)["Rules"][0]["Properties"].update(FilterType="True"),
     ["rule 'app-prop-filter-1'", "FilterType must be Correlation or Sql"]),
    ("bad SQL", lambda d: _sub(d, 3)["Rules"][0]["Properties"]["SqlFilter"].update(
        SqlExpression="sys.MessageId = '1' AND"),
     ["subscription 'subscription.4'", "rule 'sql-filter-1'", "character 24"]),
    ("bad count", lambda d: _queue(d).update(MaxDeliveryCount=0),
     ["queue 'queue.1'", "MaxDeliveryCount"]),
    ("bad action", lambda d: _sub(d, 3)["Rules"][0]["Properties"]["Action"].update(
        SqlExpression="SET sys.MessageId = 'x'"), ["rule 'sql-filter-1'", "sys.MessageId"]),
    ("bad duration", lambda d: _queue(d).update(LockDuration="1 minute"),
     ["LockDuration", "ISO 8601"]),
    ("two namespaces", lambda d: d["UserConfig"]["Namespaces"].append(
        {"Name": "other", "Queues": [], "Topics": []}), ["lists 2 namespaces"]),
    ("bad logging", lambda d: d["UserConfig"]["Logging"].update(Type="Syslog"),
     ["Logging.Type"]),
]


@pytest.mark.parametrize(("change", "words"), [pytest.param(c, w, id=i) for i, c, w in REFUSED])
def test_what_is_not_emulated_is_refused_by_name(
        tmp_path: Path, change: Callable[[dict[str, Any]], None], words: list[str]) -> None:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(_edit(change)))
    with pytest.raises(ConfigError) as caught:
        # Read, then declared
        config = load_config(path)
        Emulator({"sbemulatorns": 0}, data_dir=tmp_path, queues=config.queues,
                 topics=config.topics)
    assert "\n" not in str(caught.value)
    for word in words:
        assert word in str(caught.value)


def test_the_command_refuses_it_in_one_line(dirs: dict[str, Path], run: Run) -> None:
    path = dirs["tmp"] / "Config.json"
    path.write_text(json.dumps(_edit(lambda d: _queue(d).update(MaxSizeInMegabytes=1024))))
    expect_one_line_error(run("emulator", "--config", str(path)), 2, "MaxSizeInMegabytes")
    path.write_text("{not json")
    expect_one_line_error(run("emulator", "--config", str(path)), 2, "not valid JSON")
    expect_one_line_error(run("emulator", "--topic", "t:a,,b"), 2, "NAME:SUB,SUB")


@pytest.mark.anyio
async def test_forwarding_and_duplicate_detection_from_the_file(tmp_path: Path) -> None:
    # Given the sample with subscription.3 forwarding to queue.1, and duplicate detection
    # on the topic
    def change(d: dict[str, Any]) -> None:
        _sub(d, 2)["Properties"].update(ForwardTo="queue.1")
        namespace(d)["Topics"][0]["Properties"].update(RequiresDuplicateDetection=True)

    data = _edit(change)
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(data))
    config = load_config(path)
    async with Emulator({"sbemulatorns": 0}, data_dir=tmp_path / "data", queues=config.queues,
                        topics=config.topics), LocalTransport(
            "sbemulatorns", data_dir=tmp_path / "data") as local:
        # When a message is sent to the topic twice
        await local.send("topic.1", [Message(b"x", message_id="m")])
        await local.send("topic.1", [Message(b"x", message_id="m")])
        # Then subscription.3's one copy is in queue.1 (the second was a duplicate)
        assert await local.receive("topic.1/Subscriptions/subscription.3") == []
        [r] = await local.receive("queue.1", max_messages=5)
        assert r.message_id == "m"
    assert config.topics[0].duplicate_detection_window == 20.0
    assert config.queues[0].duplicate_detection_window is None


@pytest.mark.anyio
async def test_requires_session_makes_the_queue_and_the_subscription_session_enabled(
        tmp_path: Path) -> None:
    # Given the sample with RequiresSession on its queue and on subscription.3 (no rules)
    def change(d: dict[str, Any]) -> None:
        _queue(d).update(RequiresSession=True)
        _sub(d, 2)["Properties"].update(RequiresSession=True)

    path = tmp_path / "Config.json"
    path.write_text(json.dumps(_edit(change)))
    config = load_config(path)
    assert [q.requires_session for q in config.queues] == [True]
    assert [s.requires_session for s in config.topics[0].subscriptions] == [
        False, False, True, False]
    # When the emulator declares them
    async with Emulator({"sbemulatorns": 0}, data_dir=tmp_path / "data",
                        queues=config.queues, topics=config.topics) as emu, LocalTransport(
            "sbemulatorns", data_dir=tmp_path / "data") as local:
        with LocalNamespace("sbemulatorns", data_dir=tmp_path / "data") as ns:
            flags = {e.name: e.requires_session for e in ns.entities()}
        # Then they are session-enabled in the namespace, and only they
        assert flags["queue.1"] and flags["topic.1/Subscriptions/subscription.3"]
        assert not flags["topic.1/Subscriptions/subscription.1"]
        # and a message without a session id is refused by the queue and by a topic
        # whose session-enabled subscription would take it
        for entity in ("queue.1", "topic.1"):
            with pytest.raises(MessageRejected, match="session"):
                await local.send(entity, [Message(b"x", message_id="no-session")])
        # And the unmodified SDK receives them a session at a time
        conn = emu.connection_string("sbemulatorns")
        async with AsyncServiceBusClient.from_connection_string(conn, retry_total=0) as c:
            async with c.get_queue_sender("queue.1") as qs, \
                    c.get_topic_sender("topic.1") as ts:
                for sender in (qs, ts):
                    await sender.send_messages([
                        ServiceBusMessage(f"{s}{n}", message_id=f"{s}{n}", session_id=s)
                        for n in range(2) for s in ("a", "b")])
            receivers = (
                c.get_queue_receiver("queue.1", session_id=NEXT_AVAILABLE_SESSION,
                                     max_wait_time=3),
                c.get_subscription_receiver("topic.1", "subscription.3", session_id="b",
                                            max_wait_time=3))
            for receiver, session in zip(receivers, ("a", "b"), strict=True):
                async with receiver as r:
                    assert r.session.session_id == session
                    got = await r.receive_messages(max_message_count=2, max_wait_time=3)
                    assert [m.message_id for m in got] == [f"{session}0", f"{session}1"]
                    for m in got:
                        await r.complete_message(m)
