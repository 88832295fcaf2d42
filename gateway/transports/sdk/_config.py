"""How an SDK transport is configured: options, TLS context, credential, connection strings."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from replication import ConfigError

__all__ = [
    "ConnectionStringParts",
    "SdkOptions",
    "check_namespace_host",
    "connection_string_parts",
    "default_credential",
    "host_of",
    "tls_context",
]

OptionsT = TypeVar("OptionsT", bound="SdkOptions")


@dataclass(frozen=True, kw_only=True)
class SdkOptions:
    """Bounds on an Azure SDK client's own retries and waits.

    The gateway retries and fails over itself (``RetryPolicy``), so by default the
    SDK does not retry: a namespace that refuses connections surfaces as
    ``NamespaceUnavailable`` within tens of milliseconds, one that hangs within
    ``operation_timeout``. (The SDKs sleep one backoff even after their last attempt,
    so the default backoff is 0 too; raise both together.)

    Args:
        retry_total: SDK retries per operation (its default is 3).
        retry_backoff_factor: the SDK's first backoff in seconds (its default is 0.8).
        retry_backoff_max: the SDK's longest backoff in seconds (its default is 120).
        retry_mode: ``"exponential"`` or ``"fixed"``.
        operation_timeout: seconds one send, settlement or management call may take,
            SDK retries included; a send that takes longer raises ``OperationTimeout``.
        probe_timeout: seconds :meth:`probe` waits for the namespace to answer.
        probe_entity: the entity :meth:`probe` asks about; default: the connection
            string's ``EntityPath``, else the last entity used, else a name that
            does not exist (a "not found" answer proves the namespace answers too).
        socket_timeout: the longest the SDK's connection waits in one socket read
            (its default is 0.2). A settlement or send on a connection whose receiver is
            waiting for messages queues behind that read, so this bounds the latency
            a waiting receiver adds to every settlement; smaller costs more wake-ups
            while idle.
    """

    retry_total: int = 0
    retry_backoff_factor: float = 0.0
    retry_backoff_max: float = 0.5
    retry_mode: str = "exponential"
    operation_timeout: float = 2.0
    probe_timeout: float = 2.0
    probe_entity: str | None = None
    socket_timeout: float = 0.2

    def __post_init__(self) -> None:
        _whole(self, "retry_total", minimum=0)
        for name in ("retry_backoff_factor", "retry_backoff_max"):
            _seconds(self, name, positive=False)
        for name in ("operation_timeout", "probe_timeout", "socket_timeout"):
            _seconds(self, name, positive=True)
        if self.retry_mode not in ("exponential", "fixed"):
            raise ConfigError("retry_mode must be 'exponential' or 'fixed', "
                              f"not {self.retry_mode!r}")
        if self.probe_entity is not None and (
            not isinstance(self.probe_entity, str) or not self.probe_entity.strip()
        ):
            raise ConfigError(f"probe_entity must be an entity name, not {self.probe_entity!r}")

    @classmethod
    def from_options(cls: type[OptionsT], options: Mapping[str, Any], *, what: str) -> OptionsT:
        """Build from keyword options, refusing unknown names loudly.

        Raises:
            ConfigError: an unknown option or a bad value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown {what} option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        return cls(**options)

    def client_kwargs(self) -> dict[str, Any]:
        """The keywords every SDK client constructor takes: retries, the socket
        timeout, and the process's one TLS context (:func:`tls_context`)."""
        return {
            "retry_total": self.retry_total,
            "retry_backoff_factor": self.retry_backoff_factor,
            "retry_backoff_max": self.retry_backoff_max,
            "retry_mode": self.retry_mode,
            "socket_timeout": self.socket_timeout,
            "ssl_context": tls_context(),
        }


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """The TLS client context of every SDK connection in this process.

    The same as the SDKs build without one (certifi's CA bundle; certificates and
    host names verified), built once: otherwise the SDKs load the bundle again for
    every connection they open, 20-100 ms of CPU on the event loop each time, and
    during an outage they open one per reconnect attempt and per probe, which held
    up sends to the namespace that was still up.
    """
    import certifi  # the SDKs' own dependency, imported only when a client is built

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(certifi.where())
    return context


def default_credential(service: str) -> Any:
    """azure-identity's async ``DefaultAzureCredential``, for a namespace given by its
    host name alone; imported here, as only such namespaces need azure-identity.

    Raises:
        ConfigError: azure-identity is not installed.
    """
    try:
        identity = importlib.import_module("azure.identity.aio")
    except ImportError as exc:
        raise ConfigError(f"a {service} namespace without a connection string or credential "
                          "needs azure-identity: pip install azure-identity") from exc
    return identity.DefaultAzureCredential()


def check_namespace_host(value: object) -> str:
    """Return ``value`` if it can be a fully qualified namespace; raise ``ConfigError``."""
    if not isinstance(value, str) or not value:
        raise ConfigError("fully_qualified_namespace must be a host name such as "
                          "NAME.servicebus.windows.net")
    return value


def _whole(options: object, name: str, *, minimum: int) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, not {value!r}")


def _seconds(options: object, name: str, *, positive: bool) -> None:
    value = getattr(options, name)
    # ``not value > 0`` also refuses NaN; bool is an int but not a duration.
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name} must be a number of seconds {bound}, not {value!r}")


# -- connection strings ----------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionStringParts:
    """The non-secret parts of a connection string, and its secret values (to scrub)."""

    host: str
    entity: str | None
    secrets: tuple[str, ...] = dataclasses.field(repr=False)


def host_of(address: str) -> str:
    """The host (and port) of ``sb://HOST/`` or ``HOST``."""
    return address.strip().split("://", 1)[-1].strip("/").split("/")[0]


def connection_string_parts(conn_str: str) -> ConnectionStringParts:
    """Split an Azure connection string (``Endpoint=sb://HOST/;...``).

    Raises:
        ConfigError: no ``Endpoint``; the message never quotes the string.
    """
    if not isinstance(conn_str, str):
        raise ConfigError(f"a connection string must be a str, not {type(conn_str).__name__}")
    host, entity, secrets = "", None, []
    for part in conn_str.split(";"):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "endpoint":
            host = host_of(value)
        elif key == "entitypath":
            entity = value.strip() or None
        elif key in ("sharedaccesskey", "sharedaccesssignature"):
            secrets.append(value.strip())
    if not host:
        raise ConfigError("the connection string has no Endpoint=sb://HOST/ part")
    return ConnectionStringParts(host=host, entity=entity, secrets=tuple(s for s in secrets if s))
