"""Failover from a namespace that refuses: one round trip, and no flapping on a blip.

A namespace that refuses cleanly (it is down: connection refused, or a local namespace
taken down) said no for this send; retrying it only delays the send to the other one.
A dropped connection that works again on its immediate retry is a blip: no failover.
What is counted is the attempts made on the primary before the secondary was sent
to, never the time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from gateway.transports import FaultyTransport, LocalTransport
from gateway.transports.base import Transport
from replication import (
    Failure,
    Message,
    NamespaceRefused,
    NamespaceUnavailable,
    OperationTimeout,
    RoleState,
    TransportError,
    classify,
    retry_in_namespace,
)
from tests.gateway.conftest import ENTITY, Namespaces, Recorder, SenderFactory

pytestmark = pytest.mark.anyio


class Logged(FaultyTransport):
    """A FaultyTransport that also writes each send's namespace to a shared log, so a
    test reads the order of the sends across both namespaces."""

    def __init__(self, inner: Transport, log: list[str]) -> None:
        super().__init__(inner)
        self.log = log

    async def send(self, entity: str, messages: Sequence[Message]) -> None:
        self.log.append(self.namespace)
        await super().send(entity, messages)


def before_backup(log: list[str]) -> int:
    """The sends made to the primary before the first one to the secondary."""
    return log.index("secondary") if "secondary" in log else len(log)


@pytest.fixture
def log() -> list[str]:
    return []


@pytest.fixture
async def logged(ns: Namespaces, log: list[str]) -> tuple[Logged, Logged]:
    return (Logged(LocalTransport("primary", data_dir=ns.data_dir), log),
            Logged(LocalTransport("secondary", data_dir=ns.data_dir), log))


# -- the policy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "failure", "retried"),
    [
        (NamespaceRefused("down", namespace="a"), Failure.REFUSED, False),
        (NamespaceUnavailable("dropped", namespace="a"), Failure.TRANSIENT, True),
        (TransportError("flaky", namespace="a"), Failure.TRANSIENT, True),
        (OperationTimeout("slow", namespace="a"), Failure.UNKNOWN_OUTCOME, True),
        (ValueError("bug"), Failure.OTHER, False),
    ],
)
def test_a_refusal_is_final_for_the_namespace_and_a_blip_is_retried(
    exc: BaseException, failure: Failure, retried: bool
) -> None:
    assert classify(exc) is failure
    assert retry_in_namespace(exc) is retried


def test_a_refusal_is_still_a_namespace_outage_to_every_caller() -> None:
    # Code that catches NamespaceUnavailable or TransportError still catches a refusal
    error = NamespaceRefused("down", namespace="a")
    assert isinstance(error, NamespaceUnavailable) and isinstance(error, TransportError)


# -- the sender ---------------------------------------------------------------------


async def test_a_namespace_taken_down_fails_over_after_one_attempt(
    make_sender: SenderFactory, ns: Namespaces, logged: tuple[Logged, Logged],
    log: list[str], hooks: Recorder,
) -> None:
    # Given a passive sender whose primary local namespace is taken down, as
    # `geogateway namespace down primary` does from another process
    primary, secondary = logged
    sender = make_sender(primary=primary, secondary=secondary, hooks=hooks)
    await sender.send(Message("warm", message_id="w"))
    ns.primary.down()
    log.clear()
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then the secondary took it after one attempt on the primary, and the roles swapped
    assert result.namespaces == ("secondary",) and result.failed_over
    assert before_backup(log) == 1
    assert log == ["primary", "secondary"]
    assert sender.roles.active == "secondary" and "primary" in sender.down
    assert len(hooks.named("on_failover")) == 1
    assert await ns.drain_ids("secondary") == ["m1"]


async def test_an_injected_outage_fails_over_after_one_attempt(
    make_sender: SenderFactory, ns: Namespaces, logged: tuple[Logged, Logged],
    log: list[str],
) -> None:
    # Given a passive sender whose primary is down (FaultyTransport.go_down)
    primary, secondary = logged
    sender = make_sender(primary=primary, secondary=secondary)
    primary.go_down()
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then one attempt on the primary, then the secondary
    assert result.namespaces == ("secondary",) and result.failed_over
    assert log == ["primary", "secondary"]


@pytest.mark.parametrize("error", [NamespaceUnavailable, OperationTimeout])
async def test_one_dropped_connection_is_retried_on_the_same_namespace_with_no_role_swap(
    make_sender: SenderFactory, ns: Namespaces, logged: tuple[Logged, Logged],
    log: list[str], hooks: Recorder, error: type[TransportError],
) -> None:
    # Given a passive sender whose primary fails one send once (a dropped connection,
    # or a reply lost with it)
    primary, secondary = logged
    sender = make_sender(primary=primary, secondary=secondary, hooks=hooks)
    primary.fail_next(1, error)
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then the retry on the primary took it: no failover, no role swap, no down mark
    assert result.namespaces == ("primary",) and not result.failed_over
    assert log == ["primary", "primary"]
    assert sender.roles.active == "primary" and sender.roles.generation == 0
    assert sender.down == frozenset() and hooks.named("on_failover") == []
    assert await ns.drain_ids("primary") == ["m1"]
    assert await ns.drain_ids("secondary") == []
    # And the next send goes to the primary as before
    again = await sender.send(Message("b", message_id="m2"))
    assert again.namespaces == ("primary",)


async def test_a_refused_send_with_both_namespaces_down_is_buffered_after_one_attempt_each(
    make_sender: SenderFactory, ns: Namespaces, logged: tuple[Logged, Logged],
    log: list[str], tmp_path,
) -> None:
    # Given a passive sender with a durable queue and both namespaces taken down
    primary, secondary = logged
    sender = make_sender(primary=primary, secondary=secondary,
                         durable_queue=tmp_path / "buffer.db")
    ns.primary.down()
    ns.secondary.down()
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then one attempt each, and the message waits in the durable queue
    assert log == ["primary", "secondary"]
    assert result.namespaces == () and result.buffered == (f"*/{ENTITY}",)


async def test_a_dropped_connection_is_retried_at_once_and_later_retries_back_off(
    make_sender: SenderFactory, ns: Namespaces, logged: tuple[Logged, Logged],
    log: list[str],
) -> None:
    # Given a passive sender that records its backoffs
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    primary, secondary = logged
    sender = make_sender(primary=primary, secondary=secondary, sleep=sleep)
    # When the primary drops one send's connection
    primary.fail_next(1, NamespaceUnavailable)
    assert (await sender.send(Message("a", message_id="m1"))).namespaces == ("primary",)
    # Then the retry went at once, with no backoff (a reconnect needs no pause)
    assert waits == []
    # When it drops two in a row
    primary.fail_next(2, NamespaceUnavailable)
    result = await sender.send(Message("b", message_id="m2"))
    # Then the third attempt waited one jittered backoff, and the primary took it
    assert result.namespaces == ("primary",) and not result.failed_over
    assert len(waits) == 1 and 0 <= waits[0] <= 2 * sender.policy.retry.initial_backoff
    assert log == ["primary"] * 5


class SlowDisk:
    """A one-process role store (like the JSON file) whose writes take as long as the
    test says: each ``swap`` waits until ``release()`` (at most 5 s)."""

    shared = False

    def __init__(self) -> None:
        self.released = threading.Event()
        self.written: list[RoleState] = []

    def release(self) -> None:
        self.released.set()

    def load(self, primary: str, secondary: str) -> RoleState:
        return self.written[-1] if self.written else RoleState.initial(primary, secondary)

    def swap(self, expected: RoleState, new: RoleState) -> RoleState:
        self.released.wait(5.0)
        self.written.append(new)
        return new

    def close(self) -> None:
        pass


async def test_a_failover_does_not_wait_for_the_roles_file_and_it_is_written_after(
    make_sender: SenderFactory, ns: Namespaces, logged: tuple[Logged, Logged],
) -> None:
    # Given a passive sender whose roles go to a store that writes slowly (an fsync on
    # a busy disk), and its primary taken down
    primary, secondary = logged
    disk = SlowDisk()
    sender = make_sender(primary=primary, secondary=secondary, roles_store=disk)
    ns.primary.down()
    # When it sends
    result = await sender.send(Message("a", message_id="m1"))
    # Then the send returned, failed over, before the write ended
    assert result.namespaces == ("secondary",) and result.failed_over
    assert sender.roles.active == "secondary" and disk.written == []
    # And once the disk answers, the new roles are written (by close at the latest)
    disk.release()
    await sender.aclose()
    assert [s.active for s in disk.written] == ["secondary"]
