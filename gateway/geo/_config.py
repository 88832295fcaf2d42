"""Configuration: frozen, keyword-only, validated records, loaded from TOML and env.

Connection strings and keys never appear in a repr, a log line or an error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.geo._dedup_config import DedupConfig, dedup_layer, settle_dedup_layer
from gateway.geo._namespace_config import KINDS, NamespaceConfig, endpoint_key
from gateway.stores import is_dsn
from replication import (
    ConfigError,
    DeadlinePolicy,
    DedupWindow,
    Mode,
    ReplicationPolicy,
    RetryPolicy,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "KINDS",
    "DedupConfig",
    "DurableQueueConfig",
    "GatewayConfig",
    "NamespaceConfig",
    "ObservabilityConfig",
]

ENV_PREFIX = "GEOGATEWAY_"


@dataclass(frozen=True, kw_only=True)
class DurableQueueConfig:
    """The client-side durable queue that holds messages while both namespaces are down."""

    path: Path
    max_messages: int | None = 1_000_000
    max_bytes: int | None = 1 << 30
    synchronous: str = "FULL"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())
        for name in ("max_messages", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"durable_queue {name} must be a whole number >= 1")
        if str(self.synchronous).upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ConfigError("durable_queue synchronous must be FULL, EXTRA or NORMAL")


@dataclass(frozen=True, kw_only=True)
class ObservabilityConfig:
    """Which observability hooks what is built from the configuration gets
    (``gateway.observability.hooks_from_config``): ``[metrics] enabled`` (Prometheus,
    the ``metrics`` extra) and ``[tracing] enabled`` (OpenTelemetry, the ``tracing``
    extra)."""

    metrics: bool = False
    tracing: bool = False

    def __post_init__(self) -> None:
        for name in ("metrics", "tracing"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"[{name}] enabled must be true or false")


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything a sender or receiver needs, from a TOML file and ``GEOGATEWAY_*`` env.

    See the README's configuration reference for the file's keys.
    """

    primary: NamespaceConfig
    secondary: NamespaceConfig
    entity: str
    policy: ReplicationPolicy = field(default_factory=ReplicationPolicy)
    durable_queue: DurableQueueConfig | None = None
    dedup: DedupConfig | None = None
    data_dir: Path | None = None
    state_dir: Path | None = None
    #: A PostgreSQL DSN: the senders' roles live there, shared by a fleet (a secret:
    #: it may hold a password, so it is kept out of the repr).
    roles_store: str | None = field(default=None, repr=False)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)

    def __post_init__(self) -> None:
        if self.roles_store is not None and not _is_dsn(self.roles_store):
            raise ConfigError("roles_store must be a PostgreSQL DSN (postgresql://user:"
                              "password@host:port/database); role files go in state_dir")
        if not isinstance(self.entity, str) or not self.entity.strip():
            raise ConfigError("entity must be the name of a queue or event hub")
        if self.primary.name == self.secondary.name or endpoint_key(
            self.primary
        ) == endpoint_key(self.secondary):
            raise ConfigError(
                f"primary and secondary are the same namespace ({self.primary.name!r})"
            )

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> GatewayConfig:
        """Read a TOML file (or ``$GEOGATEWAY_CONFIG``), then let env override it.

        Each layer wins over the one before: ``defaults``, the file, ``GEOGATEWAY_*``
        env, ``overrides``. Relative paths in the file are relative to the file; in
        env and ``overrides``, to the current directory.

        Args:
            path: the TOML file; ``$GEOGATEWAY_CONFIG`` when not given; neither: env only.
            env: the environment to read (default ``os.environ``).
            defaults: values, in the file's layout, for what nothing else sets.
            overrides: values, in the file's layout, over everything else (a command
                line's options); ``None`` values are left out.

        Raises:
            ConfigError: a missing or malformed file, an unknown key, a bad value.
        """
        env = os.environ if env is None else env
        path = path or env.get(ENV_PREFIX + "CONFIG")
        data = _overlay(dict(defaults or {}), _read_toml(Path(path)) if path else {})
        base = Path(path).parent if path else Path.cwd()
        _apply_env(data, env)
        data = _overlay(data, overrides or {}, from_cwd=True)
        return _from_mapping(data, base=base, source=str(path) if path else "the environment")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fp:
            return dict(tomllib.load(fp))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start}): save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None


