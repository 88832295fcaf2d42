"""Routing decisions: failure classes, destinations, send plans, replay and fail-back."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replication import (
    ConfigError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    TransportError,
)
from replication._policy import Mode
from replication._roles import RoleState
from replication._routing import (
    ANY_NAMESPACE,
    Failure,
    SendPlan,
    classify,
    destination,
    parse_destination,
    plan_send,
    replayable,
    should_fail_back,
)

A, B, E = "east", "west", "orders"
INITIAL = RoleState.initial(A, B)
SWAPPED = INITIAL.swap(1.0)


# -- classify ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (NamespaceUnavailable("down", namespace=A), Failure.TRANSIENT),
        (TransportError("flaky", namespace=A), Failure.TRANSIENT),
        (OperationTimeout("slow", namespace=A), Failure.UNKNOWN_OUTCOME),
        (MessageRejected("too large"), Failure.PERMANENT),
        (QueueFull("full"), Failure.OTHER),
        (QueueCorrupt("torn"), Failure.OTHER),
        (OwnershipLost("stolen"), Failure.OTHER),
        (ConfigError("bad"), Failure.OTHER),
        (ValueError("bug"), Failure.OTHER),
        (asyncio.CancelledError(), Failure.OTHER),
        (KeyboardInterrupt(), Failure.OTHER),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.name,
)
def test_classify_maps_each_error_onto_what_routing_does(exc, expected):
    # Given an exception / When it is classified / Then routing gets the right class
    assert classify(exc) is expected


# -- destinations -----------------------------------------------------------------------


def test_destination_joins_namespace_and_entity():
    assert destination(A, E) == "east/orders"
    assert destination(ANY_NAMESPACE, E) == "*/orders"


def test_parse_destination_keeps_slashes_in_the_entity():
    # Given an entity with a path (a topic subscription) / When it round-trips
    # Then only the first slash separates the namespace
    assert parse_destination(destination(A, "topic/subscriptions/s1")) == (
        A,
        "topic/subscriptions/s1",
    )


@pytest.mark.parametrize("bad", ["", "orders", "/orders", "east/", "/"])
def test_parse_destination_rejects_values_without_both_parts(bad):
    with pytest.raises(ValueError, match="not a destination"):
        parse_destination(bad)


names = st.text(
    alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
entities = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@given(namespace=names | st.just(ANY_NAMESPACE), entity=entities)
def test_destination_round_trips_through_parse_destination(namespace, entity):
    assert parse_destination(destination(namespace, entity)) == (namespace, entity)


# -- plan_send: passive -----------------------------------------------------------------


def test_passive_send_tries_the_active_namespace_then_the_standby():
    plan = plan_send(mode=Mode.PASSIVE, roles=INITIAL, entity=E, down=(), backlog=())
    assert plan == SendPlan(attempt=(A, B), buffer=())


def test_passive_send_follows_a_failover():
    plan = plan_send(mode=Mode.PASSIVE, roles=SWAPPED, entity=E, down=(), backlog=())
    assert plan == SendPlan(attempt=(B, A), buffer=())


def test_passive_send_skips_a_namespace_that_is_down():
    plan = plan_send(mode=Mode.PASSIVE, roles=INITIAL, entity=E, down={A}, backlog=())
    assert plan == SendPlan(attempt=(B,), buffer=())


def test_passive_send_buffers_for_any_namespace_when_both_are_down():
    plan = plan_send(mode=Mode.PASSIVE, roles=INITIAL, entity=E, down={A, B}, backlog=())
    assert plan == SendPlan(attempt=(), buffer=("*/orders",))


def test_passive_send_joins_an_existing_backlog_to_stay_fifo():
    # Given buffered messages for the entity and both namespaces up
    # When a new message is planned / Then it queues behind them instead of overtaking
    plan = plan_send(mode=Mode.PASSIVE, roles=INITIAL, entity=E, down=(), backlog={"*/orders"})
    assert plan == SendPlan(attempt=(), buffer=("*/orders",))


def test_passive_backlog_of_another_entity_does_not_hold_this_one_back():
    plan = plan_send(mode=Mode.PASSIVE, roles=INITIAL, entity=E, down=(), backlog={"*/other"})
    assert plan == SendPlan(attempt=(A, B), buffer=())


# -- plan_send: active ------------------------------------------------------------------


def test_active_send_goes_to_both_namespaces():
    plan = plan_send(mode=Mode.ACTIVE, roles=INITIAL, entity=E, down=(), backlog=())
    assert set(plan.attempt) == {A, B} and len(plan.attempt) == 2
    assert plan.buffer == ()


def test_active_send_buffers_the_copy_for_a_namespace_that_is_down():
    plan = plan_send(mode=Mode.ACTIVE, roles=SWAPPED, entity=E, down={B}, backlog=())
    assert plan == SendPlan(attempt=(A,), buffer=("west/orders",))


def test_active_send_buffers_the_copy_for_a_namespace_with_a_backlog():
    plan = plan_send(mode=Mode.ACTIVE, roles=INITIAL, entity=E, down=(), backlog={"east/orders"})
    assert plan == SendPlan(attempt=(B,), buffer=("east/orders",))


def test_active_send_buffers_both_copies_when_both_namespaces_are_down():
    plan = plan_send(mode=Mode.ACTIVE, roles=INITIAL, entity=E, down={A, B}, backlog=())
    assert plan.attempt == ()
    assert set(plan.buffer) == {"east/orders", "west/orders"}


# -- plan_send: properties --------------------------------------------------------------

subsets = st.sets(st.sampled_from([A, B, "elsewhere"]))
roles_states = st.sampled_from([INITIAL, SWAPPED])
backlogs = st.sets(
    st.sampled_from(
        ["*/orders", "east/orders", "west/orders", "*/other", "east/other", "elsewhere/orders"]
    )
)


@given(mode=st.sampled_from(Mode), roles=roles_states, down=subsets, backlog=backlogs)
def test_plan_send_never_attempts_a_namespace_that_is_down(mode, roles, down, backlog):
    plan = plan_send(mode=mode, roles=roles, entity=E, down=down, backlog=backlog)
    assert not set(plan.attempt) & down
    assert set(plan.attempt) <= {A, B}
    assert len(set(plan.attempt)) == len(plan.attempt)


@given(roles=roles_states, down=subsets, backlog=backlogs)
def test_passive_plan_attempts_at_most_the_pair_in_role_order(roles, down, backlog):
    plan = plan_send(mode=Mode.PASSIVE, roles=roles, entity=E, down=down, backlog=backlog)
    # Then the attempts are the role order with the down ones left out
    assert len(plan.attempt) <= 2
    assert list(plan.attempt) == [ns for ns in roles.order if ns in plan.attempt]
    # And a passive plan buffers only for "any namespace", and only instead of attempting
    assert set(plan.buffer) <= {"*/orders"}
    assert not (plan.attempt and plan.buffer)
    assert plan.attempt or plan.buffer


@given(roles=roles_states, down=subsets, backlog=backlogs)
def test_passive_plan_buffers_whenever_its_destination_has_a_backlog(roles, down, backlog):
    plan = plan_send(mode=Mode.PASSIVE, roles=roles, entity=E, down=down, backlog=backlog)
    if "*/orders" in backlog:
        assert plan == SendPlan(attempt=(), buffer=("*/orders",))


@given(roles=roles_states, down=subsets, backlog=backlogs)
def test_active_plan_handles_each_namespace_exactly_once(roles, down, backlog):
    plan = plan_send(mode=Mode.ACTIVE, roles=roles, entity=E, down=down, backlog=backlog)
    for ns in (A, B):
        dest = destination(ns, E)
        attempted, buffered = ns in plan.attempt, dest in plan.buffer
        # Then each namespace gets its copy one way, never both and never neither
        assert attempted != buffered
        # And a namespace that is down or has a backlog is always buffered
        if ns in down or dest in backlog:
            assert buffered
    assert len(plan.buffer) == len(set(plan.buffer))
    assert set(plan.buffer) <= {"east/orders", "west/orders"}


# -- replayable -------------------------------------------------------------------------


def test_replayable_needs_a_namespace_up_for_its_own_destination():
    dests = ["east/orders", "west/orders", "*/orders"]
    assert replayable(dests, namespaces=(A, B), down={A}) == ["west/orders", "*/orders"]


def test_replayable_any_namespace_destination_needs_only_one_up():
    assert replayable(["*/orders"], namespaces=(A, B), down={B}) == ["*/orders"]


def test_nothing_is_replayable_when_both_namespaces_are_down():
    dests = ["east/orders", "west/orders", "*/orders"]
    assert replayable(dests, namespaces=(A, B), down={A, B}) == []


def test_replayable_keeps_order_and_skips_unknown_namespaces():
    dests = ["*/b", "gone/orders", "west/a", "east/c"]
    assert replayable(dests, namespaces=(A, B), down=()) == ["*/b", "west/a", "east/c"]


def test_replayable_rejects_a_malformed_destination():
    with pytest.raises(ValueError, match="not a destination"):
        replayable(["orders"], namespaces=(A, B), down=())


# -- should_fail_back -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failback", "roles", "down", "expected"),
    [
        (True, SWAPPED, set(), True),
        (True, SWAPPED, {B}, True),
        (True, SWAPPED, {A}, False),
        (True, INITIAL, set(), False),
        (False, SWAPPED, set(), False),
    ],
)
def test_should_fail_back_only_when_enabled_failed_over_and_primary_up(
    failback, roles, down, expected
):
    assert should_fail_back(failback=failback, roles=roles, down=down) is expected
