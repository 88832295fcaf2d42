"""The pure Hybrid Connections protocol: connection strings, tokens, control frames."""

from __future__ import annotations

import json
import time

import pytest

from gateway.amqp.server import AuthError, check_token
from gateway.errors import ConfigError
from gateway.relay import (
    Accept,
    ProtocolError,
    RelayEndpoint,
    RemoteEndpoint,
    RenewToken,
    Request,
    Response,
)
from gateway.relay.protocol import decode, encode

KEY = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
CONN = f"Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey={KEY};EntityPath=orders"


def test_connection_string_gives_secure_urls_and_hides_the_key() -> None:
    ep = RelayEndpoint.from_connection_string(CONN)
    assert ep.http_url() == "https://contoso.servicebus.windows.net/orders"
    assert ep.http_url("/a?b=1") == "https://contoso.servicebus.windows.net/orders/a?b=1"
    assert ep.listen_url() == "wss://contoso.servicebus.windows.net/$hc/orders?sb-hc-action=listen"
    assert ep.connect_url() == "wss://contoso.servicebus.windows.net/$hc/orders?sb-hc-action=connect"
    assert KEY not in repr(ep)


def test_emulator_connection_strings_mean_plain_loopback() -> None:
    ep = RelayEndpoint.from_connection_string(
        f"Endpoint=sb://127.0.0.1:5890/;SharedAccessKeyName=k;SharedAccessKey={KEY};"
        "UseDevelopmentEmulator=true", path="orders")
    assert ep.http_url() == "http://127.0.0.1:5890/orders"
    assert ep.listen_url().startswith("ws://127.0.0.1:5890/$hc/orders?")
    ep2 = RelayEndpoint.from_connection_string(
        f"Endpoint=http://localhost:1/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=o")
    assert ep2.plain and ep2.audience == "http://localhost/o/"


@pytest.mark.parametrize("conn, words", [
    ("Endpoint=sb://a/;SharedAccessKeyName=k;EntityPath=o", "sharedaccesskey"),
    (f"Endpoint=sb://a/;SharedAccessKeyName=k;SharedAccessKey={KEY}", "EntityPath"),
    (f"Endpoint=sb://a/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=o;Foo=1", "foo"),
    (f"Endpoint=ftp://a/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=o", "Endpoint"),
    (f"Endpoint=http://example.com/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=o",
     "loopback"),
    (f"Endpoint=sb://a/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=a/b", "name"),
    (f"Endpoint=sb://a/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=a b", "name"),
    (f"Endpoint=sb://a/;SharedAccessKeyName=k;SharedAccessKey={KEY};EntityPath=$hc", "name"),
    ("garbage", "Name=Value"),
])
def test_bad_connection_strings_are_clear_one_line_errors(conn: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        RelayEndpoint.from_connection_string(conn)
    assert KEY not in str(info.value) and "\n" not in str(info.value)


def test_tokens_are_service_bus_sas_that_the_emulator_accepts() -> None:
    ep = RelayEndpoint.from_connection_string(CONN)
    now = time.time()
    token = ep.token(ttl=60, now=now)
    assert token.startswith("SharedAccessSignature sr=http%3A%2F%2Fcontoso")
    grant = check_token(token, audience="http://contoso.servicebus.windows.net/orders/",
                        key_name="listen", key=KEY, now=now)
    assert grant.covers("orders", now) and not grant.covers("orders", now + 61)
    with pytest.raises(AuthError, match="does not match"):
        check_token(token, audience=ep.audience, key_name="listen", key=KEY[::-1], now=now)


@pytest.mark.parametrize("message", [
    Accept(address="wss://h/$hc/o?sb-hc-action=accept&sb-hc-id=1", id="1",
           connect_headers={"X": "y"}, remote_endpoint=RemoteEndpoint(address="::1", port=9)),
    Request(address="wss://a", id="2", request_target="/orders/x?y=1", method="POST",
            request_headers={"Content-Type": "text/plain"}, body=True),
    Request(address="wss://a", id="3"),
    Response(request_id="2", status_code=201, status_description="Created",
             response_headers={"A": "b"}, body=True),
    RenewToken(token="SharedAccessSignature sr=x&sig=y&se=1&skn=k"),
])
def test_messages_round_trip(message: object) -> None:
    assert decode(encode(message)) == message  # type: ignore[arg-type]


def test_wire_field_names_are_the_protocols() -> None:
    req = json.loads(encode(Request(address="a", id="i", request_target="/", method="GET",
                                    request_headers={}, body=False)))
    assert set(req["request"]) == {"address", "id", "requestTarget", "method",
                                   "requestHeaders", "body"}
    resp = json.loads(encode(Response(request_id="i")))
    assert set(resp["response"]) == {"requestId", "statusCode", "statusDescription",
                                     "responseHeaders", "body"}
    assert decode('{"request":{"address":"a","id":"i"}}').rendezvous  # type: ignore[union-attr]
    # A rendezvous request carries address and id only: the .NET listener tells the two
    # kinds apart by whether "body" is present.
    assert json.loads(encode(Request(address="a", id="i"))) == {
        "request": {"address": "a", "id": "i"}}
    assert "token" not in repr(RenewToken(token="secret-token"))
    assert "secret-token" not in repr(RenewToken(token="secret-token"))


@pytest.mark.parametrize("code", ['"200"', "200"])
def test_status_code_may_be_a_number_or_its_digits_as_in_the_protocol_article(
        code: str) -> None:
    # The article's own example: "statusCode" : "200".
    frame = '{"response":{"requestId":"x","statusCode":' + code + ',"body":false}}'
    assert decode(frame) == Response(request_id="x", status_code=200)


@pytest.mark.parametrize("frame, words", [
    ("not json", "not JSON"),
    ("[1]", "one JSON object"),
    ('{"a":{},"b":{}}', "one JSON object"),
    ('{"hello":{}}', "unknown control message 'hello'"),
    ('{"request":[]}', "must hold a JSON object"),
    ('{"request":{"address":"a"}}', "lacks 'id'"),
    ('{"response":{"requestId":"x","statusCode":"OK"}}', "statusCode"),
    ('{"response":{"requestId":"x","statusCode":"2OO"}}', "statusCode"),
    ('{"response":{"requestId":"x","statusCode":"99"}}', "statusCode"),
    ('{"response":{"requestId":"x","statusCode":99}}', "statusCode"),
    ('{"request":{"address":"a","id":"i","body":"yes"}}', "'body' must be true or false"),
    ('{"request":{"address":"a","id":"i","requestHeaders":{"a":1}}}', "requestHeaders"),
    ('{"accept":{"id":"i"}}', "lacks 'address'"),
    ('{"renewToken":{}}', "lacks 'token'"),
    (b"\xff\xfe", "not JSON"),
])
def test_malformed_frames_raise_protocol_error(frame: str | bytes, words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        decode(frame)