_ENV_KEYS = {
    "PRIMARY": ("primary",),
    "SECONDARY": ("secondary",),
    "ENTITY": ("entity",),
    "MODE": ("mode",),
    "FAILBACK": ("failback",),
    "DATA_DIR": ("data_dir",),
    "STATE_DIR": ("state_dir",),
    "ROLES_STORE": ("roles_store",),
    "DURABLE_QUEUE": ("durable_queue", "path"),
    "DEDUP_STORE": ("dedup", "path"),  # or ("dedup", "store") for a DSN
    "DEDUP_SCHEMA": ("dedup", "schema"),
    "DEDUP_FALLBACK": ("dedup", "fallback"),
    "KIND": ("kind",),
    "METRICS": ("metrics", "enabled"),
    "TRACING": ("tracing", "enabled"),
}

#: ``GEOGATEWAY_DEADLINE_<KEY>`` sets ``[deadlines] <key>`` (a number).
_DEADLINE_KEYS = ("floor", "ceiling", "multiplier", "percentile", "window", "initial",
                  "per_mib")


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    for suffix, keys in _ENV_KEYS.items():
        value = env.get(ENV_PREFIX + suffix)
        if value is None:
            continue
        if keys[0] in ("primary", "secondary"):
            parsed = NamespaceConfig.parse(value)
            data[keys[0]] = {"url": parsed.url, "connection_string": parsed.connection_string}
            if not parsed.connection_string:
                del data[keys[0]]["connection_string"]
        elif keys[0] == "failback":
            data["failback"] = env_flag(ENV_PREFIX + suffix, value)
        elif keys[0] in ("metrics", "tracing"):
            section = data.setdefault(keys[0], {})
            if isinstance(section, dict):
                section["enabled"] = env_flag(ENV_PREFIX + suffix, value)
        elif keys[0] in _CHOICES:
            data[keys[0]] = _env_choice(keys[0], ENV_PREFIX + suffix, value)
        elif keys == ("dedup", "path"):
            section = data.setdefault("dedup", {})
            if isinstance(section, dict):
                layer = {k: _from_cwd(v) if k == "path" else v
                         for k, v in dedup_layer(value).items()}
                settle_dedup_layer(section, layer)
                section.update(layer)
        elif len(keys) == 2:
            section = data.setdefault(keys[0], {})
            if isinstance(section, dict):
                section[keys[1]] = value if keys[1] == "schema" else _from_cwd(value)
        else:
            data[keys[0]] = _from_cwd(value) if keys[0] in _PATH_KEYS else value
    for key in _DEADLINE_KEYS:
        variable = f"{ENV_PREFIX}DEADLINE_{key.upper()}"
        value = env.get(variable)
        if value is not None:
            section = data.setdefault("deadlines", {})
            if isinstance(section, dict):
                section[key] = env_number(variable, value, whole=key == "window")


def env_number(variable: str, value: str, *, whole: bool = False) -> float | int:
    """An environment variable's number (a whole one with ``whole``).

    Raises:
        ConfigError: it is not a number (the policy checks its range).
    """
    try:
        return int(value.strip()) if whole else float(value.strip())
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise ConfigError(f"${variable} must be {kind}, not {value!r}") from None


_CHOICES = {"mode": tuple(m.value for m in Mode), "kind": KINDS}


def _env_choice(key: str, variable: str, value: str) -> str:
    """One of the values ``key`` takes (any case); ``ConfigError`` naming the variable
    otherwise."""
    word = value.strip().lower()
    if word not in _CHOICES[key]:
        raise ConfigError(f"unknown {key} {value!r} in ${variable}: use "
                          f"{' or '.join(map(repr, _CHOICES[key]))}")
    return word


