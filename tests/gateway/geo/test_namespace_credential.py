"""NamespaceConfig(credential=...): which credentials it takes, and where it refuses one.

A credential signs in to a namespace given by its host; the SDK round trips are in
``test_namespace_credential_sdk.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.identity import ClientSecretCredential
from azure.identity.aio import ClientSecretCredential as AsyncClientSecretCredential

from gateway import ConfigError, NamespaceConfig

HOST = "sb://geo-east.servicebus.windows.net"
KEY = "S3cretKeyValue="
SIGNATURE = "SharedAccessSignature sr=x&sig=S1gnatureValue%3D&se=99&skn=k"
CONNECTION_STRING = (f"Endpoint={HOST}/;SharedAccessKeyName=RootManageSharedAccessKey;"
                     f"SharedAccessKey={KEY}")


def credentials() -> list[object]:
    return [AzureNamedKeyCredential("RootManageSharedAccessKey", KEY),
            AzureSasCredential(SIGNATURE),
            AsyncClientSecretCredential("tenant", "client-id", KEY)]


@pytest.mark.parametrize("credential", credentials(), ids=lambda c: type(c).__name__)
def test_a_credential_is_taken_for_a_namespace_host_and_kept_out_of_the_repr(
        credential: object) -> None:
    # When a namespace is given by its host and signed in to with a credential
    config = NamespaceConfig(url=HOST, credential=credential)
    # Then it keeps the credential, and its repr says which kind, never its secret
    assert config.credential is credential
    for text in (repr(config), str(config)):
        assert KEY not in text and "S1gnature" not in text
        assert f"credential={type(credential).__name__}" in text
    # And a copy with another name keeps it
    assert dataclasses.replace(config, name="east").credential is credential


def test_a_credential_is_refused_beside_a_connection_string() -> None:
    # When a namespace is given a connection string and a credential
    with pytest.raises(ConfigError, match="connection string or a credential, not both") as info:
        NamespaceConfig(connection_string=CONNECTION_STRING,
                        credential=AzureNamedKeyCredential("k", KEY))
    # Then the error says so, quoting neither secret
    assert KEY not in str(info.value)


def test_a_local_namespace_takes_no_credential() -> None:
    with pytest.raises(ConfigError, match="local namespace takes no credential"):
        NamespaceConfig(url="local://east", credential=AzureSasCredential(SIGNATURE))


def test_a_sync_token_credential_is_refused_in_one_line_naming_the_aio_one() -> None:
    # Given azure-identity's sync credential, which the async transports cannot await
    sync = ClientSecretCredential("tenant", "client-id", KEY)
    # When it is given to a namespace
    with pytest.raises(ConfigError) as info:
        NamespaceConfig(url=HOST, credential=sync)
    # Then one line says to pass the .aio one instead
    message = str(info.value)
    assert "\n" not in message and ".aio" in message and "ClientSecretCredential" in message
    assert KEY not in message


@pytest.mark.parametrize("value", ["SharedAccessKey=abc", object(), 42])
def test_what_is_no_credential_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="azure-core credential") as info:
        NamespaceConfig(url=HOST, credential=value)
    assert "SharedAccessKey=abc" not in str(info.value)


def test_the_development_emulator_is_a_flag_of_a_namespace_host() -> None:
    # A namespace given by its host can say it is the emulator (no TLS, its own port)
    config = NamespaceConfig(url="sb://127.0.0.1:5672", use_development_emulator=True,
                             credential=AzureSasCredential(SIGNATURE))
    assert config.use_development_emulator and "use_development_emulator=True" in repr(config)
    # A connection string says it in its own words, and a local namespace has no TLS
    with pytest.raises(ConfigError, match="UseDevelopmentEmulator=true"):
        NamespaceConfig(connection_string=CONNECTION_STRING, use_development_emulator=True)
    with pytest.raises(ConfigError, match="local"):
        NamespaceConfig(url="local://east", use_development_emulator=True)
    with pytest.raises(ConfigError, match="True or False"):
        NamespaceConfig(url=HOST, use_development_emulator="yes")  # type: ignore[arg-type]
