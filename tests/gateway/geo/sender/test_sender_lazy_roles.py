"""AsyncGeoSender's constructor only keeps its configuration: a PostgreSQL roles store is
connected to (and migrated) when the sender starts or is first used, off the loop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway import GeoSender
from gateway.aio import AsyncGeoSender
from replication import ConfigError, Message
from tests.gateway.conftest import ENTITY, Namespaces
from tests.gateway.stores.test_postgres_connect import socket_closed_port

pytestmark = pytest.mark.anyio


def unreachable_dsn() -> tuple[str, int]:
    with socket_closed_port() as port:
        return f"postgresql://geogateway:s3cret-pw@127.0.0.1:{port}/geogateway", port


def kwargs(dsn: str, data_dir: Path, state_dir: Path) -> dict[str, object]:
    return {"primary": "local://primary", "secondary": "local://secondary", "entity": ENTITY,
            "data_dir": data_dir, "state_dir": state_dir, "roles_store": dsn,
            "recovery": False}


async def test_an_unreachable_roles_store_is_met_at_start_not_in_the_constructor(
    data_dir: Path, state_dir: Path, ns: Namespaces
) -> None:
    # Given a DSN whose port nothing listens on
    dsn, port = unreachable_dsn()
    # When a sender is constructed with it
    began = time.perf_counter()
    sender = AsyncGeoSender(**kwargs(dsn, data_dir, state_dir))  # type: ignore[arg-type]
    took = time.perf_counter() - began
    # Then the constructor returned at once, without connecting
    assert took < 0.1, f"the constructor took {took:.2f} s"
    try:
        # And starting it raises the usual clear error, never the password
        with pytest.raises(ConfigError) as caught:
            async with sender:
                pass
        message = str(caught.value)
        assert f"127.0.0.1:{port}/geogateway" in message and "unreachable" in message
        assert "s3cret-pw" not in message
        # And so does a first send without async with
        with pytest.raises(ConfigError, match="unreachable"):
            await sender.send(Message(b"x", message_id="m1"))
    finally:
        await sender.aclose()


def test_the_sync_sender_still_says_so_when_it_is_made(
    data_dir: Path, state_dir: Path, ns: Namespaces
) -> None:
    # Given a DSN whose port nothing listens on, when a sync sender is made with it,
    # then the error comes from its constructor, as before
    dsn, _port = unreachable_dsn()
    with pytest.raises(ConfigError, match="unreachable"):
        GeoSender(**kwargs(dsn, data_dir, state_dir))  # type: ignore[arg-type]
