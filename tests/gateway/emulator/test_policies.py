"""Shared access policies: their form on the command line and in a config file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.amqp.server._auth import AuthError, authorize
from gateway.emulator import Emulator, Policy, Right, load_config, parse_policy
from replication import ConfigError
from tests.gateway.emulator.test_auth import token

KEY = "a2V5IHdpdGggcGFkZGluZw=="


def test_a_policy_spec_names_its_rights_and_maybe_its_entity() -> None:
    listener = parse_policy(f"listener={KEY}:Listen")
    assert (listener.name, listener.key, listener.rights, listener.entity) == (
        "listener", KEY, frozenset({Right.LISTEN}), None)
    both = parse_policy(f"Orders/app={KEY}:send, LISTEN")
    assert (both.name, both.entity, both.rights) == (
        "app", "orders", frozenset({Right.SEND, Right.LISTEN}))
    # Manage implies Listen and Send, as on the service.
    assert parse_policy(f"admin={KEY}:Manage").rights == frozenset(Right)
    assert Policy(name="p", key=KEY, rights={Right.SEND}).rights == frozenset({Right.SEND})


@pytest.mark.parametrize("bad", [
    "listener", KEY.rstrip("="), f"listener={KEY}", f"={KEY}:Listen", "listener=:Listen",
    f"listener={KEY}:Read", f"listener={KEY}:", "orders/=k:Send",
])
def test_bad_policy_specs_are_refused_without_echoing_the_key(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(bad)
    assert KEY not in str(info.value)


def test_the_key_is_not_in_the_repr() -> None:
    assert KEY not in repr(parse_policy(f"listener={KEY}:Listen"))


def test_a_token_of_an_entity_level_policy_covers_that_entity_only() -> None:
    policies = [Policy(name="p", key=KEY, rights=frozenset({Right.SEND}), entity="orders")]
    root = "sb://127.0.0.1:5672/"
    # A token for the namespace, signed with the entity's key, grants that entity alone.
    grant = authorize(token(root, name="p", key=KEY), audience=root + "orders",
                      policies=policies, now=time.time())
    assert (grant.path, grant.rights) == ("orders", frozenset({Right.SEND}))
    with pytest.raises(AuthError):
        authorize(token(root, name="p", key=KEY), audience=root + "invoices",
                  policies=policies, now=time.time())


def test_policies_in_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[[policy]]\nname = "listener"\nkey = "{KEY}"\nrights = ["Listen"]\n'
                    f'[[policy]]\nname = "app"\nkey = "{KEY}"\nrights = ["Send", "Listen"]\n'
                    'entity = "orders"\n')
    config = load_config(path)
    assert [(p.name, p.rights, p.entity) for p in config.policies] == [
        ("listener", frozenset({Right.LISTEN}), None),
        ("app", frozenset({Right.SEND, Right.LISTEN}), "orders")]
    for text in ('[[policy]]\nname = "x"\nkey = "k"\nrights = ["Read"]\n',
                 '[[policy]]\nname = "x"\nkey = "k"\n',
                 '[[policy]]\nname = "x"\nkey = "k"\nrights = "Listen"\n',
                 '[[policy]]\nname = "x"\nrights = ["Listen"]\n',
                 '[[policy]]\nname = "x"\nkey = "k"\nrights = ["Listen"]\nsurprise = 1\n'):
        path.write_text(text)
        with pytest.raises(ConfigError):
            load_config(path)


def test_connection_strings_by_policy(tmp_path: Path) -> None:
    emu = Emulator({"primary": 5999}, data_dir=tmp_path, policies=[
        parse_policy(f"listener={KEY}:Listen"), parse_policy(f"orders/app={KEY}:Send")])
    listener = emu.connection_string("primary", policy="listener")
    assert f"SharedAccessKeyName=listener;SharedAccessKey={KEY};" in listener
    assert "EntityPath=orders;" in emu.connection_string("primary", policy="app")
    assert "SharedAccessKey=***;" in emu.connection_string("primary", policy="app",
                                                           redact_key=True)
    assert "RootManageSharedAccessKey" in emu.connection_string("primary")
    with pytest.raises(ConfigError):
        emu.connection_string("primary", policy="nope")
    with pytest.raises(ConfigError, match="two policies"):
        Emulator({"primary": 0}, data_dir=tmp_path, policies=[
            parse_policy(f"listener={KEY}:Listen"), parse_policy(f"listener={KEY}:Send")])
