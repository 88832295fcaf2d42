"""A namespace's configuration: ``local://NAME``, an Azure url or a connection string.

Connection strings, keys and credentials never appear in a repr, a log line or an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

from gateway._support.secrets import redact
from replication import ConfigError

if TYPE_CHECKING:
    from gateway.transports.sdk import Credential

__all__ = ["KINDS", "NamespaceConfig", "endpoint_key"]

KINDS = ("servicebus", "eventhubs")
"""What an Azure namespace is used as: Service Bus queues, or Event Hubs."""


@dataclass(frozen=True, kw_only=True)
class NamespaceConfig:
    """One namespace: ``local://NAME``, an Azure host or an Azure connection string.

    Args:
        url: ``local://NAME`` for an embedded namespace, or ``sb://HOST`` /
            a fully qualified namespace for Azure (signed in with ``credential``,
            else with ``DefaultAzureCredential``, when there is no connection string).
        connection_string: an Azure connection string; kept out of every repr.
        name: the name the gateway uses for it (defaults to the local name, or the
            host, with its port when it has one).
        kind: for Azure, ``"servicebus"`` (queues; the default) or ``"eventhubs"``.
        credential: what to sign in to the Azure host with: an async token credential
            (``azure.identity.aio``), an ``AzureNamedKeyCredential`` or an
            ``AzureSasCredential``; passed to the SDK clients as it is, and closed by
            its owner, not here. Its type is all a repr shows.
        use_development_emulator: the host is an emulator: connect without TLS, to
            the url's port (what ``UseDevelopmentEmulator=true`` says in a
            connection string).

    Raises:
        ConfigError: no url or connection string; a bad url, kind or connection
            string; a credential beside a connection string or for a local
            namespace; a sync token credential or something that is no credential.
    """

    url: str = ""
    connection_string: str | None = field(default=None, repr=False)
    name: str = ""
    kind: str = "servicebus"
    credential: Credential | None = field(default=None, repr=False)
    use_development_emulator: bool = False

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
        self._check_sign_in(local=parts.scheme == "local")

    def _check_sign_in(self, *, local: bool) -> None:
        if not isinstance(self.use_development_emulator, bool):
            raise ConfigError("use_development_emulator must be True or False")
        if self.use_development_emulator and (local or self.connection_string):
            raise ConfigError("use_development_emulator is for an Azure host given by its url: "
                              "a local namespace has no TLS, and a connection string says "
                              "UseDevelopmentEmulator=true itself")
        if self.credential is None:
            return
        if self.connection_string:
            raise ConfigError("give a namespace a connection string or a credential, not both: "
                              "the connection string signs in with its own key or token")
        if local:
            raise ConfigError("a local namespace takes no credential")
        # Imported only here: the SDKs' credential types are needed only with a credential.
        from gateway.transports.sdk import check_credential

        check_credential(self.credential)

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
        extra = ", connection_string=***" if self.connection_string else ""
        if self.credential is not None:  # its type says how; what it holds is secret
            extra += f", credential={type(self.credential).__name__}"
        if self.use_development_emulator:
            extra += ", use_development_emulator=True"
        kind = "" if self.is_local else f", kind={self.kind!r}"
        return (f"NamespaceConfig(name={self.name!r}, url={redact(self.url)!r}{kind}"
                f"{extra})")

    __str__ = __repr__


def endpoint_key(namespace: NamespaceConfig) -> tuple[str, str]:
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
