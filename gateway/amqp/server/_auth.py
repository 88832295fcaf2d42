"""Shared access signatures: checking the tokens the SDKs put on ``$cbs``.

A token is ``SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key
name>`` (url-encoded), where the signature is base64(HMAC-SHA256(key, encoded sr + "\\n" +
se)), as the Azure SDKs compute it (``quote_plus``; other encoders, such as .NET's
lower-case escapes, are accepted too: the sr is checked as it was encoded in the token).

A valid token grants its resource until it expires, and as on Azure the check is a
prefix match on the resource URI: a token for the namespace (``sb://host/``, with or
without the trailing slash, with any scheme, or ``host`` alone) grants every entity; a
token for ``sb://host/orders`` grants ``orders`` and what lies under it
(``orders/$deadletterqueue``), never ``orders2``. Hosts are not compared: the emulator
answers on whatever address the client used.

A namespace has shared access policies (:class:`Policy`), each a name, a key and rights
(``Listen``, ``Send``, ``Manage``; Manage implies the other two), for the whole
namespace or for one entity. A token's ``skn`` names the policy whose key signs it; an
entity-level policy's tokens cover its entity only. The rights travel in the
:class:`Grant` and are checked when a link attaches (``Send`` to send, ``Listen`` to
receive), never per message.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote_plus, urlsplit

from replication import ConfigError

__all__ = [
    "ALL_RIGHTS",
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "AuthError",
    "Grant",
    "Policy",
    "Right",
    "authorize",
    "check_token",
    "client_host",
    "entity_path",
    "parse_policy",
    "parse_rights",
    "pick_policy",
    "resource_path",
    "with_default",
]

#: The key name of the emulator's one shared access policy.
DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
#: The emulator's default key: the official Service Bus and Event Hubs emulators'
#: well-known ``SAS_KEY_VALUE``, so that their connection string works unchanged. It is
#: public, protects nothing and is printed in connection strings.
DEFAULT_KEY = "SAS_KEY_VALUE"

_PREFIX = "SharedAccessSignature "


def client_host(host: str) -> str:
    """The host a client on this machine writes in its connection string to reach an
    emulator listening on ``host``: loopback for the wildcard addresses, an IPv6
    address in brackets."""
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"[{host}]" if ":" in host else host


class AuthError(ValueError):
    """A token was refused; the message never contains the token or the key."""


class Right(enum.Enum):
    """A right of a shared access policy (a claim of its tokens)."""

    LISTEN = "Listen"
    SEND = "Send"
    MANAGE = "Manage"


#: Every right: the emulator's default policy's (``RootManageSharedAccessKey``).
ALL_RIGHTS = frozenset(Right)


def _under(path: str, scope: str) -> bool:
    # Whether the lower-case entity path ``path`` is ``scope`` or lies under it.
    return not scope or path == scope or path.startswith(scope + "/")


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A shared access policy: a key name, its key and its rights.

    ``entity``: the entity path of an entity-level policy (its tokens cover that entity
    only); None for a namespace-level one. Manage implies Listen and Send. The key is
    never in the repr.

    Raises:
        ConfigError: an empty name or key, a name with ``/``, ``=`` or ``:``, or no right.
    """

    name: str
    key: str = field(repr=False)
    rights: frozenset[Right] = ALL_RIGHTS
    entity: str | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/=:"):
            raise ConfigError(f"bad policy name {self.name!r}: empty, or with '/', '=' or ':'")
        if not self.key:
            raise ConfigError(f"policy {self.name!r} has an empty key")
        if not self.rights:
            raise ConfigError(f"policy {self.name!r} has no right (Listen, Send, Manage)")
        rights = frozenset(self.rights)
        object.__setattr__(self, "rights", ALL_RIGHTS if Right.MANAGE in rights else rights)
        if self.entity is not None:
            object.__setattr__(self, "entity", self.entity.strip("/").lower() or None)

    @property
    def scope(self) -> str:
        """The lower-case entity path its tokens may cover ("" = the whole namespace)."""
        return self.entity or ""


def with_default(default: Policy, more: Iterable[Policy]) -> tuple[Policy, ...]:
    """A namespace's policies: ``default`` (every right) first, then ``more``.

    Raises:
        ConfigError: two policies of one name on the same scope.
    """
    found = (default, *more)
    scopes = [(p.name, p.scope) for p in found]
    if len(scopes) != len(set(scopes)):
        raise ConfigError(f"two policies of one name on one scope: {sorted(scopes)}")
    return found


def pick_policy(policies: Sequence[Policy], name: str | None) -> Policy:
    """The policy a connection string is made with: the first (the default) when ``name``
    is None, else the namespace-level one of that name, else the one entity-level one.

    Raises:
        ConfigError: no such policy, or two entity-level policies of that name.
    """
    if name is None:
        return policies[0]
    named = [p for p in policies if p.name == name]
    found = [p for p in named if p.entity is None] or named
    if len(found) != 1:
        raise ConfigError(f"no single policy {name!r}: there are "
                          f"{sorted({p.name for p in policies})}")
    return found[0]


