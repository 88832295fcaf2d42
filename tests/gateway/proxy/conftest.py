from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus.aio import ServiceBusClient

from gateway.geo import GatewayConfig
from gateway.proxy import Proxy
from gateway.transports import LocalTransport

QUEUE = "orders"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def local_config(tmp_path: Path, data_dir: Path, entity: str = QUEUE) -> GatewayConfig:
    """Two embedded local namespaces, passive, with a durable queue."""
    return GatewayConfig.load(env={}, overrides={
        "primary": "local://primary", "secondary": "local://secondary", "entity": entity,
        "data_dir": str(data_dir), "state_dir": str(tmp_path / "state"),
        "durable_queue": {"path": str(tmp_path / "buffer.db")},
    })


@pytest.fixture
def config(tmp_path: Path, data_dir: Path) -> GatewayConfig:
    return local_config(tmp_path, data_dir)


@pytest.fixture
async def proxy(config: GatewayConfig) -> AsyncIterator[Proxy]:
    # No recovery task: the tests read the namespaces themselves.
    async with Proxy(config, recovery=False) as p:
        yield p


def client(conn_str: str) -> ServiceBusClient:
    # A short socket timeout: the SDK waits that long for frames that do not come.
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0, socket_timeout=0.05)


async def drain_local(data_dir: Path, namespace: str, queue: str = QUEUE) -> list[str]:
    """The MessageIds waiting in ``queue`` of local namespace ``namespace`` (taken)."""
    ids: list[str] = []
    async with LocalTransport(namespace, data_dir=data_dir) as local:
        while got := await local.receive(queue, max_messages=100):
            ids += [m.message_id for m in got]
            for m in got:
                await local.complete(m)
    return ids
