"""The SDK transports check a credential when they are built, not on first connection."""

from __future__ import annotations

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.identity import ClientSecretCredential

from gateway.transports.eventhubs import EventHubsTransport
from gateway.transports.servicebus import ServiceBusTransport
from replication import ConfigError

pytestmark = pytest.mark.anyio

SECRET = "S3cret0123456789="
TRANSPORTS = [ServiceBusTransport, EventHubsTransport]


@pytest.mark.parametrize("cls", TRANSPORTS, ids=lambda c: c.__name__)
async def test_a_sync_token_credential_is_refused_when_the_transport_is_built(cls: type) -> None:
    # Given azure-identity's sync credential, which the async SDK clients would await
    credential = ClientSecretCredential("tenant", "client-id", SECRET)
    # When a transport is built with it, Then it is refused at once, naming the .aio one
    with pytest.raises(ConfigError, match=r"from azure\.identity\.aio import "
                                          "ClientSecretCredential") as info:
        cls("geo-east.servicebus.windows.net", credential)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("cls", TRANSPORTS, ids=lambda c: c.__name__)
async def test_a_key_credential_is_taken_and_left_to_its_owner(cls: type) -> None:
    # Given a transport built with a key credential
    transport = cls("geo-east.servicebus.windows.net",
                    AzureNamedKeyCredential("send", SECRET), name="east")
    # Then it is named as asked, shows no key, and closes without connecting
    assert transport.namespace == "east" and SECRET not in repr(transport)
    await transport.aclose()