def parse_policy(spec: str) -> Policy:
    """``[ENTITY/]NAME=KEY:RIGHT[,RIGHT...]`` → a :class:`Policy`.

    Rights are ``Listen``, ``Send`` and ``Manage`` (any case). The key may hold ``=``
    (base64 padding); an ``ENTITY/`` prefix makes an entity-level policy.

    Raises:
        ConfigError: not in that form, or an unknown right.
    """
    head, sep, rest = spec.partition("=")
    key, colon, rights = rest.rpartition(":")
    if not sep or not colon or not key or not head:
        # Only what comes before "=" is quoted: the rest may be a key.
        raise ConfigError(f"bad policy {head if sep else '...'!r}: expected "
                          "[ENTITY/]NAME=KEY:RIGHT[,RIGHT...], e.g. listener=KEY:Listen")
    entity, _, name = head.rpartition("/")
    return Policy(name=name, key=key, rights=parse_rights(rights.split(","), name),
                  entity=entity or None)


def parse_rights(names: Iterable[object], policy: str) -> frozenset[Right]:
    """Rights by name (``Listen``, ``Send``, ``Manage``, any case).

    Raises:
        ConfigError: an unknown right.
    """
    by_name = {r.value.lower(): r for r in Right}
    found = set()
    for name in names:
        right = by_name.get(str(name).strip().lower())
        if right is None:
            raise ConfigError(f"policy {policy!r}: unknown right {name!r}; "
                              "known: Listen, Send, Manage")
        found.add(right)
    return frozenset(found)


@dataclass(frozen=True, kw_only=True)
class Grant:
    """What a valid token allows: entity paths under ``path`` ("" = all) until ``expires``,
    with its policy's ``rights``."""

    path: str
    expires: float
    rights: frozenset[Right] = ALL_RIGHTS

    def covers(self, entity: str, now: float) -> bool:
        """Whether this grant authorizes ``entity`` (a lower-case path) at ``now``."""
        return now < self.expires and _under(entity, self.path)

    def allows(self, entity: str, right: Right, now: float) -> bool:
        """Whether this grant covers ``entity`` at ``now`` with ``right``."""
        return right in self.rights and self.covers(entity, now)


def entity_path(address: str) -> str:
    """The lower-case entity path of a link address (scheme and host removed)."""
    if "://" in address:
        address = urlsplit(address).path
    return address.strip("/").lower()


def resource_path(uri: str) -> str:
    """The lower-case entity path of a token's resource URI or a put-token audience.

    ``sb://host/orders``, ``amqps://host:5671/Orders/`` and ``host/orders`` all give
    ``orders``; the namespace itself (``sb://host/``, ``host``) gives "".
    """
    if "://" in uri:
        return urlsplit(uri).path.strip("/").lower()
    _, _, path = uri.strip("/").partition("/")  # no scheme: the first segment is the host
    return path.strip("/").lower()


def _raw_fields(body: str) -> dict[str, str]:
    # The fields as they are encoded in the token: the signature covers the encoded sr.
    return dict(part.partition("=")[::2] for part in body.split("&"))


def _signed(key: str, encoded_sr: str, se: str) -> bytes:
    return hmac.new(key.encode("utf-8"), f"{encoded_sr}\n{se}".encode(), hashlib.sha256).digest()


def check_token(token: str, *, audience: str, key_name: str, key: str, now: float) -> Grant:
    """Check a put-token request against one policy with every right (see :func:`authorize`).

    Raises:
        AuthError: as :func:`authorize`.
    """
    return authorize(token, audience=audience, policies=[Policy(name=key_name, key=key)],
                     now=now)


def authorize(token: str, *, audience: str, policies: Iterable[Policy], now: float) -> Grant:
    """Check a put-token request and return what it grants.

    Args:
        token: the token (the request's body).
        audience: the request's ``name`` application property (the resource the
            client asks for); the token's resource must be it or a prefix of it, and
            an entity-level policy's entity must be too.
        policies: the namespace's shared access policies; the token's ``skn`` names one.
        now: the current time (seconds since the epoch).

    Raises:
        AuthError: malformed, signed with an unknown key name or another key, expired,
            or for another resource than the policy or the token covers.
    """
    if not token.startswith(_PREFIX):
        raise AuthError("the token is not a SharedAccessSignature")
    body = token[len(_PREFIX):]
    fields = dict(parse_qsl(body, keep_blank_values=True))
    sr, sig, se, skn = (fields.get(k) for k in ("sr", "sig", "se", "skn"))
    if sr is None or sig is None or se is None or not se.isdigit():
        raise AuthError("the token lacks sr, sig or se")
    named = [p for p in policies if p.name == skn]
    if not named:
        raise AuthError("the token is signed with an unknown key name")
    try:
        given = base64.b64decode(sig, validate=True)
    except ValueError:
        raise AuthError("the token's signature is not base64") from None
    encodings = {quote_plus(sr), _raw_fields(body).get("sr", "")}
    signed = [p for p in named
              if any(hmac.compare_digest(_signed(p.key, e, se), given) for e in encodings)]
    if not signed:
        raise AuthError("the token's signature does not match the key")
    if int(se) <= now:
        raise AuthError("the token has expired")
    resource, asked = resource_path(sr), resource_path(audience)
    for policy in signed:
        # The narrower of the token's resource and the policy's entity is granted.
        path = resource if _under(resource, policy.scope) else policy.scope
        if _under(path, resource) and _under(asked, path):
            return Grant(path=path, expires=float(se), rights=policy.rights)
    raise AuthError("the token is for another entity than the one asked for")
