"""A service behind two Azure Relay namespaces: a sender fails over when one goes down.

The service listens on the same hybrid connection in two namespaces
(GeoRelayListener); the client sends HTTP requests to its primary and, when that
namespace is unavailable, to the other, which then becomes its primary. Here both
namespaces are served by the relay emulator on loopback: no credentials needed.

Run: python examples/relay_failover.py
With Azure Relay, build the endpoints with RelayEndpoint.from_connection_string(...);
try it by hand with `geogateway relay listen` and `geogateway relay request`.
"""

import tempfile
import time

from gateway import GatewayHooks
from gateway.relay import (
    GeoRelayClient,
    GeoRelayListener,
    RelayEmulator,
    RelayRequest,
    RelayResponse,
    RelayThread,
)
from gateway.transports import LocalNamespace


async def hello(request: RelayRequest) -> RelayResponse:
    """The service: says which namespace the request came through."""
    return RelayResponse(body=f"hello from the service, via {request.namespace}".encode())


names: dict[str, str] = {}  # "host:port" -> primary / secondary


class Report(GatewayHooks):
    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        print(f"  failover: {names[from_namespace]} -> {names[to_namespace]}")


with tempfile.TemporaryDirectory() as data_dir:
    emulator = RelayEmulator({"primary": 0, "secondary": 0}, ["hello"], data_dir=data_dir)
    with RelayThread(emulator):
        primary, secondary = (emulator.endpoint(ns, "hello") for ns in ("primary", "secondary"))
        names.update({primary.namespace: "primary", secondary.namespace: "secondary"})
        with RelayThread(GeoRelayListener([primary, secondary], hello)) as listener:
            while len(listener.connected) < 2:  # its control channels open in the background
                time.sleep(0.05)
            with GeoRelayClient(primary, secondary, randomize=False, hooks=[Report()]) as client:
                print("both namespaces up:")
                print(" ", client.get("/greeting").text)

                LocalNamespace("primary", data_dir=data_dir).down()  # `geogateway namespace down`
                time.sleep(0.3)  # the emulator applies it within 0.1 s
                print("primary namespace down:")
                for _ in range(2):
                    print(" ", client.get("/greeting").text)
                print("active namespace now:", names[client.roles.active])
