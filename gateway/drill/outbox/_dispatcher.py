"""A dispatcher process of the outbox drill, with slow acknowledgements.

Run as ``python -m gateway.drill.outbox._dispatcher --namespaces DIR --store
sqlite|postgres ...`` with the outbox in ``$GEOGATEWAY_OUTBOX`` (and the schema in
``$GEOGATEWAY_DRILL_SCHEMA``). It is what ``geogateway outbox run`` runs (an
:class:`~gateway.aio.AsyncOutboxDispatcher` over one ``AsyncGeoSender`` per
destination), except that each send returns ``--ack-delay`` seconds (at random, up
to) after the namespaces took the batch: the acknowledgement of a slow network. A
SIGKILL then often lands between a batch's send and the delete of its rows, the case
the outbox must survive by sending those rows again (the receiver removes the copies).
SIGTERM stops it gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
from collections.abc import Sequence
from pathlib import Path

from gateway._support.signals import stop_on_signals
from gateway.geo import AsyncGeoSender, AsyncOutboxDispatcher, SendResult
from gateway.stores import Outbox, PostgresOutbox, SqliteOutbox
from replication import Message

__all__ = ["main"]


class _SlowAck:
    """An ``AsyncGeoSender`` whose sends return a little after the namespaces took them."""

    def __init__(self, sender: AsyncGeoSender, delay: float) -> None:
        self._sender, self._delay = sender, delay

    @property
    def entity(self) -> str:
        return self._sender.entity

    async def send_batch(self, messages: Sequence[Message]) -> SendResult:
        result = await self._sender.send_batch(messages)
        await asyncio.sleep(random.uniform(0, self._delay))
        return result

    async def aclose(self) -> None:
        await self._sender.aclose()


async def run_dispatcher(args: argparse.Namespace) -> None:
    target = os.environ["GEOGATEWAY_OUTBOX"]
    outbox: Outbox = (SqliteOutbox(target, lease=args.lease) if args.store == "sqlite" else
                      PostgresOutbox(target, schema=os.environ["GEOGATEWAY_DRILL_SCHEMA"],
                                     lease=args.lease))

    async def sender(entity: str) -> _SlowAck:
        made = AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity=entity, mode=args.mode, data_dir=args.namespaces,
                              state_dir=args.namespaces.parent / "state")
        await made.start()
        return _SlowAck(made, args.ack_delay)

    stop = stop_on_signals()
    print("ready", flush=True)
    try:
        async with AsyncOutboxDispatcher(outbox, sender, batch_size=args.batch,
                                         concurrency=2) as dispatcher:
            await dispatcher.run(stop=stop)
    finally:
        outbox.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.drill.outbox._dispatcher")
    parser.add_argument("--namespaces", type=Path, required=True)
    parser.add_argument("--store", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--mode", choices=("passive", "active"), default="passive")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--ack-delay", type=float, default=0.02)
    asyncio.run(run_dispatcher(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
