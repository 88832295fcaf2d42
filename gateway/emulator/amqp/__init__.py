"""The AMQP 1.0 namespace emulator: the wire (codec, frames, performatives, the message
format), the server (namespaces, connections, sessions, links, the router) and the
nodes it serves (Service Bus queues, event hubs, ``$cbs`` and ``$management``)."""

from gateway.emulator.amqp._server import Emulator, EmulatorThread

__all__ = ["Emulator", "EmulatorThread"]
