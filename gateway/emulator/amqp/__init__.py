"""The AMQP 1.0 namespace emulator, in layers that import only the layers below them.

- The wire, in :mod:`gateway.amqp` (typed values, the codec, performatives and the
  composites they carry, frames and the message format), imported from its face.
- Links, sessions and connections. They see what is above them only through the
  protocols of ``_interfaces`` (and ``LinkSession`` in ``_links``,
  ``SessionConnection`` in ``_session``).
- The nodes a link attaches to: Service Bus queues, topics and their subscriptions,
  event hubs, ``$cbs`` and ``$management``; what a declared entity is made of
  (``_declare``) and what subscription rules read of a message (``_topics``).
- The router, which binds each new link to its node; the namespace, a listening
  socket over one local namespace's file; the server, several namespaces at once.
"""

from gateway.emulator.amqp._server import Emulator, EmulatorThread

__all__ = ["Emulator", "EmulatorThread"]
