"""ServiceThread and AsyncService: the life cycle shared by the emulators and the listener."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway._support.service_thread import AsyncService, ServiceThread
from gateway.emulator import EmulatorThread
from gateway.errors import ConfigError
from gateway.relay import RelayThread


class Recorder(AsyncService):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.events: list[str] = []
        self.thread: str | None = None

    async def start(self) -> None:
        self.thread = threading.current_thread().name
        if self.fail:
            raise ConfigError("port in use")
        self.events.append("start")

    async def aclose(self) -> None:
        self.events.append("aclose")

    async def ping(self) -> str:
        return "pong"


def test_async_with_starts_and_closes() -> None:
    async def main() -> list[str]:
        async with Recorder() as service:
            assert service.events == ["start"]
        return service.events

    assert asyncio.run(main()) == ["start", "aclose"]


def test_the_thread_runs_the_service_until_stopped() -> None:
    thread = ServiceThread(Recorder())
    with thread as service:
        assert service.events == ["start"]
        assert service.thread == "geogateway-service"
        assert thread.call(service.ping(), timeout=5) == "pong"
    assert service.events == ["start", "aclose"]
    thread.stop()  # twice is fine
    assert service.events == ["start", "aclose"]


def test_start_raises_what_the_service_raised() -> None:
    service = Recorder(fail=True)
    with pytest.raises(ConfigError, match="port in use"):
        ServiceThread(service).start()
    assert service.events == []


def test_call_before_start_says_what_to_do() -> None:
    service = Recorder()
    coro = service.ping()
    with pytest.raises(RuntimeError, match="RelayThread is not started: call start"):
        RelayThread(service).call(coro)
    coro.close()


@pytest.mark.parametrize(("cls", "name"), [(EmulatorThread, "geogateway-emulator"),
                                           (RelayThread, "geogateway-relay")])
def test_each_thread_keeps_its_name(cls: type[ServiceThread[Recorder]], name: str) -> None:
    with cls(Recorder()) as service:
        assert service.thread == name
