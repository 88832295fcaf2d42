"""A local namespace whose file cannot be opened is unusable (not the message): a
passive sender fails over to the other one and says once, at ERROR, what to check."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anyio
import pytest

from gateway.aio import AsyncGeoSender
from gateway.transports import FaultyTransport, LocalTransport
from replication import Message, NamespaceMisconfigured
from tests.gateway.conftest import SenderFactory

pytestmark = pytest.mark.anyio


async def test_a_local_namespace_whose_file_cannot_be_opened_is_failed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a primary whose namespace file cannot be opened (a directory is in its way)
    data = tmp_path / "data"
    (data / "primary.db").mkdir(parents=True)
    caplog.set_level(logging.INFO, logger="geogateway")
    async with LocalTransport("primary", data_dir=data) as primary:
        with pytest.raises(NamespaceMisconfigured, match="check the data directory"):
            await primary.send("orders", [Message("x")])
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity="orders", data_dir=data,
                              state_dir=tmp_path / "state") as sender:
        # When a passive sender sends twice
        with anyio.fail_after(5):
            first = await sender.send(Message("a", message_id="m1"))
            second = await sender.send(Message("b", message_id="m2"))
    # Then the secondary took both, the first failing over, and one ERROR said so
    assert first.namespaces == ("secondary",) and first.failed_over
    assert second.namespaces == ("secondary",)
    errors = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.ERROR and r.name == "geogateway"]
    assert len(errors) == 1 and "primary" in errors[0], errors


async def test_every_send_that_went_elsewhere_than_the_active_namespace_failed_over(
    make_sender: SenderFactory, primary: FaultyTransport
) -> None:
    # Given a passive sender whose active primary is down
    sender = make_sender()
    primary.go_down()
    # When two sends run at once (one of them swaps the roles)
    with anyio.fail_after(5):
        results = await asyncio.gather(*(sender.send(Message(b, message_id=b))
                                         for b in ("a", "b")))
    # Then both went to the secondary, and both say they failed over
    assert [r.namespaces for r in results] == [("secondary",), ("secondary",)]
    assert [r.failed_over for r in results] == [True, True]