#: The keys (top level, or a section's ``path``) that hold paths.
_PATH_KEYS = ("data_dir", "state_dir", "path")
_SECTIONS = ("retry", "deadlines", "durable_queue", "dedup", "metrics", "tracing")


def _from_cwd(value: Any) -> Any:
    """A relative path from env or the command line, made absolute against the current
    directory (so that a config file elsewhere does not move it)."""
    if isinstance(value, (str, os.PathLike)) and os.fspath(value):
        return os.fspath(Path(value).expanduser().absolute())
    return value


def _overlay(data: dict[str, Any], layer: Mapping[str, Any], *,
             from_cwd: bool = False) -> dict[str, Any]:
    """``data`` with ``layer``'s values over it: sections merged key by key, anything
    else (a namespace's table included) replaced; ``None`` values left out."""
    for key, value in layer.items():
        if value is None:
            continue
        if key in _SECTIONS and isinstance(value, Mapping):
            section = data.get(key)
            merged = dict(section) if isinstance(section, dict) else {}
            if key == "dedup":
                settle_dedup_layer(merged, dict(value))
            for name, item in value.items():
                if item is not None:
                    merged[name] = (_from_cwd(item) if from_cwd and name in ("path", "fallback")
                                    else item)
            data[key] = merged
        else:
            data[key] = _from_cwd(value) if from_cwd and key in _PATH_KEYS else value
    return data


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(variable: str, value: str) -> bool:
    """An environment variable's true/false value.

    Raises:
        ConfigError: anything but 1/0, true/false, yes/no, on/off (any case), so a
            typo is never read as "false".
    """
    word = value.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ConfigError(
        f"${variable} must be true or false (or 1/0, yes/no, on/off), not {value!r}"
    )


_TOP_KEYS = {
    "primary", "secondary", "entity", "mode", "failback", "probe_interval",
    "data_dir", "state_dir", "retry", "deadlines", "durable_queue", "dedup", "kind",
    "roles_store", "metrics", "tracing",
}
#: The keys each table takes (the configuration reference lists them; a test compares).
SECTION_KEYS: dict[str, frozenset[str]] = {
    "retry": frozenset({"attempts", "initial_backoff", "max_backoff", "max_delay"}),
    "deadlines": frozenset(_DEADLINE_KEYS),
    "durable_queue": frozenset({"path", "max_messages", "max_bytes", "synchronous"}),
    "dedup": frozenset({"path", "store", "schema", "fallback", "window_seconds", "window_count"}),
    "metrics": frozenset({"enabled"}), "tracing": frozenset({"enabled"}),
    # [primary] and [secondary], when a namespace is a table rather than a string
    **dict.fromkeys(("primary", "secondary"), frozenset({"url", "connection_string", "name",
                                                         "kind"})),
}


def _from_mapping(data: dict[str, Any], *, base: Path, source: str) -> GatewayConfig:
    _reject_unknown(data, _TOP_KEYS, "the top level", source)
    for required in ("primary", "secondary", "entity"):
        if required not in data:
            raise ConfigError(
                f"{required!r} is missing from {source}: set it in the file or "
                f"${ENV_PREFIX}{required.upper()}"
            )
    retry = _section(data, "retry", SECTION_KEYS["retry"], source)
    deadlines = _section(data, "deadlines", SECTION_KEYS["deadlines"], source)
    try:
        policy = ReplicationPolicy(
            mode=Mode.parse(data.get("mode", "passive")),
            failback=data.get("failback", False),
            retry=RetryPolicy(**retry),
            probe_interval=data.get("probe_interval", 0.25),
            deadlines=DeadlinePolicy(**deadlines),
        )
    except TypeError as exc:  # a value of the wrong type inside the dataclasses
        raise ConfigError(f"bad value in {source}: {exc}") from None
    queue = _section(data, "durable_queue", SECTION_KEYS["durable_queue"], source)
    dedup = _section(data, "dedup", SECTION_KEYS["dedup"], source)
    metrics = _section(data, "metrics", SECTION_KEYS["metrics"], source)
    tracing = _section(data, "tracing", SECTION_KEYS["tracing"], source)
    kind = data.get("kind", "servicebus")
    return GatewayConfig(
        primary=_namespace(data["primary"], "primary", source, kind),
        secondary=_namespace(data["secondary"], "secondary", source, kind),
        entity=data["entity"],
        policy=policy,
        durable_queue=DurableQueueConfig(
            **{**queue, "path": _path(base, queue["path"], "durable_queue path", source)}
        )
        if queue.get("path") else None,
        dedup=_dedup(base, dedup, source) if dedup.get("path") or dedup.get("store") else None,
        data_dir=_path(base, data["data_dir"], "data_dir", source)
        if data.get("data_dir") else None,
        state_dir=_path(base, data["state_dir"], "state_dir", source)
        if data.get("state_dir") else None,
        observability=ObservabilityConfig(metrics=metrics.get("enabled", False),
                                          tracing=tracing.get("enabled", False)),
        roles_store=_dsn(data.get("roles_store"), "roles_store", source),
    )


