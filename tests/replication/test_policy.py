"""Mode, RetryPolicy and ReplicationPolicy: parsing, defaults and validation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from replication import ConfigError
from replication._policy import Mode, ReplicationPolicy, RetryPolicy


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("passive", Mode.PASSIVE),
        ("active", Mode.ACTIVE),
        ("ACTIVE", Mode.ACTIVE),
        ("Passive", Mode.PASSIVE),
        (Mode.ACTIVE, Mode.ACTIVE),
    ],
)
def test_mode_parse_accepts_names_in_any_case_and_members(given, expected):
    # Given a mode name or member / When it is parsed
    parsed = Mode.parse(given)
    # Then it is the matching member
    assert parsed is expected


@pytest.mark.parametrize("given", ["", "both", "primary", None, 1])
def test_mode_parse_rejects_anything_else_with_a_one_line_config_error(given):
    # Given a value that is not a mode / When it is parsed / Then ConfigError names it
    with pytest.raises(ConfigError) as info:
        Mode.parse(given)
    message = str(info.value)
    assert repr(given) in message
    assert "passive" in message and "active" in message
    assert "\n" not in message


def test_retry_policy_defaults_keep_failover_under_a_second():
    # Given the default retry policy
    retry = RetryPolicy()
    # Then it retries at least once and gives up on a namespace within a second
    assert retry.attempts >= 1
    assert 0 <= retry.initial_backoff <= retry.max_backoff
    assert retry.max_delay < 1.0


def test_retry_policy_accepts_zero_backoff():
    # Given no backoff at all / When a policy is built / Then it is kept as given
    retry = RetryPolicy(attempts=1, initial_backoff=0, max_backoff=0, max_delay=0)
    assert (retry.attempts, retry.initial_backoff, retry.max_backoff, retry.max_delay) == (
        1,
        0,
        0,
        0,
    )


@pytest.mark.parametrize("attempts", [0, -1, 1.5, "3", None, True])
def test_retry_policy_rejects_attempts_that_are_not_a_whole_number_from_one(attempts):
    # Given a bad number of attempts / When a policy is built / Then ConfigError
    with pytest.raises(ConfigError, match="attempts"):
        RetryPolicy(attempts=attempts)


@pytest.mark.parametrize("name", ["initial_backoff", "max_backoff", "max_delay"])
@pytest.mark.parametrize("value", [-0.001, -1, "0.1", None, math.nan, True])
def test_retry_policy_rejects_negative_or_non_numeric_seconds(name, value):
    # Given a negative, NaN or non-numeric duration / When a policy is built
    # Then ConfigError names the option
    with pytest.raises(ConfigError, match=name):
        RetryPolicy(**{name: value})


def test_retry_policy_rejects_max_backoff_below_initial_backoff():
    # Given a maximum backoff smaller than the first one / Then ConfigError
    with pytest.raises(ConfigError, match="max_backoff"):
        RetryPolicy(initial_backoff=0.5, max_backoff=0.1)


def test_retry_policy_is_frozen_and_keyword_only():
    # Given a retry policy
    retry = RetryPolicy()
    # When it is changed / Then it refuses
    with pytest.raises(dataclasses.FrozenInstanceError):
        retry.attempts = 5  # type: ignore[misc]
    # And positional arguments are refused
    with pytest.raises(TypeError):
        RetryPolicy(5)  # type: ignore[misc]


def test_replication_policy_defaults_to_passive_without_failback():
    # Given the default policy
    policy = ReplicationPolicy()
    # Then it is passive, does not fail back, and uses the default retries
    assert policy.mode is Mode.PASSIVE
    assert policy.failback is False
    assert policy.retry == RetryPolicy()
    assert policy.probe_interval > 0


def test_replication_policy_parses_a_mode_given_as_text():
    # Given the mode as a string / When the policy is built / Then it holds the member
    policy = ReplicationPolicy(mode="Active")  # type: ignore[arg-type]
    assert policy.mode is Mode.ACTIVE


def test_replication_policy_rejects_a_bad_mode():
    with pytest.raises(ConfigError, match="unknown mode 'sideways'"):
        ReplicationPolicy(mode="sideways")  # type: ignore[arg-type]


@pytest.mark.parametrize("failback", ["yes", 1, None])
def test_replication_policy_rejects_a_failback_that_is_not_a_bool(failback):
    with pytest.raises(ConfigError, match="failback"):
        ReplicationPolicy(failback=failback)  # type: ignore[arg-type]


@pytest.mark.parametrize("interval", [0, -0.25, "1", None, math.nan, True])
def test_replication_policy_rejects_a_probe_interval_that_is_not_positive(interval):
    with pytest.raises(ConfigError, match="probe_interval"):
        ReplicationPolicy(probe_interval=interval)  # type: ignore[arg-type]


def test_replication_policy_keeps_valid_values():
    # Given explicit valid values / When the policy is built / Then they are kept
    retry = RetryPolicy(attempts=5, initial_backoff=0.01, max_backoff=0.02, max_delay=0.5)
    policy = ReplicationPolicy(mode=Mode.ACTIVE, failback=True, retry=retry, probe_interval=2)
    assert (policy.mode, policy.failback, policy.retry, policy.probe_interval) == (
        Mode.ACTIVE,
        True,
        retry,
        2,
    )
