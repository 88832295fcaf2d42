"""The AMQP 1.0 namespace emulator, in layers that import only the layers below them.

- The wire, in :mod:`gateway.amqp` (typed values, the codec, performatives and the
  composites they carry, frames and the message format), imported from its face.
- Links, sessions, connections, ``$cbs`` and the ``$management`` dispatch: the shared
  AMQP front, :mod:`gateway.amqp.server`, which the proxy builds on too. The nodes
  here see the namespace through the protocol of ``_interfaces``.
- The nodes a link attaches to: Service Bus queues, topics and their subscriptions,
  event hubs, ``$cbs`` and ``$management``; what a declared entity is made of
  (``_declare``) and what subscription rules read of a message (``_topics``).
- The router, which binds each new link to its node; the namespace, a listening
  socket over one local namespace's file; the server, several namespaces at once.
"""

from gateway.emulator.amqp._server import Emulator, EmulatorThread

__all__ = ["Emulator", "EmulatorThread"]
