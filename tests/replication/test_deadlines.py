"""DeadlinePolicy and DeadlineEstimator: deadlines from recent latencies, on a fake clock."""

from __future__ import annotations

import math

import pytest

from replication import (
    ConfigError,
    DeadlineEstimator,
    DeadlinePolicy,
    LatencyWindow,
    Operation,
    ReplicationPolicy,
)
from tests.conftest import FakeClock

SEND = Operation.SEND
MIB = 1 << 20


def estimator(clock: FakeClock | None = None, **policy: float) -> DeadlineEstimator:
    return DeadlineEstimator(DeadlinePolicy(**policy), clock=clock or FakeClock())


def test_a_namespace_that_never_answered_gets_the_initial_deadline() -> None:
    # Given an estimator that has seen nothing / Then every deadline is the initial one
    est = estimator(initial=1.5)
    assert est.deadline("primary", SEND) == 1.5
    assert est.deadline("secondary", Operation.SETTLE) == 1.5
    assert est.samples("primary", SEND) == 0


def test_the_first_answer_opened_the_connection_and_is_not_counted() -> None:
    est = estimator(floor=0.01, ceiling=10.0, multiplier=2.0, initial=1.5)
    # Given a first send that took 0.4 s: it waited for the connection to open
    est.observe("primary", SEND, 0.4)
    # Then the deadline is still the initial one
    assert est.deadline("primary", SEND) == 1.5 and est.samples("primary", SEND) == 0
    # And from the second answer on, the latencies count
    est.observe("primary", SEND, 0.005)
    assert est.deadline("primary", SEND) == pytest.approx(0.01)


def test_the_deadline_is_the_multiple_of_the_percentile_within_floor_and_ceiling() -> None:
    est = estimator(floor=0.1, ceiling=2.0, multiplier=4.0, percentile=99.0)
    # Given 100 sends of 40 ms
    for _ in range(100):
        est.observe("primary", SEND, 0.040)
    # Then the deadline is 4 x 40 ms
    assert est.deadline("primary", SEND) == pytest.approx(0.160)
    # And a fast namespace is held to the floor, a slow one to the ceiling
    for _ in range(100):
        est.observe("fast", SEND, 0.001)
        est.observe("slow", SEND, 1.0)
    assert est.deadline("fast", SEND) == 0.1
    assert est.deadline("slow", SEND) == 2.0


def test_namespaces_and_operations_have_deadlines_of_their_own() -> None:
    est = estimator(floor=0.01, ceiling=10.0, multiplier=2.0)
    for _ in range(2):  # the first answer of each is not counted
        est.observe("primary", SEND, 0.1)
        est.observe("primary", Operation.SETTLE, 0.3)
        est.observe("secondary", SEND, 0.5)
    assert est.deadline("primary", SEND) == pytest.approx(0.2)
    assert est.deadline("primary", Operation.SETTLE) == pytest.approx(0.6)
    assert est.deadline("secondary", SEND) == pytest.approx(1.0)


def test_the_percentile_ignores_rare_outliers_and_follows_frequent_ones() -> None:
    est = estimator(floor=0.01, ceiling=100.0, multiplier=1.0, percentile=99.0, window=200)
    # Given 199 sends of 10 ms and one of 30 s (a freeze that ended)
    for _ in range(199):
        est.observe("primary", SEND, 0.010)
    est.observe("primary", SEND, 30.0)
    # Then the p99 is still 10 ms: one outlier in 200 does not move it
    assert est.deadline("primary", SEND) == pytest.approx(0.010)
    # When 2% of the recent sends are slow, it follows them
    for _ in range(4):
        est.observe("primary", SEND, 0.5)
    assert est.deadline("primary", SEND) == pytest.approx(0.5)


