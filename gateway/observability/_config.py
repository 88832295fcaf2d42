"""The observability hooks a configuration asks for (``[metrics]``, ``[tracing]``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.geo import GatewayConfig, GatewayHooks

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["hooks_from_config"]


def hooks_from_config(
    config: GatewayConfig, *, registry: CollectorRegistry | None = None
) -> list[GatewayHooks]:
    """The hooks ``config.observability`` turns on: a
    :class:`~gateway.observability.PrometheusMetrics` (in ``registry``, default the
    global one) for ``[metrics] enabled = true``, a
    :class:`~gateway.observability.Tracing` for ``[tracing] enabled = true``.

    Raises:
        ConfigError: one is turned on and its extra is not installed.
    """
    hooks: list[GatewayHooks] = []
    if config.observability.metrics:
        from gateway.observability._metrics import PrometheusMetrics

        hooks.append(PrometheusMetrics(registry=registry))
    if config.observability.tracing:
        from gateway.observability._tracing import Tracing

        hooks.append(Tracing())
    return hooks
