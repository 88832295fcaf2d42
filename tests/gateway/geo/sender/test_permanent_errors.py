"""A send that fails with a gateway error that is neither transient nor a refusal (a
``ConfigError``, an ``OwnershipLost`` ...): it is permanent, handled as a refusal is:
raised to the caller, never buffered, never failed over, no namespace marked down."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_queue import DurableQueue
from gateway.transports import FaultyTransport
from replication import ConfigError, Message
from tests.gateway.conftest import Namespaces, SenderFactory

pytestmark = pytest.mark.anyio


@pytest.fixture
def queue(tmp_path: Path):
    q = DurableQueue(tmp_path / "buffer.db")
    yield q
    q.close()


async def test_passive_raises_a_permanent_error_without_failing_over_or_buffering(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, queue: DurableQueue,
) -> None:
    # Given a passive sender with a durable queue, and a primary that fails for good
    sender = make_sender(durable_queue=queue)
    primary.fail_next(1, ConfigError("the primary's set-up is broken"))
    # When it sends / Then the error is raised
    with pytest.raises(ConfigError, match="set-up is broken"):
        await sender.send(Message("a", message_id="m1"))
    # And nothing was buffered or failed over, and no namespace is marked down
    assert queue.count() == 0 and sender.backlog == frozenset()
    assert secondary.calls.count("send") == 0
    assert sender.down == frozenset() and sender.roles.active == "primary"
    # And the next send goes to the primary as before
    result = await sender.send(Message("b", message_id="m2"))
    assert result.namespaces == ("primary",)


async def test_passive_never_buffers_a_permanent_error_as_no_namespace_up(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, queue: DurableQueue,
) -> None:
    # Given the primary down and a secondary that fails for good
    sender = make_sender(durable_queue=queue)
    primary.go_down()
    secondary.fail_next(1, ConfigError("the secondary's set-up is broken"))
    # When it sends / Then the secondary's error is raised, nothing is buffered
    with pytest.raises(ConfigError, match="secondary's set-up"):
        await sender.send(Message("a", message_id="m1"))
    assert queue.count() == 0 and sender.backlog == frozenset()


async def test_active_raises_a_permanent_error_of_either_namespace(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, queue: DurableQueue,
) -> None:
    # Given an active sender and a primary that fails for good
    sender = make_sender(mode="active", durable_queue=queue)
    primary.fail_next(1, ConfigError("the primary's set-up is broken"))
    # When it sends / Then the error is raised, though the secondary took its copy
    with pytest.raises(ConfigError):
        await sender.send(Message("a", message_id="m1"))
    assert ns.count("secondary") == 1
    # And the primary's copy is not buffered, the primary not marked down
    assert queue.count() == 0 and sender.down == frozenset()
