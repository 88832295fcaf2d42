"""The proxy: one local AMQP endpoint with the geo configuration's namespaces behind it."""

from __future__ import annotations

import ipaddress
import secrets
import ssl
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gateway._support.service_thread import AsyncService, ServiceThread
from gateway.amqp.server import DEFAULT_KEY_NAME, Policy, client_host, pick_policy, with_default
from gateway.proxy._backend import GeoBackend
from gateway.proxy._namespace import ProxyNamespace
from gateway.proxy._router import ProxyRouter
from replication import ConfigError

if TYPE_CHECKING:
    from gateway.geo import GatewayConfig, GatewayHooks

__all__ = ["Proxy", "ProxyThread", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Proxy(AsyncService):
    """Serves AMQP 1.0 on a local port with the namespaces of a geo configuration behind it.

    Any Service Bus SDK, in any language, connects with :meth:`connection_string` and
    gets the gateway's behaviour: sends go through the geo sender (failover, hedging,
    the durable queue), receives through geo receivers (de-duplicated by MessageId,
    settled in the namespace of the copy delivered). Clients sign their tokens with
    the proxy's own keys (its shared access policies: the default one with every right,
    and any more with Listen, Send or Manage rights, on the whole proxy or one entity, as
    an emulated namespace has); the namespaces' credentials never reach them. With
    ``tls_cert`` and ``tls_key`` it serves AMQP over TLS (amqps) and may listen on any
    address; without, it listens on loopback unless ``insecure`` is set.

    Args:
        config: the geo configuration (its ``entity`` is unused: each link names one).
        host: the address to listen on (a loopback address unless ``insecure``).
        port: the port (0: a free one, see :attr:`port`).
        key_name: the default shared access policy clients sign with (every right).
        key: its key (default: a random one, made for this proxy).
        policies: more shared access policies (:class:`~gateway.amqp.server.Policy`, e.g.
            from :func:`~gateway.amqp.server.parse_policy`): a sender link needs a token
            whose policy has Send, a receiver link one with Listen.
        insecure: allow a non-loopback ``host`` without TLS (plain AMQP).
        tls_cert: a PEM certificate (chain) file: serve AMQP over TLS.
        tls_key: the PEM private key file of ``tls_cert``.
        recovery: run the geo senders' background probe/replay/failback task.
        hooks: given to every geo sender and receiver (metrics, tracing...).
        session_gap_timeout: seconds a session link waits for a missing position of its
            session (its message in a namespace that is down, or a sender's durable
            queue) before it goes on without it.

    Raises:
        ConfigError: a non-loopback ``host`` without TLS or ``insecure``, an empty key,
            two policies of one name on the same scope, only one of ``tls_cert`` and
            ``tls_key``, or a certificate or key that cannot be read or does not match.
    """

    def __init__(self, config: GatewayConfig, *, host: str = "127.0.0.1", port: int = 0,
                 key_name: str = DEFAULT_KEY_NAME, key: str | None = None,
                 policies: Iterable[Policy] = (), insecure: bool = False,
                 recovery: bool = True, hooks: Sequence[GatewayHooks] = (),
                 tls_cert: str | Path | None = None, tls_key: str | Path | None = None,
                 session_gap_timeout: float = 30.0) -> None:
        self._tls = _tls_context(tls_cert, tls_key)
        if self._tls is None and not insecure and not is_loopback(host):
            raise ConfigError(f"the proxy listens on loopback only without TLS ({host!r} is "
                              "not loopback): pass --tls-cert and --tls-key, or --insecure to "
                              "serve plain AMQP on it")
        key = secrets.token_urlsafe(32) if key is None else key
        if not key or not key_name:
            raise ConfigError("the proxy's key and key name must not be empty")
        chosen = with_default(Policy(name=key_name, key=key), policies)
        self.backend = GeoBackend(config, recovery=recovery, hooks=hooks,
                                  session_gap_timeout=session_gap_timeout)
        self._namespace = ProxyNamespace("proxy", host=host, port=port, policies=chosen)

    @property
    def host(self) -> str:
        return self._namespace.host

    @property
    def port(self) -> int:
        """The port listened on (the one chosen when 0 was asked, once started)."""
        return self._namespace.port

    async def start(self) -> None:
        """Listen.

        Raises:
            ConfigError: the address cannot be listened on.
        """
        await self._namespace.listen(ProxyRouter(self._namespace, self.backend), tls=self._tls)

    async def stop(self) -> None:
        """Stop gracefully: accept no new connection, finish the sends and settlements
        under way (each is answered), then close."""
        await self._namespace.stop_listening()
        await self.backend.drain()
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection, sender and receiver. Safe to call twice."""
        await self._namespace.aclose()
        await self.backend.aclose()

    def connection_string(self, *, redact_key: bool = False, policy: str | None = None) -> str:
        """The connection string clients use (``UseDevelopmentEmulator=true``: plain AMQP,
        unless the proxy serves TLS: then the client verifies its certificate).

        Args:
            redact_key: write ``SharedAccessKey=***`` (for a log line).
            policy: the name of the shared access policy to use (default: the default
                one, every right); an entity-level one adds its ``EntityPath``.

        Raises:
            ConfigError: no such policy, or two entity-level policies of that name.
        """
        ns = self._namespace
        chosen = pick_policy(ns.policies, policy)
        key = "***" if redact_key else chosen.key
        entity = f"EntityPath={chosen.entity};" if chosen.entity else ""
        return (f"Endpoint=sb://{client_host(ns.host)}:{ns.port};"
                f"SharedAccessKeyName={chosen.name};SharedAccessKey={key};{entity}"
                + ("" if self._tls is not None else "UseDevelopmentEmulator=true"))

    @property
    def tls(self) -> bool:
        """Whether the proxy serves AMQP over TLS."""
        return self._tls is not None


def _tls_context(cert: str | Path | None, key: str | Path | None) -> ssl.SSLContext | None:
    """The server TLS context of ``cert`` and ``key`` (None when neither is given)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ConfigError("TLS needs both a certificate and its key (--tls-cert and --tls-key)")
    for what, path in (("certificate", cert), ("key", key)):
        try:
            Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the TLS {what} {str(path)!r}: "
                              f"{exc.strerror or exc}") from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load the TLS certificate {str(cert)!r} with key "
                          f"{str(key)!r}: {getattr(exc, 'reason', None) or exc}") from None
    return context


class ProxyThread(ServiceThread[Proxy]):
    """Runs a :class:`Proxy` on its own event loop in a background thread."""

    thread_name = "geogateway-proxy"

    @property
    def proxy(self) -> Proxy:
        return self.service
