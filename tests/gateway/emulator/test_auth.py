"""Shared access signatures as the SDKs make them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import quote_plus, urlencode

import pytest
from azure.eventhub import EventHubSharedKeyCredential

from gateway.emulator._auth import AuthError, Grant, check_token, entity_path

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
