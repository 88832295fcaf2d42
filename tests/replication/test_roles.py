"""RoleState: which namespace is active, swaps and fail-back."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replication import ConfigError
from replication._roles import RoleState


def test_initial_state_has_the_primary_active():
    # Given a pair / When the initial state is built
    roles = RoleState.initial("east", "west")
    # Then the primary is active, the secondary stands by, nothing has changed yet
    assert roles.active == "east"
    assert roles.standby == "west"
    assert roles.order == ("east", "west")
    assert roles.failed_over is False
    assert (roles.generation, roles.changed_at) == (0, 0.0)


def test_the_same_namespace_twice_is_a_config_error():
    with pytest.raises(ConfigError, match="two different namespaces"):
        RoleState.initial("east", "east")


def test_an_active_namespace_outside_the_pair_is_a_config_error():
    with pytest.raises(ConfigError, match="'north' is neither 'east' nor 'west'"):
        RoleState(preferred="east", standby_preferred="west", active="north")


def test_swap_makes_the_standby_active_and_counts_the_change():
    # Given the initial state
    roles = RoleState.initial("east", "west")
    # When it fails over
    swapped = roles.swap(now=12.5)
    # Then the secondary is active, the change is counted and stamped
    assert swapped.active == "west"
    assert swapped.standby == "east"
    assert swapped.order == ("west", "east")
    assert swapped.failed_over is True
    assert (swapped.generation, swapped.changed_at) == (1, 12.5)
    # And the preferred roles and the original state are unchanged
    assert (swapped.preferred, swapped.standby_preferred) == ("east", "west")
    assert roles.active == "east" and roles.generation == 0


def test_swapping_twice_returns_to_the_primary():
    roles = RoleState.initial("east", "west").swap(1.0).swap(2.0)
    assert roles.active == "east"
    assert roles.failed_over is False
    assert (roles.generation, roles.changed_at) == (2, 2.0)


def test_fail_back_makes_the_preferred_primary_active_again():
    # Given a failed-over state
    roles = RoleState.initial("east", "west").swap(1.0)
    # When it fails back
    back = roles.fail_back(now=5.0)
    # Then the primary is active again and the change is counted
    assert back.active == "east"
    assert back.failed_over is False
    assert (back.generation, back.changed_at) == (2, 5.0)


def test_fail_back_without_a_failover_changes_nothing():
    # Given the primary active / When asked to fail back / Then the state is unchanged
    roles = RoleState.initial("east", "west")
    assert roles.fail_back(now=5.0) == roles


def test_role_state_is_frozen():
    roles = RoleState.initial("east", "west")
    with pytest.raises(dataclasses.FrozenInstanceError):
        roles.active = "west"  # type: ignore[misc]


@given(steps=st.lists(st.sampled_from(["swap", "fail_back"]), max_size=20))
def test_any_sequence_of_changes_keeps_a_consistent_state(steps):
    # Given the initial state
    roles = RoleState.initial("east", "west")
    changes = 0
    for t, step in enumerate(steps, start=1):
        # When it swaps or fails back
        before = roles
        roles = roles.swap(float(t)) if step == "swap" else roles.fail_back(float(t))
        changes += roles.active != before.active
        # Then the active one is in the pair and the order covers both, active first
        assert roles.active in ("east", "west")
        assert roles.order == (roles.active, roles.standby)
        assert set(roles.order) == {"east", "west"}
        assert roles.failed_over == (roles.active == "west")
        # And the generation counts exactly the role changes
        assert roles.generation == changes
        assert (roles.preferred, roles.standby_preferred) == ("east", "west")
