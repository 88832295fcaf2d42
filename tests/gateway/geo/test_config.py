"""GatewayConfig and friends: TOML layout, env overrides, paths, validation, no secrets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gateway.geo._config import DedupConfig, DurableQueueConfig, GatewayConfig, NamespaceConfig
from replication import ConfigError
from replication._dedup import DedupWindow
from replication._policy import Mode, ReplicationPolicy, RetryPolicy

SECRET = "SECRETVALUE123"
CONN = f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey={SECRET}="
CONN_Y = CONN.replace("sb://x.", "sb://y.")

MINIMAL = 'primary = "local://east"\nsecondary = "local://west"\nentity = "orders"\n'

FULL = """\
primary = "local://east"
secondary = "local://west"
entity = "orders"
mode = "active"
failback = true
probe_interval = 0.5
data_dir = "data"
state_dir = "state"

[retry]
attempts = 5
initial_backoff = 0.01
max_backoff = 0.1
max_delay = 0.5

[durable_queue]
path = "queue.db"
max_messages = 10
max_bytes = 4096
synchronous = "NORMAL"

[dedup]
path = "dedup.db"
window_seconds = 60
window_count = 100
"""


def write(tmp_path: Path, text: str, name: str = "gateway.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path=None, env=None) -> str:
    """The message of the ConfigError that loading raises (asserted one line)."""
    with pytest.raises(ConfigError) as info:
        GatewayConfig.load(path, env={} if env is None else env)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.strip(), "an empty error message"
    return message


# -- loading a file ---------------------------------------------------------------------


def test_a_minimal_file_gives_the_defaults(tmp_path):
    # Given a file with only the required keys / When it is loaded
    config = GatewayConfig.load(write(tmp_path, MINIMAL), env={})
    # Then the namespaces and entity are read and everything else is the default
    assert (config.primary.name, config.secondary.name, config.entity) == (
        "east",
        "west",
        "orders",
    )
    assert config.primary.is_local and config.primary.local_name == "east"
    assert config.policy == ReplicationPolicy()
    assert (config.durable_queue, config.dedup, config.data_dir, config.state_dir) == (
        None,
        None,
        None,
        None,
    )


def test_every_key_of_the_file_is_read(tmp_path):
    # Given a file that sets every option / When it is loaded
    conf_dir = tmp_path / "conf"
    config = GatewayConfig.load(write(conf_dir, FULL), env={})
    # Then each value lands in its record
    assert config.policy == ReplicationPolicy(
        mode=Mode.ACTIVE,
        failback=True,
        probe_interval=0.5,
        retry=RetryPolicy(attempts=5, initial_backoff=0.01, max_backoff=0.1, max_delay=0.5),
    )
    assert config.durable_queue == DurableQueueConfig(
        path=conf_dir / "queue.db", max_messages=10, max_bytes=4096, synchronous="NORMAL"
    )
    assert config.dedup == DedupConfig(
        path=conf_dir / "dedup.db", window=DedupWindow(seconds=60, count=100)
    )
    # And relative paths resolve against the file's directory, not the working directory
    assert config.data_dir == conf_dir / "data"
    assert config.state_dir == conf_dir / "state"


def test_absolute_paths_in_the_file_are_kept(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    text = MINIMAL + f'data_dir = "{elsewhere.as_posix()}"\n'
    text += f'[durable_queue]\npath = "{(elsewhere / "q.db").as_posix()}"\n'
    config = GatewayConfig.load(write(tmp_path / "conf", text), env={})
    assert config.data_dir == elsewhere
    assert config.durable_queue is not None
    assert config.durable_queue.path == elsewhere / "q.db"


def test_a_home_relative_path_in_the_file_expands_to_the_home_directory(tmp_path, monkeypatch):
    # Given a path starting with ~ in the file
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    text = MINIMAL + '[durable_queue]\npath = "~/q.db"\n[dedup]\npath = "~/d.db"\n'
    # When it is loaded
    config = GatewayConfig.load(write(tmp_path / "conf", text), env={})
    # Then it is under the home directory, not under the file's directory
    assert config.durable_queue is not None and config.dedup is not None
    assert config.durable_queue.path == home / "q.db"
    assert config.dedup.path == home / "d.db"


def test_namespaces_may_be_tables_with_a_name_and_a_connection_string(tmp_path):
    # Given namespaces written as tables
    text = f"""\
