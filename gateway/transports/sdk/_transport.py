"""The base of the Service Bus and Event Hubs transports (it imports no ``azure``).

It names the namespace, bounds each SDK call in time and maps its errors, and
closes SDK handlers.

The rest of what they share is beside this module: their options and connection
strings (``_sdk_config``), the classification of SDK errors (``_sdk_errors``) and
the conversion of SDK values (``_sdk_convert``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

import anyio

from gateway.transports.base import Transport
from gateway.transports.sdk._config import SdkOptions
from gateway.transports.sdk._errors import Outcome, build_error
from replication import ConfigError, GatewayError, OperationTimeout

__all__ = ["CLOSE_TIMEOUT", "GRACE", "PROBE_FALLBACK", "SdkTransport", "check_entity"]

logger = logging.getLogger("gateway.transports")
T = TypeVar("T")

#: Added to our own bound on an SDK call, so that the SDK's own timeout fires first.
GRACE = 1.0
#: Seconds to close one SDK handler (a dead namespace must not hang aclose).
CLOSE_TIMEOUT = 2.0
#: An entity that does not exist: a "not found" answer proves the namespace answers.
PROBE_FALLBACK = "geogateway-probe"


class _Closable(Protocol):
    async def close(self) -> None: ...


class SdkTransport(Transport):
    """What both SDK transports share: names, bounded SDK calls, error mapping, closing.

    Subclasses implement :meth:`_outcome` (their SDK's error table).
    """

    host: str
    _secrets: tuple[str, ...] = ()
    _entity_of_connection: str | None = None
    _last_entity: str | None = None

    def _name(self, *, host: str, name: str | None, secrets: tuple[str, ...],
              entity: str | None) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"name must be a non-empty str, not {name!r}")
        self.namespace = name or host
        self.host = host
        self._secrets = secrets
        self._entity_of_connection = entity
        self._last_entity = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r}, host={self.host!r})"

    @property
    def identity(self) -> str:
        """``servicebus://HOST`` or ``eventhubs://HOST`` (no credential)."""
        return f"{type(self).__name__.removesuffix('Transport').lower()}://{self.host}"

    def _outcome(self, exc: BaseException) -> Outcome:
        raise NotImplementedError()  # pragma: no cover

    def _map(self, exc: BaseException, action: str) -> GatewayError:
        return build_error(self._outcome(exc), exc, namespace=self.namespace, action=action,
                           secrets=self._secrets)

    def _probe_entity(self, options: SdkOptions) -> str:
        return (options.probe_entity or self._entity_of_connection or self._last_entity
                or PROBE_FALLBACK)

    async def _call(self, action: str, fn: Callable[[], Awaitable[T]], *, seconds: float) -> T:
        """Run one SDK call, bounded by ``seconds``, mapping its errors.

        Raises:
            OperationTimeout: no answer within ``seconds``.
            GatewayError: the SDK's error, mapped.
        """
        with anyio.move_on_after(seconds):
            try:
                return await fn()
            except GatewayError:
                raise
            except Exception as exc:
                raise self._map(exc, action) from exc
        raise OperationTimeout(
            f"{action} on namespace {self.namespace!r} got no answer within {seconds:g} s: "
            "the outcome is unknown, a retry may deliver a duplicate", namespace=self.namespace)

    async def _close(self, what: str, handler: _Closable) -> None:
        """Close an SDK handler we are dropping, within ``CLOSE_TIMEOUT``.

        Shielded from the caller's cancellation: a close that runs because the caller
        gave up (a probe at its deadline while the namespace hangs) must still run, or
        the connection the handler opened stays open, one per probe round.
        """
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + CLOSE_TIMEOUT):
            try:
                await handler.close()
            except Exception as exc:  # the handler is dropped either way; say why it failed
                logger.debug("closing %s of %s failed: %s", what, self.namespace,
                             self._map(exc, f"close {what}"))

    async def _close_all(self, handlers: Iterable[tuple[str, _Closable]]) -> None:
        """Close handlers concurrently (each within ``CLOSE_TIMEOUT``)."""
        async with anyio.create_task_group() as group:
            for what, handler in handlers:
                group.start_soon(self._close, what, handler)


def check_entity(entity: str) -> str:
    """Return ``entity`` if it can name an entity; raise ``ConfigError`` if not."""
    if not isinstance(entity, str) or not entity.strip():
        raise ConfigError(f"entity must be the name of a queue, topic or event hub, "
                          f"not {entity!r}")
    return entity
