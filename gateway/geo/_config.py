"""Configuration: frozen, keyword-only, validated records, loaded from TOML and env.

Connection strings and keys never appear in a repr, a log line or an error.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from gateway._support.secrets import redact
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
]

ENV_PREFIX = "GEOGATEWAY_"

KINDS = ("servicebus", "eventhubs")
"""What an Azure namespace is used as: Service Bus queues, or Event Hubs."""


@dataclass(frozen=True, kw_only=True)
class NamespaceConfig:
    """One namespace: ``local://NAME`` or an Azure connection string.

    Args:
        url: ``local://NAME`` for an embedded namespace, or ``sb://HOST`` /
            a fully qualified namespace for Azure (signed in with
            ``DefaultAzureCredential`` when there is no connection string).
        connection_string: an Azure connection string; kept out of every repr.
        name: the name the gateway uses for it (defaults to the local name, or the
            host, with its port when it has one).
        kind: for Azure, ``"servicebus"`` (queues; the default) or ``"eventhubs"``.
    """

    url: str = ""
    connection_string: str | None = field(default=None, repr=False)
    name: str = ""
    kind: str = "servicebus"

    def __post_init__(self) -> None:
        for what in ("url", "connection_string", "name"):
            value = getattr(self, what)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"a namespace's {what} must be a string, "
                                  f"not {type(value).__name__}")
        if not self.url and not self.connection_string:
            raise ConfigError("a namespace needs a url (local://NAME) or a connection_string")
        if self.kind not in KINDS:
            raise ConfigError(f"unknown namespace kind {self.kind!r}: use "
                              f"{' or '.join(map(repr, KINDS))}")
        if self.connection_string and not self.url:
            object.__setattr__(self, "url", _endpoint_of(self.connection_string))
        if self.connection_string:
            _check_connection_string(self.connection_string)
        parts = _split(self.url)
        if parts.scheme == "local":
            if not parts.netloc or parts.path not in ("", "/"):
                raise ConfigError(f"bad local namespace url {self.url!r}: use local://NAME")
            host, port = parts.netloc, None
        else:
            host, port = _host_and_port(self.url, parts)
        if not self.name:
            object.__setattr__(self, "name", host if port is None else f"{host}:{port}")

    @classmethod
    def parse(cls, value: str, *, kind: str = "servicebus") -> NamespaceConfig:
        """Read ``local://NAME``, ``sb://HOST`` or an ``Endpoint=...`` connection string."""
        value = value.strip()
        if value.lower().startswith("endpoint="):
            return cls(connection_string=value, kind=kind)
        return cls(url=value, kind=kind)

    @property
    def is_local(self) -> bool:
        return self.url.startswith("local://")

    @property
    def local_name(self) -> str:
        """The embedded namespace's name (``local://NAME``)."""
        return urlsplit(self.url).netloc

    @property
    def fully_qualified_namespace(self) -> str:
        """The Azure host (with ``:port`` when the url has one)."""
        parts = urlsplit(self.url if "://" in self.url else f"sb://{self.url}")
        host = parts.hostname or ""
        return f"{host}:{parts.port}" if parts.port else host

    def __repr__(self) -> str:
        secret = ", connection_string=***" if self.connection_string else ""
        kind = "" if self.is_local else f", kind={self.kind!r}"
        return (f"NamespaceConfig(name={self.name!r}, url={redact(self.url)!r}{kind}"
                f"{secret})")

    __str__ = __repr__


def _endpoint_key(namespace: NamespaceConfig) -> tuple[str, str]:
    """What identifies the namespace itself, whatever name it is given."""
    if namespace.is_local:
        return ("local", namespace.local_name)
    return ("azure", namespace.fully_qualified_namespace)


_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")
_BOOLEAN_FIELDS = ("usedevelopmentemulator",)


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url if "://" in url else f"sb://{url}")
    except ValueError as exc:  # an unclosed IPv6 bracket
        raise ConfigError(f"bad namespace url {redact(url)!r}: {exc}") from None


def _host_and_port(url: str, parts: SplitResult) -> tuple[str, int | None]:
    """The host and port of an Azure url; ``ConfigError`` for anything unusable."""
    bad = (f"bad namespace url {redact(url)!r}: use local://NAME, sb://HOST[:PORT] "
           "or a connection string")
    if parts.scheme not in ("sb", "amqp", "amqps") or not parts.hostname:
        raise ConfigError(bad)
    try:
        port = parts.port  # raises for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise ConfigError(f"{bad} ({exc})") from None
    host = parts.netloc.rpartition("@")[2]
    if port is not None or host.endswith(":"):
        host = host.rpartition(":")[0]
    if not _HOST.fullmatch(host) or port == 0:
        raise ConfigError(bad)
    return parts.hostname or host, port