entity = "orders"
[primary]
connection_string = "{CONN}"
name = "east"
[secondary]
url = "sb://y.servicebus.windows.net"
"""
    # When the file is loaded
    config = GatewayConfig.load(write(tmp_path, text), env={})
    # Then the connection string gives the url, the explicit name wins
    assert config.primary.name == "east"
    assert config.primary.url == "sb://x.servicebus.windows.net/"
    assert config.primary.connection_string == CONN
    assert config.secondary.name == "y.servicebus.windows.net"


def test_the_file_can_be_named_by_geogateway_config(tmp_path):
    path = write(tmp_path, MINIMAL)
    config = GatewayConfig.load(env={"GEOGATEWAY_CONFIG": str(path)})
    assert config.entity == "orders"


def test_load_reads_the_process_environment_by_default(tmp_path, monkeypatch):
    # Given the file and an override in os.environ / When loaded without env=
    monkeypatch.setenv("GEOGATEWAY_CONFIG", str(write(tmp_path, MINIMAL)))
    monkeypatch.setenv("GEOGATEWAY_ENTITY", "payments")
    # Then both are used
    assert GatewayConfig.load().entity == "payments"


# -- env overrides ----------------------------------------------------------------------


def test_env_overrides_the_file(tmp_path):
    # Given a file that sets everything, and env that sets other values
    conf_dir = tmp_path / "conf"
    env = {
        "GEOGATEWAY_PRIMARY": "local://north",
        "GEOGATEWAY_SECONDARY": CONN_Y,
        "GEOGATEWAY_ENTITY": "payments",
        "GEOGATEWAY_MODE": "PASSIVE",
        "GEOGATEWAY_FAILBACK": "false",
        "GEOGATEWAY_DATA_DIR": str(tmp_path / "env-data"),
        "GEOGATEWAY_STATE_DIR": str(tmp_path / "env-state"),
        "GEOGATEWAY_DURABLE_QUEUE": str(tmp_path / "env-q.db"),
        "GEOGATEWAY_DEDUP_STORE": str(tmp_path / "env-d.db"),
    }
    # When it is loaded
    config = GatewayConfig.load(write(conf_dir, FULL), env=env)
    # Then env wins for each key it sets
    assert config.primary.name == "north"
    assert config.secondary.name == "y.servicebus.windows.net"
    assert config.secondary.connection_string == CONN_Y
    assert config.entity == "payments"
    assert config.policy.mode is Mode.PASSIVE
    assert config.policy.failback is False
    assert config.data_dir == tmp_path / "env-data"
    assert config.state_dir == tmp_path / "env-state"
    assert config.durable_queue is not None and config.dedup is not None
    assert config.durable_queue.path == tmp_path / "env-q.db"
    assert config.dedup.path == tmp_path / "env-d.db"
    # And the keys env does not set keep the file's values
    assert config.durable_queue.max_messages == 10
    assert config.dedup.window == DedupWindow(seconds=60, count=100)
    assert config.policy.retry.attempts == 5


def test_env_alone_is_a_complete_configuration(tmp_path):
    env = {
        "GEOGATEWAY_PRIMARY": "local://east",
        "GEOGATEWAY_SECONDARY": "local://west",
        "GEOGATEWAY_ENTITY": "orders",
        "GEOGATEWAY_MODE": "active",
        "GEOGATEWAY_DURABLE_QUEUE": str(tmp_path / "q.db"),
    }
    config = GatewayConfig.load(env=env)
    assert (config.primary.name, config.secondary.name) == ("east", "west")
    assert config.policy.mode is Mode.ACTIVE
    assert config.durable_queue is not None
    assert config.durable_queue.path == tmp_path / "q.db"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("Yes", True), ("on", True), ("0", False), ("false", False)],
)
def test_env_failback_reads_common_booleans(tmp_path, value, expected):
    config = GatewayConfig.load(write(tmp_path, MINIMAL), env={"GEOGATEWAY_FAILBACK": value})
    assert config.policy.failback is expected


@pytest.mark.parametrize("value", ["maybe", "", "2", "ture", "nein"])
def test_env_failback_that_is_not_a_boolean_is_a_config_error(tmp_path, value):
    # Given GEOGATEWAY_FAILBACK=maybe / Then loading fails naming the variable (a typo
    # must not silently turn failback off)
    message = load_error(write(tmp_path, MINIMAL), env={"GEOGATEWAY_FAILBACK": value})
    assert "GEOGATEWAY_FAILBACK" in message and repr(value) in message


# -- bad input --------------------------------------------------------------------------


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path):
    # Given a file in Latin-1 (not UTF-8, which TOML requires)
    path = tmp_path / "latin1.toml"
    path.write_bytes(MINIMAL.replace("orders", "commandes-r\u00e9gion").encode("latin-1"))
    # Then loading fails with one line naming the file and the offending byte
    message = load_error(path)
    assert str(path) in message and "UTF-8" in message and "0xe9" in message


def test_a_missing_file_is_a_config_error(tmp_path):
    missing = tmp_path / "nope.toml"
    assert "does not exist" in load_error(missing)
    assert str(missing) in load_error(missing)


def test_a_missing_file_named_by_env_is_a_config_error(tmp_path):
    missing = tmp_path / "nope.toml"
    assert "does not exist" in load_error(env={"GEOGATEWAY_CONFIG": str(missing)})


def test_a_directory_instead_of_a_file_is_a_config_error(tmp_path):
    assert "cannot read config file" in load_error(tmp_path)


def test_bad_toml_is_a_config_error(tmp_path):
    message = load_error(write(tmp_path, MINIMAL + "mode = \n"))
    assert "is not valid TOML" in message


@pytest.mark.parametrize(
    ("text", "where", "option"),
    [
        (MINIMAL + "colour = 'blue'\n", "the top level", "colour"),
        (MINIMAL + "[retry]\nattempt = 3\n", "[retry]", "attempt"),
        (MINIMAL + "[durable_queue]\npath = 'q.db'\nmax_msgs = 3\n", "[durable_queue]", "max_msgs"),
        (MINIMAL + "[dedup]\npath = 'd.db'\nwindow = 3\n", "[dedup]", "window"),
        (
            "secondary = 'local://west'\nentity = 'orders'\n[primary]\nurl = 'local://east'\n"
            "uri = 'x'\n",
            "[primary]",
            "uri",
        ),
        (
            "primary = 'local://east'\nentity = 'orders'\n[secondary]\nurl = 'local://west'\n"
            "timeout = 3\n",
            "[secondary]",
            "timeout",
        ),
    ],
    ids=["top", "retry", "durable_queue", "dedup", "primary", "secondary"],
)
def test_an_unknown_option_is_a_config_error_naming_it_and_where(tmp_path, text, where, option):
    path = write(tmp_path, text)
    message = load_error(path)
    assert f"unknown option {option!r} in {where}" in message
    assert str(path) in message


@pytest.mark.parametrize("key", ["primary", "secondary", "entity"])
def test_a_missing_required_key_is_a_config_error(tmp_path, key):
    text = "".join(line + "\n" for line in MINIMAL.splitlines() if not line.startswith(key))
    message = load_error(write(tmp_path, text))
    assert f"{key!r} is missing" in message
    assert f"GEOGATEWAY_{key.upper()}" in message


def test_nothing_configured_at_all_is_a_config_error():
    assert "is missing from the environment" in load_error(env={})


@pytest.mark.parametrize(
    ("primary", "secondary"),
    [
        ('"local://east"', '"local://east"'),
        ('"sb://x.servicebus.windows.net"', '"sb://X.servicebus.windows.net/"'),
        (f'"{CONN}"', '"sb://x.servicebus.windows.net"'),
        ('{ url = "local://east", name = "a" }', '{ url = "local://east", name = "b" }'),
        (
            '{ url = "sb://x.servicebus.windows.net", name = "a" }',
            f'{{ connection_string = "{CONN}", name = "b" }}',
        ),
    ],
    ids=["local", "host-case", "conn-vs-url", "renamed-local", "renamed-azure"],
)
def test_the_same_namespace_twice_is_a_config_error(tmp_path, primary, secondary):
    # Given primary and secondary naming one namespace (even under two names)
    text = f"primary = {primary}\nsecondary = {secondary}\nentity = 'orders'\n"
    # When loaded / Then ConfigError says they are the same
    message = load_error(write(tmp_path, text))
    assert "same namespace" in message
    assert SECRET not in message


def test_a_bad_mode_in_the_file_is_a_config_error(tmp_path):
    message = load_error(write(tmp_path, MINIMAL + "mode = 'both'\n"))
    assert "unknown mode 'both'" in message


def test_a_bad_mode_in_env_is_a_config_error(tmp_path):
    message = load_error(write(tmp_path, MINIMAL), env={"GEOGATEWAY_MODE": "sideways"})
    assert "unknown mode 'sideways'" in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("probe_interval = -1\n", "probe_interval"),
        ("probe_interval = 0\n", "probe_interval"),
        ("failback = 'yes'\n", "failback"),
        ("[retry]\nattempts = -1\n", "attempts"),
        ("[retry]\nattempts = 0\n", "attempts"),
        ("[retry]\ninitial_backoff = -0.5\n", "initial_backoff"),
        ("[retry]\nmax_backoff = -0.5\n", "max_backoff"),
        ("[retry]\nmax_delay = -1\n", "max_delay"),
        ("[durable_queue]\npath = 'q.db'\nmax_messages = -5\n", "max_messages"),
        ("[durable_queue]\npath = 'q.db'\nmax_bytes = -1\n", "max_bytes"),
        ("[durable_queue]\npath = 'q.db'\nmax_messages = 'lots'\n", "max_messages"),
        ("[durable_queue]\npath = 'q.db'\nsynchronous = 'OFF'\n", "synchronous"),
        ("[dedup]\npath = 'd.db'\nwindow_seconds = -60\n", "seconds"),
        ("[dedup]\npath = 'd.db'\nwindow_count = -1\n", "count"),
        ("[dedup]\npath = 'd.db'\nwindow_seconds = 'ten'\n", "seconds"),
        ("[dedup]\npath = 'd.db'\nwindow_count = 1.5\n", "count"),
        ("[durable_queue]\npath = 5\n", "path"),
        ("data_dir = 5\n", "data_dir"),
        ("retry = 3\n", "[retry]"),
        ("durable_queue = 'q.db'\n", "[durable_queue]"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_option(tmp_path, text, fragment):
    # Given a file with one bad value (negative, zero, wrong type)
    # When it is loaded / Then ConfigError names the option
    assert fragment in load_error(write(tmp_path, MINIMAL + text))


@pytest.mark.parametrize("entity", ["''", "'   '", "3"])
def test_an_empty_or_non_text_entity_is_a_config_error(tmp_path, entity):
    text = f"primary = 'local://east'\nsecondary = 'local://west'\nentity = {entity}\n"
    assert "entity" in load_error(write(tmp_path, text))


@pytest.mark.parametrize("value", ["3", "['local://east']"])
def test_a_namespace_of_the_wrong_type_is_a_config_error(tmp_path, value):
    text = f"primary = {value}\nsecondary = 'local://west'\nentity = 'orders'\n"
    assert "primary" in load_error(write(tmp_path, text))


# -- NamespaceConfig --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "url", "name", "local"),
    [
        ("local://east", "local://east", "east", True),
        ("  local://east  ", "local://east", "east", True),
        (
            "sb://x.servicebus.windows.net",
            "sb://x.servicebus.windows.net",
            "x.servicebus.windows.net",
            False,
        ),
        ("x.servicebus.windows.net", "x.servicebus.windows.net", "x.servicebus.windows.net", False),
        (CONN, "sb://x.servicebus.windows.net/", "x.servicebus.windows.net", False),
    ],
)
def test_namespace_parse(value, url, name, local):
    namespace = NamespaceConfig.parse(value)
    assert (namespace.url, namespace.name, namespace.is_local) == (url, name, local)


@pytest.mark.parametrize(
    "url",
    [
        "local://", "local://east/queue", "http://x.example", "sb://", "ftp://host",
        # A port that is not a number from 1 to 65535, an unclosed IPv6 bracket, a host
        # that is not a host name: each raised ValueError (or passed) before.
        "sb://host:abc", "sb://host:99999", "sb://host:0", "sb://[::1", "sb://ho st",
        "sb://-host", "amqp://host:-1",
    ],
)
def test_a_bad_namespace_url_is_a_config_error(url):
    with pytest.raises(ConfigError, match="bad"):
        NamespaceConfig(url=url)


@pytest.mark.parametrize(
    ("url", "name"),
    [("sb://[::1]:5671", "::1:5671"), ("amqp://127.0.0.1:5672", "127.0.0.1:5672"),
     ("sb://my_ns.servicebus.windows.net/", "my_ns.servicebus.windows.net")],
)
def test_ip_addresses_ports_and_underscores_are_good_urls(url, name):
    assert NamespaceConfig(url=url).name == name


@pytest.mark.parametrize("endpoint", ["sb://x:abc/", "sb://x:70000/", "sb://[::1/"])
def test_a_connection_string_with_a_bad_endpoint_is_a_config_error(endpoint):
    # Given a connection string whose Endpoint has a bad port / Then a ConfigError (not
    # ValueError) that never quotes the key
    conn = CONN.replace("sb://x.servicebus.windows.net/", endpoint)
    with pytest.raises(ConfigError) as info:
        NamespaceConfig.parse(conn)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("value", ["maybe", "True", "1", ""])
def test_a_development_emulator_flag_that_the_sdks_would_read_as_false_is_refused(value):
    # The SDKs take anything but a lower-case "true" as false: TLS to an emulator.
    with pytest.raises(ConfigError, match="UseDevelopmentEmulator") as info:
        NamespaceConfig.parse(f"{CONN};UseDevelopmentEmulator={value}")
    assert SECRET not in str(info.value)
    assert NamespaceConfig.parse(f"{CONN};UseDevelopmentEmulator=true").connection_string


@pytest.mark.parametrize("field", ["url", "connection_string", "name"])
def test_a_namespace_field_that_is_not_a_string_is_a_config_error(field):
    with pytest.raises(ConfigError, match=field):
        NamespaceConfig(**{"url": "local://east", field: 5})


def test_a_namespace_needs_a_url_or_a_connection_string():
    with pytest.raises(ConfigError, match="needs a url"):
        NamespaceConfig()


def test_namespace_config_is_frozen():
    namespace = NamespaceConfig(url="local://east")
    with pytest.raises(dataclasses.FrozenInstanceError):
        namespace.url = "local://west"  # type: ignore[misc]


# -- secrets stay out -------------------------------------------------------------------


def test_namespace_config_repr_and_str_hide_the_connection_string():
    # Given a namespace built from a connection string
    namespace = NamespaceConfig.parse(CONN)
    # When it is shown / Then the key is absent, and a placeholder says there is one
    for text in (repr(namespace), str(namespace), f"{namespace}", f"{namespace!r}"):
        assert SECRET not in text
        assert "connection_string=***" in text
        assert "x.servicebus.windows.net" in text


def test_gateway_config_repr_and_str_hide_connection_strings(tmp_path):
    env = {"GEOGATEWAY_PRIMARY": CONN, "GEOGATEWAY_SECONDARY": CONN_Y}
    config = GatewayConfig.load(write(tmp_path, MINIMAL), env=env)
    assert config.primary.connection_string == CONN  # kept for use...
    for text in (repr(config), str(config)):  # ...but never shown
        assert SECRET not in text
        assert "x.servicebus.windows.net" in text


@pytest.mark.parametrize(
    "text",
    [
        # a connection string pasted as a url
        f'primary = {{ url = "{CONN}" }}\nsecondary = "local://west"\nentity = "o"\n',
        # a connection string without an endpoint
        'primary = "Endpoint=;SharedAccessKey=SECRETVALUE123="\nsecondary = "local://w"\n'
        'entity = "o"\n',
        # an unknown option next to a connection string
        f'entity = "o"\nsecondary = "local://w"\n[primary]\nconnection_string = "{CONN}"\n'
        'token = "SECRETVALUE123"\n',
        # a required key missing while the others hold secrets
        f'primary = "{CONN}"\nsecondary = "{CONN_Y}"\n',
        # a TOML error on the line that holds the secret
        f'primary = "{CONN}" "\nsecondary = "local://w"\nentity = "o"\n',
        # the same namespace twice
        f'primary = "{CONN}"\nsecondary = "{CONN}"\nentity = "o"\n',
    ],
    ids=["conn-as-url", "no-endpoint", "unknown-option", "missing-entity", "bad-toml", "twice"],
)
def test_config_errors_never_contain_the_secret(tmp_path, text):
    assert SECRET not in load_error(write(tmp_path, text))


def test_a_bad_connection_string_in_env_does_not_leak_the_secret(tmp_path):
    env = {"GEOGATEWAY_PRIMARY": f"Endpoint=;SharedAccessKey={SECRET}="}
    assert SECRET not in load_error(write(tmp_path, MINIMAL), env=env)


# -- the small records ------------------------------------------------------------------


def test_durable_queue_config_defaults_and_home_expansion(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    queue = DurableQueueConfig(path="~/q.db")  # type: ignore[arg-type]
    assert queue.path == tmp_path / "q.db"
    assert queue.max_messages is not None and queue.max_messages >= 1
    assert queue.max_bytes is not None and queue.max_bytes >= 1
    assert queue.synchronous == "FULL"


def test_durable_queue_caps_may_be_unbounded(tmp_path):
    queue = DurableQueueConfig(path=tmp_path / "q.db", max_messages=None, max_bytes=None)
    assert (queue.max_messages, queue.max_bytes) == (None, None)


@pytest.mark.parametrize("name", ["max_messages", "max_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_durable_queue_caps_must_be_whole_numbers_from_one(tmp_path, name, value):
    with pytest.raises(ConfigError, match=name):
        DurableQueueConfig(path=tmp_path / "q.db", **{name: value})


def test_dedup_config_defaults_to_the_default_window(tmp_path):
    dedup = DedupConfig(path=tmp_path / "d.db")
    assert dedup.window == DedupWindow()


@pytest.mark.parametrize("entity", ["", "   ", " orders"])
def test_sender_rejects_an_entity_that_cannot_name_a_queue(tmp_path, entity):
    from gateway.aio import AsyncGeoSender

    # Given an entity name that is blank or padded / Then the sender refuses it clearly
    with pytest.raises(ConfigError, match="entity must be the name"):
        AsyncGeoSender(
            primary="local://primary", secondary="local://secondary", entity=entity,
            data_dir=tmp_path, state_dir=tmp_path,
        )


# -- Azure namespace kinds and emulated namespaces ------------------------------------------


def test_azure_namespaces_are_service_bus_unless_the_kind_says_event_hubs(tmp_path):
    text = (f'primary = "{CONN}"\nsecondary = {{ url = "sb://y.servicebus.windows.net", '
            'kind = "eventhubs" }\nentity = "o"\n')
    config = GatewayConfig.load(write(tmp_path, text), env={})
    assert (config.primary.kind, config.secondary.kind) == ("servicebus", "eventhubs")
    both = GatewayConfig.load(write(tmp_path, "kind = 'eventhubs'\n" + text), env={})
    assert both.primary.kind == "eventhubs"
    env = GatewayConfig.load(write(tmp_path, text), env={"GEOGATEWAY_KIND": "eventhubs"})
    assert env.primary.kind == "eventhubs" and env.secondary.kind == "eventhubs"
    assert "kind='eventhubs'" in repr(config.secondary) and SECRET not in repr(config.primary)


@pytest.mark.parametrize("kind", ["kafka", "", "ServiceBus"])
def test_an_unknown_kind_is_a_config_error(tmp_path, kind):
    message = load_error(write(tmp_path, MINIMAL + f"kind = '{kind}'\n"))
    assert "unknown namespace kind" in message and "'servicebus' or 'eventhubs'" in message


def test_two_emulated_namespaces_on_one_host_differ_by_port(tmp_path):
    def conn(port: int) -> str:
        return (f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;"
                f"SharedAccessKey={SECRET}=;UseDevelopmentEmulator=true")

    text = f'primary = "{conn(5672)}"\nsecondary = "{conn(5673)}"\nentity = "o"\n'
    config = GatewayConfig.load(write(tmp_path, text), env={})
    assert (config.primary.name, config.secondary.name) == ("127.0.0.1:5672", "127.0.0.1:5673")
    assert config.primary.fully_qualified_namespace == "127.0.0.1:5672"
    assert "same namespace" in load_error(
        write(tmp_path, f'primary = "{conn(5672)}"\nsecondary = "{conn(5672)}"\nentity = "o"\n'))
