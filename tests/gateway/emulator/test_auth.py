"""Shared access signatures as the SDKs make them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import quote_plus, urlencode

import pytest
from azure.eventhub import EventHubSharedKeyCredential

from gateway.amqp.server import (
    AuthError,
    Grant,
    check_token,
    client_host,
    entity_path,
    resource_path,
)

KEY, NAME = "a2V5", "Policy"
AUDIENCE = "sb://127.0.0.1:5672/orders"


def token(audience: str = AUDIENCE, name: str = NAME, key: str = KEY, ttl: int = 60) -> str:
    """A token made as the SDKs make them (their documented algorithm)."""
    expiry = str(int(time.time()) + ttl)
    digest = hmac.new(key.encode(), f"{quote_plus(audience)}\n{expiry}".encode(),
                      hashlib.sha256).digest()
    fields = {"sr": audience, "sig": base64.b64encode(digest), "se": expiry, "skn": name}
    return "SharedAccessSignature " + urlencode(fields)


def test_the_sdk_credential_token_is_accepted() -> None:
    sdk_token = EventHubSharedKeyCredential(NAME, KEY).get_token(AUDIENCE).token
    assert check(sdk_token).path == "orders"


def check(t: str, audience: str = AUDIENCE) -> Grant:
    return check_token(t, audience=audience, key_name=NAME, key=KEY, now=time.time())


def test_a_valid_token_grants_its_entity_path() -> None:
    grant = check(token())
    assert grant.path == "orders"
    now = time.time()
    assert grant.covers("orders", now) and grant.covers("orders/$deadletterqueue", now)
    assert not grant.covers("orders2", now) and not grant.covers("orders", now + 3600)
    root = check(token("sb://127.0.0.1:5672/"), "sb://127.0.0.1:5672/")
    assert root.covers("anything", now)


@pytest.mark.parametrize("bad", [
    token(key="b3RoZXI="), token(name="Other"), token(ttl=-10), token("sb://h/other"),
    "Bearer abc", "SharedAccessSignature sr=x&se=1", token().replace("sig=", "sig=%21"),
])
def test_bad_tokens_are_refused_without_echoing_them(bad: str) -> None:
    with pytest.raises(AuthError) as info:
        check(bad)
    assert KEY not in str(info.value) and bad not in str(info.value)


def test_entity_path() -> None:
    assert entity_path("amqps://host:5671/Orders/") == "orders"
    assert entity_path("hub/ConsumerGroups/$Default/Partitions/0") == (
        "hub/consumergroups/$default/partitions/0")


@pytest.mark.parametrize("namespace", [
    "sb://127.0.0.1:5672/", "sb://127.0.0.1:5672", "amqps://127.0.0.1:5672/",
    "https://127.0.0.1:5672/", "http://127.0.0.1:5672", "127.0.0.1:5672", "127.0.0.1:5672/",
])
def test_a_namespace_token_grants_every_entity(namespace: str) -> None:
    # Given a token for the namespace itself (any scheme, with or without the slash)
    t = token(namespace)
    now = time.time()
    # When the SDK puts it for one entity after another / Then each is granted
    for audience in (AUDIENCE, "amqp://127.0.0.1:5672/telemetry/ConsumerGroups/$Default",
                     "sb://127.0.0.1:5672/orders/$management"):
        grant = check(t, audience)
        assert grant.path == "" and grant.covers(resource_path(audience), now)


@pytest.mark.parametrize(("resource", "audience", "granted"), [
    ("sb://h/orders", "sb://h/orders/$deadletterqueue", True),
    ("https://h/orders/", "amqps://h/Orders", True),
    ("h/orders", "sb://h/orders", True),
    ("sb://h/orders", "sb://h/orders2", False),
    ("sb://h/orders", "sb://h/", False),
    ("sb://h/orders/sub", "sb://h/orders", False),
])
def test_the_check_is_a_prefix_of_the_resource(resource: str, audience: str,
                                               granted: bool) -> None:
    if granted:
        assert check(token(resource), audience).path == resource_path(resource)
    else:
        with pytest.raises(AuthError, match="another entity"):
            check(token(resource), audience)


def test_a_namespace_token_with_a_wrong_key_or_expired_is_still_refused() -> None:
    for bad, why in ((token("sb://h/", key="b3RoZXI="), "does not match"),
                     (token("sb://h/", ttl=-10), "expired")):
        with pytest.raises(AuthError, match=why):
            check(bad, "sb://h/orders")


def test_lower_case_escapes_in_the_signed_resource_are_accepted() -> None:
    # .NET's HttpUtility.UrlEncode writes %3a%2f%2f: the signature covers the sr as
    # it is encoded in the token
    expiry = str(int(time.time()) + 60)
    encoded = quote_plus("sb://h/").lower()
    digest = hmac.new(KEY.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256).digest()
    sig = quote_plus(base64.b64encode(digest).decode())
    t = f"SharedAccessSignature sr={encoded}&sig={sig}&se={expiry}&skn={NAME}"
    assert check(t, "sb://h/orders").path == ""


def test_resource_path() -> None:
    assert resource_path("sb://Host:5672/") == resource_path("host") == ""
    assert resource_path("host.example/Orders/") == "orders"


@pytest.mark.parametrize(("listening", "dialed"), [
    ("", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"),
    ("127.0.0.2", "127.0.0.2"), ("::1", "[::1]"), ("localhost", "localhost"),
])
def test_clients_dial_loopback_for_a_wildcard_and_brackets_for_ipv6(listening: str,
                                                                    dialed: str) -> None:
    assert client_host(listening) == dialed
