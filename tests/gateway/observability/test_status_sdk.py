"""The status of a gateway on Azure namespaces: the Service Bus and Event Hubs SDK
transports probing the project's AMQP emulator, taken down and hung through the control
files that ``geogateway namespace down`` writes."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from gateway.emulator import Emulator, EventHubSpec
from gateway.geo import GatewayConfig, NamespaceConfig
from gateway.observability import GatewayStatus, collect_status, create_app
from gateway.transports import LocalNamespace

pytestmark = pytest.mark.anyio

QUEUE, HUB = "orders", "telemetry"


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with Emulator({"primary": 0, "secondary": 0}, data_dir=tmp_path / "data",
                        queues=[QUEUE], event_hubs=[EventHubSpec(name=HUB, partitions=2)]
                        ) as emu:
        yield emu


async def until(config: GatewayConfig, states: dict[str, str], *, deadline: float = 1.5,
                within: float = 15.0) -> GatewayStatus:
    """Collect until the namespaces are in ``states`` (the emulator applies a control
    file's change within 0.1 s; a new SDK connection may take most of a second on a
    busy machine)."""
    give_up = time.monotonic() + within
    while True:
        status = await collect_status(config, probe_deadline=deadline)
        found = {n.name: n.state for n in status.namespaces}
        if found == states or time.monotonic() > give_up:
            assert found == states, status
            return status
        await anyio.sleep(0.05)


def sdk_config(emulator: Emulator, kind: str, state_dir: Path) -> GatewayConfig:
    return GatewayConfig(
        primary=NamespaceConfig(connection_string=emulator.connection_string("primary"),
                                name="primary", kind=kind),
        secondary=NamespaceConfig(connection_string=emulator.connection_string("secondary"),
                                  name="secondary", kind=kind),
        entity=QUEUE if kind == "servicebus" else HUB, state_dir=state_dir)


@pytest.mark.parametrize("kind", ["servicebus", "eventhubs"])
async def test_sdk_namespaces_up_and_down(emulator: Emulator, tmp_path: Path,
                                          kind: str) -> None:
    config = sdk_config(emulator, kind, tmp_path / "state")
    status = await until(config, {"primary": "up", "secondary": "up"})
    assert status.ready and {n.kind for n in status.namespaces} == {kind}
    assert "SAS_KEY_VALUE" not in repr(status.to_json())  # the emulator's key
    LocalNamespace("primary", data_dir=tmp_path / "data").down()
    status = await until(config, {"primary": "down", "secondary": "up"})
    assert status.ready
    LocalNamespace("secondary", data_dir=tmp_path / "data").down()
    status = await until(config, {"primary": "down", "secondary": "down"})
    assert not status.ready


# The SDK transports' own probe of a hung namespace, given up at their probe_timeout,
# leaves the SDK's half-opened socket for the garbage collector (a ResourceWarning from
# azure's pyamqp connection): the transports' behaviour, not the status's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("kind", ["servicebus", "eventhubs"])
async def test_a_hung_sdk_namespace_has_no_answer_within_the_deadline(
        emulator: Emulator, tmp_path: Path, kind: str) -> None:
    config = sdk_config(emulator, kind, tmp_path / "state")
    await until(config, {"primary": "up", "secondary": "up"})
    LocalNamespace("primary", data_dir=tmp_path / "data").down()
    LocalNamespace("secondary", data_dir=tmp_path / "data").hang()
    status = await until(config, {"primary": "down", "secondary": "no answer"}, deadline=0.5)
    assert not status.ready
    assert "secondary no answer (no answer within 0.5 s)" in status.not_ready[0]


WRONG_KEY = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3Jvbmc="


async def test_a_namespace_refusing_its_key_is_shown_refused_with_what_to_check(
        emulator: Emulator, tmp_path: Path) -> None:
    # Given a gateway whose primary's key is wrong
    good = sdk_config(emulator, "servicebus", tmp_path / "state")
    wrong = re.sub(r"SharedAccessKey=[^;]*", f"SharedAccessKey={WRONG_KEY}",
                   emulator.connection_string("primary"))
    config = dataclasses.replace(good, primary=NamespaceConfig(
        connection_string=wrong, name="primary", kind="servicebus"))
    # When its status is collected / Then the primary is refused, saying what to check
    status = await until(config, {"primary": "refused", "secondary": "up"})
    primary = status.namespaces[0]
    assert status.ready and not primary.usable
    assert primary.reason is not None and "check the key" in primary.reason
    assert WRONG_KEY not in repr(status.to_json())
    # And /readyz, ready on the secondary, names the unusable primary
    app = create_app(config, max_age=0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gateway") as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert [u.split(" ")[0] for u in body["unusable"]] == ["primary"]
    assert "check the key" in body["unusable"][0] and WRONG_KEY not in ready.text
