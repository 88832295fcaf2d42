"""The relay client's pure decisions: the failover table, idempotency, tokens, backoff."""

from __future__ import annotations

import ssl

import httpx
import pytest
from tenacity import RetryCallState, Retrying

from gateway.errors import ConfigError
from gateway.relay import RelayClientPolicy
from gateway.relay._policy import (
    TokenCache,
    Verdict,
    classify_error,
    classify_response,
    is_idempotent,
    round_wait,
)
from replication._policy import RetryPolicy

V = Verdict


@pytest.mark.parametrize(
    ("status", "via", "verdict"),
    [
        (200, True, V.ANSWERED),
        (500, True, V.ANSWERED),  # the listener's own 500 is its answer
        (502, True, V.ANSWERED),
        (503, True, V.ANSWERED),
        (504, True, V.ANSWERED),
        (401, True, V.ANSWERED),
        (404, True, V.ANSWERED),
        (401, False, V.REJECTED),
        (403, False, V.REJECTED),
        (404, False, V.UNAVAILABLE),  # no listener (WebSocket wording) or no such connection
        (500, False, V.UNAVAILABLE),
        (502, False, V.UNAVAILABLE),  # no listener
        (503, False, V.UNAVAILABLE),
        (504, False, V.UNKNOWN),
        (200, False, V.ANSWERED),
        (400, False, V.ANSWERED),
        (413, False, V.ANSWERED),
    ],
)
def test_classify_response(status: int, via: bool, verdict: Verdict) -> None:
    assert classify_response(status, via=via) is verdict


def _tls_failure() -> httpx.ConnectError:
    # What httpx raises when the handshake fails: the ssl error mapped to ConnectError.
    error = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    error.__cause__ = ssl.SSLCertVerificationError("certificate verify failed")
    return error


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (httpx.ConnectError("[Errno -2] Name or service not known"), V.UNAVAILABLE),  # DNS
        (httpx.ConnectError("[Errno 111] Connection refused"), V.UNAVAILABLE),
        (httpx.ConnectError("[Errno 104] Connection reset by peer"), V.UNAVAILABLE),
        (_tls_failure(), V.UNAVAILABLE),
        (httpx.ConnectTimeout("timed out"), V.UNAVAILABLE),
        (httpx.WriteError("[Errno 32] Broken pipe"), V.UNAVAILABLE),
        (httpx.WriteTimeout("timed out"), V.UNAVAILABLE),
        (httpx.PoolTimeout("timed out"), V.UNAVAILABLE),
        (httpx.ReadTimeout("timed out"), V.UNKNOWN),  # the request was sent
        (httpx.ReadError("[Errno 104] Connection reset by peer"), V.UNKNOWN),
        (httpx.RemoteProtocolError("Server disconnected"), V.UNKNOWN),
        (httpx.ProxyError("bad gateway"), V.UNKNOWN),
        (httpx.UnsupportedProtocol("no ftp"), V.RAISE),
        (httpx.DecodingError("bad gzip"), V.RAISE),
        (ValueError("bad"), V.RAISE),
    ],
)
def test_classify_error(error: Exception, verdict: Verdict) -> None:
    assert classify_error(error) is verdict


@pytest.mark.parametrize(
    ("method", "override", "expected"),
    [("GET", None, True), ("head", None, True), ("PUT", None, True), ("DELETE", None, True),
     ("OPTIONS", None, True), ("POST", None, False), ("PATCH", None, False),
     ("POST", True, True), ("GET", False, False)],
)
def test_is_idempotent(method: str, override: bool | None, expected: bool) -> None:
    assert is_idempotent(method, override) is expected


def test_token_cache_reuses_then_renews_before_expiry() -> None:
    made: list[float] = []

    def make(now: float) -> str:
        made.append(now)
        return f"token@{now}"

    cache = TokenCache(ttl=100.0, renew_before=10.0)
    assert cache.get(1000.0, make) == "token@1000.0"
    assert cache.get(1089.0, make) == "token@1000.0"  # 11 s left: still good
    assert cache.get(1090.0, make) == "token@1090.0"  # 10 s left: renewed
    assert made == [1000.0, 1090.0]
    assert "token@" not in repr(cache)


def _state(attempt: int) -> RetryCallState:
    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = attempt
    return state


def test_round_wait_switches_at_once_and_backs_off_between_rounds() -> None:
    wait = round_wait(RetryPolicy(attempts=3, initial_backoff=0.05, max_backoff=0.2))
    # tenacity attempt 1 = the request's attempt 2 (the other namespace): a round ends.
    for _ in range(50):
        assert 0 <= wait(_state(1)) <= 0.05
        assert wait(_state(2)) == 0.0
        assert 0 <= wait(_state(3)) <= 0.1
        assert 0 <= wait(_state(7)) <= 0.2
    assert max(wait(_state(3)) for _ in range(200)) > 0.05


@pytest.mark.parametrize(
    "kwargs",
    [{"connect_timeout": 0}, {"read_timeout": -1}, {"token_ttl": float("nan")},
     {"connect_timeout": True}, {"token_ttl": 60, "token_renew_before": 60},
     {"retry": {"attempts": 2}}],
)
def test_bad_policy_is_a_config_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="relay client"):
        RelayClientPolicy(**kwargs)  # type: ignore[arg-type]


def test_policy_timeouts_keep_failover_short_and_wait_for_the_relay() -> None:
    timeout = RelayClientPolicy().timeout
    assert timeout.connect is not None and timeout.connect <= 0.5
    assert timeout.read is not None and timeout.read > 60  # the relay's own 504 comes first


def test_deadlines_keep_a_hung_namespace_within_a_second_for_a_get_and_bound_a_post() -> None:
    policy = RelayClientPolicy()
    assert policy.answer_deadline <= 0.5  # then the other namespace answers a GET
    assert policy.answer_deadline + policy.probe_timeout <= 2.0  # a POST's OperationTimeout
    assert policy.probe_timeout > policy.answer_deadline