def _dedup(base: Path, dedup: dict[str, Any], source: str) -> DedupConfig:
    path, store = dedup.get("path"), dedup.get("store")
    if isinstance(path, str) and is_dsn(path):  # a DSN is never a file name
        path, store = None, store or path
    for name, value in (("store", store), ("schema", dedup.get("schema", "geogateway"))):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"dedup {name} in {source} must be a string")
    return DedupConfig(
        path=_path(base, path, "dedup path", source) if path else None,
        store=store or None,
        schema=dedup.get("schema", "geogateway"),
        fallback=_path(base, dedup["fallback"], "dedup fallback", source)
        if dedup.get("fallback") else None,
        # DedupWindow checks the types itself (a float() or int() here would turn
        # 'ten' into a ValueError and silently truncate 1.5).
        window=DedupWindow(
            seconds=dedup.get("window_seconds", 600.0),
            count=dedup.get("window_count", 1_000_000),
        ),
    )


def _is_dsn(value: object) -> bool:
    from gateway.stores import is_dsn

    return is_dsn(value)


def _dsn(value: Any, what: str, source: str) -> str | None:
    """A PostgreSQL DSN from the config (never echoed: it may hold a password)."""
    if value is None or value == "":
        return None
    if not _is_dsn(value):
        raise ConfigError(f"{what} in {source} must be a PostgreSQL DSN (postgresql://user:"
                          "password@host:port/database)")
    return str(value)


def _path(base: Path, value: Any, what: str, source: str) -> Path:
    """A path from the config: ``~`` expanded, relative ones against ``base``."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{what} in {source} must be a path, not {type(value).__name__}")
    return base / Path(value).expanduser()


def _section(data: dict[str, Any], name: str, known: frozenset[str], source: str) -> dict[str, Any]:
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"[{name}] in {source} must be a table")
    _reject_unknown(section, known, f"[{name}]", source)
    return section


def _namespace(value: Any, role: str, source: str, kind: Any) -> NamespaceConfig:
    if isinstance(value, str):
        if not isinstance(kind, str):
            raise ConfigError(f"kind in {source} must be 'servicebus' or 'eventhubs'")
        return NamespaceConfig.parse(value, kind=kind)
    if not isinstance(value, dict):
        raise ConfigError(f"{role} in {source} must be a url, a connection string or a table")
    _reject_unknown(value, SECTION_KEYS[role], f"[{role}]", source)
    kind = value.get("kind", kind)
    if not isinstance(kind, str):
        raise ConfigError(f"kind of {role} in {source} must be 'servicebus' or 'eventhubs'")
    return NamespaceConfig(
        url=value.get("url") or "",
        connection_string=value.get("connection_string"),
        name=value.get("name") or "",
        kind=kind,
    )


def _reject_unknown(section: Mapping[str, Any], known: frozenset[str] | set[str], where: str,
                    source: str) -> None:
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(
            f"unknown option {unknown[0]!r} in {where} of {source}; "
            f"known options: {', '.join(sorted(known))}"
        )
