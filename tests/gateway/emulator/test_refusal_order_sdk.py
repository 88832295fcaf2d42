"""The order and kind of the service's refusals, seen from the unmodified SDKs: the
credential first (401 on ``$cbs``), then the entity's existence (404 on ``$cbs``)."""

from __future__ import annotations

import pytest
from azure.eventhub.exceptions import AuthenticationError
from azure.servicebus.exceptions import ServiceBusAuthenticationError

from gateway.emulator import Emulator
from tests.gateway.emulator.test_rights_sdk import emu, hub_send, receive, refusal, send

pytestmark = pytest.mark.anyio
__all__ = ["emu"]  # the fixture


async def test_a_missing_queue_is_reported_on_the_token_as_the_service_does(
        emu: Emulator) -> None:
    # The service answers the $cbs put-token with 404; the SDK raises it as an
    # authentication failure carrying that status and description.
    root = emu.connection_string("primary")
    with pytest.raises(ServiceBusAuthenticationError) as info:
        await send(root, "nope")
    code, description = refusal(info)
    assert code == 404 and "'sb://" in description and "/nope' could not be found" in description
    with pytest.raises(ServiceBusAuthenticationError) as info:
        await receive(root, "nope")
    assert refusal(info)[0] == 404


async def test_a_bad_credential_for_a_missing_entity_reports_the_credential(
        emu: Emulator) -> None:
    wrong = emu.connection_string("primary").replace(
        emu.connection_string("primary").split("SharedAccessKey=")[1].split(";")[0],
        "d3Jvbmcga2V5")
    with pytest.raises(ServiceBusAuthenticationError) as info:
        await send(wrong, "nope")
    assert refusal(info)[0] == 401
    with pytest.raises(AuthenticationError, match="401") as hub_info:
        await hub_send(wrong, "nope")
    assert "could not be found" not in str(hub_info.value)


async def test_a_missing_hub_is_reported_on_the_token(emu: Emulator) -> None:
    root = emu.connection_string("primary")
    with pytest.raises(AuthenticationError, match=r"(?s)404.*could not be found"):
        await hub_send(root, "nope")
