"""The proxy: any SDK, in any language, geo-redundant through one local AMQP endpoint.

Built on the shared AMQP front (:mod:`gateway.amqp.server`: connections, sessions,
links, ``$cbs``); its nodes hand messages to the geo sender and receivers:

- ``_backend``: the geo sender of each entity and a geo receiver per receiver link,
  made from one :class:`~gateway.geo.GatewayConfig`;
- ``_send`` and ``_receive``: the nodes of sender and receiver links; ``_outcomes``:
  the AMQP error a client gets for what the gateway raised;
- ``_router``: which node a link attaches to; ``_namespace``: the listening socket;
  ``_proxy``: :class:`Proxy`, what the ``geogateway proxy`` command runs.
"""

from gateway.proxy._proxy import Proxy, ProxyThread, is_loopback

__all__ = ["Proxy", "ProxyThread", "is_loopback"]
