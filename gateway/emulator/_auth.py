"""Shared access signatures: checking the tokens the SDKs put on ``$cbs``.

A token is ``SharedAccessSignature sr=<audience>&sig=<signature>&se=<expiry>&skn=<key
name>`` (url-encoded), where the signature is base64(HMAC-SHA256(key, quote_plus(sr) +
"\\n" + se)), as the Azure SDKs compute it. A valid token grants its audience (a URL
whose path names an entity, or the namespace root) until it expires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote_plus, urlsplit

__all__ = ["DEFAULT_KEY", "DEFAULT_KEY_NAME", "AuthError", "Grant", "check_token", "entity_path"]

#: The key name of the emulator's one shared access policy.
DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
#: The emulator's well-known development key (public, like the official emulators'
#: ``SAS_KEY_VALUE``): it protects nothing and is printed in connection strings.
DEFAULT_KEY = "Z2VvZ2F0ZXdheS1lbXVsYXRvci1kZXZlbG9wbWVudC1rZXk="

_PREFIX = "SharedAccessSignature "


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
    """The lower-case entity path of a link address or audience (scheme and host removed)."""
    if "://" in address:
        address = urlsplit(address).path
    return address.strip("/").lower()


def check_token(token: str, *, audience: str, key_name: str, key: str, now: float) -> Grant:
    """Check a put-token request and return what it grants.

    Args:
        token: the token (the request's body).
        audience: the request's ``name`` application property.
        key_name: the policy name the token must be signed with.
        key: the policy's key.
        now: the current time (seconds since the epoch).

    Raises:
        AuthError: malformed, signed with another key or key name, expired, or for
            another audience.
    """
    if not token.startswith(_PREFIX):
        raise AuthError("the token is not a SharedAccessSignature")
    fields = dict(parse_qsl(token[len(_PREFIX):], keep_blank_values=True))
    sr, sig, se, skn = (fields.get(k) for k in ("sr", "sig", "se", "skn"))
    if sr is None or sig is None or se is None or not se.isdigit():
        raise AuthError("the token lacks sr, sig or se")
    if skn != key_name:
        raise AuthError("the token is signed with an unknown key name")
    expected = hmac.new(key.encode("utf-8"), f"{quote_plus(sr)}\n{se}".encode(),
                        hashlib.sha256).digest()
    try:
        given = base64.b64decode(sig, validate=True)
    except ValueError:
        raise AuthError("the token's signature is not base64") from None
    if not hmac.compare_digest(expected, given):
        raise AuthError("the token's signature does not match the key")
    if int(se) <= now:
        raise AuthError("the token has expired")
    if entity_path(sr) != entity_path(audience):
        raise AuthError("the token is for another audience")
    return Grant(path=entity_path(sr), expires=float(se))