def test_old_latencies_leave_the_window() -> None:
    est = estimator(floor=0.01, ceiling=100.0, multiplier=1.0, percentile=100.0, window=5)
    for latency in (9.0, 5.0, 0.1, 0.1, 0.1, 0.1):  # 9 s: the first, not counted
        est.observe("primary", SEND, latency)
    assert est.deadline("primary", SEND) == 5.0
    # When one more latency comes, the oldest (5 s) is forgotten
    est.observe("primary", SEND, 0.2)
    assert est.deadline("primary", SEND) == 0.2
    assert est.samples("primary", SEND) == 5


def test_a_large_batch_gets_more_time_and_its_size_is_not_taken_for_slowness() -> None:
    est = estimator(floor=0.1, ceiling=1.0, multiplier=2.0, per_mib=0.5)
    # Given sends of 2 MiB that took 1.05 s: 1 s of it is the allowance for their size
    for _ in range(10):
        est.observe("primary", SEND, 1.05, size=2 * MIB)
    # Then a small send's deadline is 2 x 50 ms, held to the floor
    assert est.deadline("primary", SEND) == pytest.approx(0.1)
    # And a 4 MiB send gets 2 s more
    assert est.deadline("primary", SEND, size=4 * MIB) == pytest.approx(2.1)


def test_latencies_are_timed_on_the_injected_clock() -> None:
    clock = FakeClock(100.0)
    est = estimator(clock, floor=0.01, ceiling=10.0, multiplier=2.0)
    for _ in range(2):
        began = est.clock()
        clock.advance(0.25)
        est.observe("primary", SEND, est.clock() - began)
    assert est.deadline("primary", SEND) == pytest.approx(0.5)


def test_a_negative_latency_counts_as_none() -> None:
    # A receive that returned before its own wait was over: no latency of its own
    est = estimator(floor=0.2, multiplier=2.0)
    est.observe("primary", Operation.RECEIVE, -0.1)
    est.observe("primary", Operation.RECEIVE, -0.1)
    assert est.deadline("primary", Operation.RECEIVE) == 0.2


def test_the_latency_window_percentile_is_the_nearest_rank() -> None:
    window = LatencyWindow(10)
    assert window.percentile(99) == 0.0
    for n in range(1, 11):
        window.add(float(n))
    assert (window.percentile(50), window.percentile(90), window.percentile(99)) == (
        5.0, 9.0, 10.0)


def test_the_defaults_hedge_a_fast_namespace_within_a_second() -> None:
    # Given the default policy and a namespace whose sends take a few milliseconds
    policy = DeadlinePolicy()
    est = DeadlineEstimator(policy, clock=FakeClock())
    for _ in range(300):
        est.observe("primary", SEND, 0.004)
    # Then a send it does not answer is hedged after the floor: 0.3 s
    assert est.deadline("primary", SEND) == policy.floor == 0.3
    # And however slow it gets, never later than 0.75 s (plus 1 s per MiB sent)
    assert policy.ceiling == 0.75
    assert ReplicationPolicy().deadlines == policy


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"floor": 0}, "floor"),
        ({"floor": -1}, "floor"),
        ({"floor": math.nan}, "floor"),
        ({"floor": True}, "floor"),
        ({"floor": "0.3"}, "floor"),
        ({"ceiling": math.inf}, "ceiling"),
        ({"floor": 1.0, "ceiling": 0.5}, "ceiling"),
        ({"floor": 1.0, "ceiling": 2.0, "initial": 0.5}, "initial"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"multiplier": "4"}, "multiplier"),
        ({"percentile": 10}, "percentile"),
        ({"percentile": 101}, "percentile"),
        ({"window": 0}, "window"),
        ({"window": 2.5}, "window"),
        ({"per_mib": -1}, "per_mib"),
    ],
)
def test_a_bad_deadline_policy_is_a_one_line_config_error(options, fragment) -> None:
    with pytest.raises(ConfigError) as info:
        DeadlinePolicy(**options)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_replication_policy_takes_only_a_deadline_policy() -> None:
    with pytest.raises(ConfigError, match="deadlines must be a DeadlinePolicy"):
        ReplicationPolicy(deadlines={"floor": 1.0})  # type: ignore[arg-type]
