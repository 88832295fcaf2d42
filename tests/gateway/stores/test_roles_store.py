"""RoleStore: role state that survives a restart, written atomically with mode 0600."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from gateway.stores._roles import RoleStore
from replication import ConfigError
from replication._roles import RoleState

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")


def test_without_a_file_the_primary_is_active(tmp_path):
    # Given no saved state / When it is loaded / Then it is the initial state
    store = RoleStore(tmp_path / "roles.json")
    assert store.load("east", "west") == RoleState.initial("east", "west")
    # And loading does not create the file
    assert not store.path.exists()


def test_a_restart_keeps_the_roles(tmp_path):
    # Given a store that saved a failover
    path = tmp_path / "roles.json"
    swapped = RoleState.initial("east", "west").swap(now=123.5)
    RoleStore(path).save(swapped)
    # When a new store (a restarted process) loads the same file
    loaded = RoleStore(path).load("east", "west")
    # Then the secondary is still active, with the same generation and time
    assert loaded == swapped
    assert loaded.active == "west"
    assert (loaded.generation, loaded.changed_at) == (1, 123.5)


def test_the_latest_save_wins(tmp_path):
    store = RoleStore(tmp_path / "roles.json")
    state = RoleState.initial("east", "west")
    for t in range(1, 4):
        state = state.swap(float(t))
        store.save(state)
    assert store.load("east", "west") == state
    assert state.generation == 3


def test_save_creates_missing_parent_directories(tmp_path):
    store = RoleStore(tmp_path / "a" / "b" / "roles.json")
    store.save(RoleState.initial("east", "west"))
    assert store.load("east", "west").active == "east"


def test_state_for_another_pair_is_ignored(tmp_path):
    # Given state saved for another pair of namespaces
    store = RoleStore(tmp_path / "roles.json")
    store.save(RoleState.initial("north", "south").swap(1.0))
    # When this pair loads it / Then it starts with its primary active
    assert store.load("east", "west") == RoleState.initial("east", "west")


def test_state_saved_with_primary_and_secondary_switched_keeps_the_active_one(tmp_path):
    # Given state saved with "west" as the primary and "west" active
    store = RoleStore(tmp_path / "roles.json")
    store.save(RoleState.initial("west", "east"))
    # When the pair is now configured the other way round
    loaded = store.load("east", "west")
    # Then the configured primary is preferred and the saved active one stays active
    assert (loaded.preferred, loaded.standby_preferred, loaded.active) == ("east", "west", "west")
    assert loaded.failed_over


@posix_only
def test_the_file_is_private_even_with_a_permissive_umask(tmp_path):
    # Given a permissive umask and an existing world-readable file
    path = tmp_path / "roles.json"
    path.write_text("{}")
    path.chmod(0o644)
    old = os.umask(0o000)
    try:
        # When the state is saved
        RoleStore(path).save(RoleState.initial("east", "west"))
    finally:
        os.umask(old)
    # Then only the owner can read or write it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_write_leaves_the_old_state_and_no_temporary_file(tmp_path, monkeypatch):
    # Given a saved state
    path = tmp_path / "roles.json"
    store = RoleStore(path)
    old = RoleState.initial("east", "west")
    store.save(old)
    before = path.read_bytes()

    # When the next save fails at the rename (as a crash would leave it)
    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        store.save(old.swap(1.0))
    monkeypatch.undo()

    # Then the file still holds the old state and no temporary file is left behind
    assert path.read_bytes() == before
    assert store.load("east", "west") == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roles.json"]


def test_a_successful_save_leaves_no_temporary_file(tmp_path):
    RoleStore(tmp_path / "roles.json").save(RoleState.initial("east", "west").swap(2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roles.json"]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe\x00garbage",
        b"",
        b"[1, 2]",
        b"null",
        b'{"preferred": "east", "standby_preferred": "west", "active": "north"}',
        b'{"preferred": "east", "standby_preferred": "west", "active": "west", '
        b'"generation": "many"}',
        b'{"preferred": "east", "standby_preferred": "west", "active": "west", "changed_at": null}',
    ],
    ids=[
        "bad-json",
        "not-utf8",
        "empty",
        "list",
        "null",
        "foreign-active",
        "bad-generation",
        "null-time",
    ],
)
def test_an_unreadable_file_is_a_config_error(tmp_path, content):
    # Given a role file that cannot be read as role state
    path = tmp_path / "roles.json"
    path.write_bytes(content)
    # When it is loaded / Then ConfigError names the file, in one line
    with pytest.raises(ConfigError) as info:
        RoleStore(path).load("east", "west")
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message


def test_a_directory_in_place_of_the_file_is_a_config_error(tmp_path):
    path = tmp_path / "roles.json"
    path.mkdir()
    with pytest.raises(ConfigError, match="unreadable"):
        RoleStore(path).load("east", "west")


def test_the_file_is_json_with_the_role_fields(tmp_path):
    # The file format is read by other versions and by operators: keep it stable.
    path = tmp_path / "roles.json"
    RoleStore(path).save(RoleState.initial("east", "west").swap(9.0))
    assert json.loads(path.read_text("utf-8")) == {
        "preferred": "east",
        "standby_preferred": "west",
        "active": "west",
        "generation": 1,
        "changed_at": 9.0,
    }
