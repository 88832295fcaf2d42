"""GatewayConfig.load's layers: defaults, the file, GEOGATEWAY_* env, overrides (what the
command line gives), and where each layer's relative paths point."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.geo import GatewayConfig
from replication import ConfigError
from replication._policy import Mode

FILE = """\
primary = "local://east"
secondary = "local://west"
entity = "orders"
mode = "active"
data_dir = "data"

[durable_queue]
path = "queue.db"
max_messages = 10
"""

LOCAL = {"primary": "local://primary", "secondary": "local://secondary"}


def write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_each_layer_wins_over_the_one_before(tmp_path: Path) -> None:
    # Given defaults, a file, env and overrides that each set some keys
    path = write(tmp_path / "conf", FILE)
    env = {"GEOGATEWAY_ENTITY": "payments", "GEOGATEWAY_SECONDARY": "local://north"}
    overrides = {"secondary": "local://south", "mode": "passive", "primary": None,
                 "durable_queue": {"path": tmp_path / "cli.db"}}
    # When loaded
    config = GatewayConfig.load(path, env=env, defaults={**LOCAL, "entity": "d"},
                                overrides=overrides)
    # Then the file beats the defaults, env the file, overrides env; None overrides nothing
    assert config.primary.name == "east"
    assert config.entity == "payments"
    assert config.secondary.name == "south"
    assert config.policy.mode is Mode.PASSIVE
    # And a section is merged key by key
    assert config.durable_queue is not None
    assert config.durable_queue.path == tmp_path / "cli.db"
    assert config.durable_queue.max_messages == 10


def test_defaults_fill_what_nothing_else_sets(tmp_path: Path) -> None:
    config = GatewayConfig.load(env={"GEOGATEWAY_ENTITY": "orders"}, defaults=LOCAL)
    assert (config.primary.name, config.secondary.name, config.entity) == (
        "primary", "secondary", "orders")
    assert config.durable_queue is None


def test_relative_paths_from_env_and_overrides_are_relative_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a file in another directory, and relative paths in env and overrides
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "conf", FILE)
    env = {"GEOGATEWAY_DURABLE_QUEUE": "env-q.db", "GEOGATEWAY_STATE_DIR": "~/state",
           "GEOGATEWAY_DEDUP_STORE": "d.db"}
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # When loaded
    config = GatewayConfig.load(path, env=env, overrides={"data_dir": Path("cli-data")})
    # Then the file's are next to it, env's and the overrides' in the current directory
    assert config.durable_queue is not None and config.dedup is not None
    assert config.durable_queue.path == tmp_path / "env-q.db"
    assert config.dedup.path == tmp_path / "d.db"
    assert config.state_dir == tmp_path / "home" / "state"
    assert config.data_dir == tmp_path / "cli-data"
    # And without env or overrides the file's own paths are relative to the file
    plain = GatewayConfig.load(path, env={})
    assert plain.data_dir == tmp_path / "conf" / "data"
    assert plain.durable_queue is not None
    assert plain.durable_queue.path == tmp_path / "conf" / "queue.db"


def test_a_bad_value_in_any_layer_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GEOGATEWAY_FAILBACK"):
        GatewayConfig.load(env={"GEOGATEWAY_FAILBACK": "maybe", "GEOGATEWAY_ENTITY": "o"},
                           defaults=LOCAL)
    with pytest.raises(ConfigError, match="unknown mode 'sideways'"):
        GatewayConfig.load(env={"GEOGATEWAY_ENTITY": "o"}, defaults=LOCAL,
                           overrides={"mode": "sideways"})
    with pytest.raises(ConfigError, match="same namespace"):
        GatewayConfig.load(env={"GEOGATEWAY_ENTITY": "o"}, defaults=LOCAL,
                           overrides={"secondary": "local://primary"})


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [("GEOGATEWAY_MODE", "sideways", "unknown mode 'sideways' in $GEOGATEWAY_MODE: use "
                                     "'passive' or 'active'"),
     ("GEOGATEWAY_KIND", "bogus", "unknown kind 'bogus' in $GEOGATEWAY_KIND: use "
                                  "'servicebus' or 'eventhubs'")],
)
def test_a_bad_choice_in_env_names_the_variable(variable: str, value: str, words: str) -> None:
    with pytest.raises(ConfigError) as raised:
        GatewayConfig.load(env={variable: value, "GEOGATEWAY_ENTITY": "o"}, defaults=LOCAL)
    assert str(raised.value) == words


def test_env_choices_take_any_case() -> None:
    config = GatewayConfig.load(env={"GEOGATEWAY_MODE": "Active", "GEOGATEWAY_KIND": "EventHubs",
                                     "GEOGATEWAY_ENTITY": "o"},
                                defaults={"primary": "sb://a.example", "secondary": "sb://b.example"})
    assert config.policy.mode is Mode.ACTIVE
    assert config.primary.kind == config.secondary.kind == "eventhubs"
