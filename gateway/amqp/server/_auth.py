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
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote_plus, urlsplit

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "AuthError",
    "Grant",
    "check_token",
    "client_host",
    "entity_path",
    "resource_path",
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


@dataclass(frozen=True, kw_only=True)
class Grant:
    """What a valid token allows: entity paths under ``path`` ("" = all) until ``expires``."""

    path: str
    expires: float

    def covers(self, entity: str, now: float) -> bool:
        """Whether this grant authorizes ``entity`` (a lower-case path) at ``now``."""
        if now >= self.expires:
            return False
        return not self.path or entity == self.path or entity.startswith(self.path + "/")


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
    """Check a put-token request and return what it grants.

    Args:
        token: the token (the request's body).
        audience: the request's ``name`` application property (the resource the
            client asks for); the token's resource must be it or a prefix of it.
        key_name: the policy name the token must be signed with.
        key: the policy's key.
        now: the current time (seconds since the epoch).

    Raises:
        AuthError: malformed, signed with another key or key name, expired, or for
            another resource.
    """
    if not token.startswith(_PREFIX):
        raise AuthError("the token is not a SharedAccessSignature")
    body = token[len(_PREFIX):]
    fields = dict(parse_qsl(body, keep_blank_values=True))
    sr, sig, se, skn = (fields.get(k) for k in ("sr", "sig", "se", "skn"))
    if sr is None or sig is None or se is None or not se.isdigit():
        raise AuthError("the token lacks sr, sig or se")
    if skn != key_name:
        raise AuthError("the token is signed with an unknown key name")
    try:
        given = base64.b64decode(sig, validate=True)
    except ValueError:
        raise AuthError("the token's signature is not base64") from None
    encodings = {quote_plus(sr), _raw_fields(body).get("sr", "")}
    if not any(hmac.compare_digest(_signed(key, e, se), given) for e in encodings):
        raise AuthError("the token's signature does not match the key")
    if int(se) <= now:
        raise AuthError("the token has expired")
    grant = Grant(path=resource_path(sr), expires=float(se))
    if not grant.covers(resource_path(audience), now):
        raise AuthError("the token is for another entity than the one asked for")
    return grant
