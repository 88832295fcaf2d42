"""AsyncGeoReceiver's constructor only keeps its configuration: a PostgreSQL dedup store
is connected to (and migrated) when the receiver is opened or first used, off the loop."""

from __future__ import annotations

import time

import pytest

from gateway.aio import AsyncGeoReceiver
from replication import ConfigError, Message
from tests.gateway.conftest import ENTITY, Namespaces
from tests.gateway.stores.test_postgres_connect import socket_closed_port

pytestmark = pytest.mark.anyio


def unreachable_dsn() -> tuple[str, int]:
    with socket_closed_port() as port:
        return f"postgresql://geogateway:s3cret-pw@127.0.0.1:{port}/geogateway", port


def make(dsn: str, data_dir: object) -> AsyncGeoReceiver:
    return AsyncGeoReceiver(primary="local://primary", secondary="local://secondary",
                            entity=ENTITY, data_dir=data_dir, dedup_store=dsn, poll_wait=0.05)


async def test_an_unreachable_store_is_met_at_open_not_in_the_constructor(
    data_dir: object, ns: Namespaces
) -> None:
    # Given a DSN whose port nothing listens on
    dsn, port = unreachable_dsn()
    # When a receiver is constructed with it
    began = time.perf_counter()
    receiver = make(dsn, data_dir)
    took = time.perf_counter() - began
    # Then the constructor returned at once, without connecting
    assert took < 0.1, f"the constructor took {took:.2f} s"
    # And opening it raises the usual clear error: host and port, never the password
    with pytest.raises(ConfigError) as caught:
        async with receiver:
            pass
    message = str(caught.value)
    assert f"127.0.0.1:{port}/geogateway" in message and "unreachable" in message
    assert "s3cret-pw" not in message
    await receiver.aclose()


async def test_an_unreachable_store_is_met_at_first_use_without_async_with(
    data_dir: object, ns: Namespaces
) -> None:
    # Given a receiver constructed with an unreachable store, never opened
    dsn, _port = unreachable_dsn()
    receiver = make(dsn, data_dir)
    await ns.put("primary", Message(b"x", message_id="m1"))
    # When it is used, the same error reaches the caller
    try:
        with pytest.raises(ConfigError, match="unreachable"):
            await receiver.receive(max_wait=0.5)
    finally:
        await receiver.aclose()