def _check_connection_string(connection_string: str) -> None:
    """Refuse fields the SDKs would misread silently (a boolean that is not one)."""
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        # The SDKs read anything but a lower-case "true" as false.
        if key.strip().lower() in _BOOLEAN_FIELDS and value.strip() not in ("true", "false"):
            raise ConfigError(
                f"{key.strip()} in the connection string must be true or false (lower "
                f"case, as the Azure SDKs read it), not {redact(value.strip())!r}"
            )


def _endpoint_of(connection_string: str) -> str:
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "endpoint" and value:
            return value.strip()
    raise ConfigError("the connection string has no Endpoint=sb://... part")


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
class DedupConfig:
    """The receive side's persistent ``MessageId`` window."""

    path: Path
    window: DedupWindow = field(default_factory=DedupWindow)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())


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

    def __post_init__(self) -> None:
        if not isinstance(self.entity, str) or not self.entity.strip():
            raise ConfigError("entity must be the name of a queue or event hub")
        if self.primary.name == self.secondary.name or _endpoint_key(
            self.primary
        ) == _endpoint_key(self.secondary):
            raise ConfigError(
                f"primary and secondary are the same namespace ({self.primary.name!r})"
            )

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None
    ) -> GatewayConfig:
        """Read a TOML file (or ``$GEOGATEWAY_CONFIG``), then let env override it.

        Raises:
            ConfigError: a missing or malformed file, an unknown key, a bad value.
        """
        env = os.environ if env is None else env
        path = path or env.get(ENV_PREFIX + "CONFIG")
        data: dict[str, Any] = _read_toml(Path(path)) if path else {}
        base = Path(path).parent if path else Path.cwd()
        _apply_env(data, env)
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
    "DURABLE_QUEUE": ("durable_queue", "path"),
    "DEDUP_STORE": ("dedup", "path"),
    "KIND": ("kind",),
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
        elif len(keys) == 2:
            section = data.setdefault(keys[0], {})
            if isinstance(section, dict):
                section[keys[1]] = value
        else:
            data[keys[0]] = value
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
}


def _from_mapping(data: dict[str, Any], *, base: Path, source: str) -> GatewayConfig:
    _reject_unknown(data, _TOP_KEYS, "the top level", source)
    for required in ("primary", "secondary", "entity"):
        if required not in data:
            raise ConfigError(
                f"{required!r} is missing from {source}: set it in the file or "
                f"${ENV_PREFIX}{required.upper()}"
            )
    retry = _section(data, "retry", {"attempts", "initial_backoff", "max_backoff", "max_delay"},
                     source)
    deadlines = _section(data, "deadlines", set(_DEADLINE_KEYS), source)
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
    queue = _section(data, "durable_queue", {"path", "max_messages", "max_bytes", "synchronous"},
                     source)
    dedup = _section(data, "dedup", {"path", "window_seconds", "window_count"}, source)
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
        dedup=DedupConfig(
            path=_path(base, dedup["path"], "dedup path", source),
            # DedupWindow checks the types itself (a float() or int() here would turn
            # 'ten' into a ValueError and silently truncate 1.5).
            window=DedupWindow(
                seconds=dedup.get("window_seconds", 600.0),
                count=dedup.get("window_count", 1_000_000),
            ),
        ) if dedup.get("path") else None,
        data_dir=_path(base, data["data_dir"], "data_dir", source)
        if data.get("data_dir") else None,
        state_dir=_path(base, data["state_dir"], "state_dir", source)
        if data.get("state_dir") else None,
    )


def _path(base: Path, value: Any, what: str, source: str) -> Path:
    """A path from the config: ``~`` expanded, relative ones against ``base``."""
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{what} in {source} must be a path, not {type(value).__name__}")
    return base / Path(value).expanduser()


def _section(data: dict[str, Any], name: str, known: set[str], source: str) -> dict[str, Any]:
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
    _reject_unknown(value, {"url", "connection_string", "name", "kind"}, f"[{role}]", source)
    kind = value.get("kind", kind)
    if not isinstance(kind, str):
        raise ConfigError(f"kind of {role} in {source} must be 'servicebus' or 'eventhubs'")
    return NamespaceConfig(
        url=value.get("url") or "",
        connection_string=value.get("connection_string"),
        name=value.get("name") or "",
        kind=kind,
    )


def _reject_unknown(section: Mapping[str, Any], known: set[str], where: str, source: str) -> None:
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(
            f"unknown option {unknown[0]!r} in {where} of {source}; "
            f"known options: {', '.join(sorted(known))}"
        )
