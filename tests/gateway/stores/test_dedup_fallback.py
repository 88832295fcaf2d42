"""FallbackDedupStore's logic over an in-memory shared store that can be taken away
(the real PostgreSQL case is in ``tests/gateway/geo/test_store_outage.py``), and what
``open_dedup_store`` accepts."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.stores import FallbackDedupStore, SqliteDedupStore, open_dedup_store
from replication import ConfigError, InMemoryDedupStore, StoreUnavailable, Verdict
from tests.conftest import FakeClock

DELIVER, DUPLICATE = Verdict.DELIVER, Verdict.DUPLICATE


class Flaky(InMemoryDedupStore):
    """A shared store that raises StoreUnavailable while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("the shared store is away")

    def claim(self, message_ids: Sequence[str], **kw: Any) -> list[Verdict]:
        self._check()
        return super().claim(message_ids, **kw)

    def finish(self, message_id: str, **kw: Any) -> None:
        self._check()
        super().finish(message_id, **kw)

    def peek(self, message_id: str, **kw: Any) -> Verdict:
        self._check()
        return super().peek(message_id, **kw)

    def finish_with_effect(self, message_id: str, *, owner: str, now: float,
                           effect: Callable[[Any], None]) -> bool:
        self._check()
        effect(None)
        self.finish(message_id, owner=owner, succeeded=True, now=now)
        return True


def test_the_fallback_is_taken_after_a_while_and_given_back_with_its_marks(
    tmp_path: Path, clock: FakeClock
) -> None:
    # Given a shared store with a local fallback taken after 5 s of outage
    shared = Flaky()
    switches: list[tuple[bool, BaseException | None]] = []
    back = threading.Event()

    def on_switch(active: bool, error: BaseException | None) -> None:
        switches.append((active, error))
        if not active:
            back.set()

    store = FallbackDedupStore(shared, tmp_path / "local.db", after=5, probe_every=0.01,
                               on_switch=on_switch, clock=clock)
    try:
        assert store.claim(["m0"], owner="a", now=1, lease=10) == [DELIVER]
        # When the shared store goes away, Then the outage is raised for 5 s
        shared.down = True
        with pytest.raises(StoreUnavailable):
            store.claim(["m1"], owner="a", now=2, lease=10)
        clock.advance(4.9)
        with pytest.raises(StoreUnavailable):
            store.claim(["m1"], owner="a", now=2, lease=10)
        assert switches == [] and not store.falling_back
        # And after that the local window answers (and the inbox never falls back)
        clock.advance(0.2)
        assert store.claim(["m1"], owner="a", now=3, lease=10) == [DELIVER]
        assert store.falling_back and [a for a, _ in switches] == [True]
        assert isinstance(switches[0][1], StoreUnavailable)
        store.finish("m1", owner="a", succeeded=True, now=4)
        assert store.peek("m1", now=5) is DUPLICATE
        with pytest.raises(StoreUnavailable):
            store.finish_with_effect("m2", owner="a", now=5, effect=lambda c: None)
        # When the shared store is back, Then the probe gives it the local marks
        shared.down = False
        assert back.wait(10)
        assert not store.falling_back
        assert shared.peek("m1", now=5) is DUPLICATE
        assert [a for a, _ in switches] == [True, False]
    finally:
        store.close()
    assert shared.closed


def test_open_dedup_store_takes_paths_and_stores_and_refuses_the_rest(tmp_path: Path) -> None:
    sqlite = open_dedup_store(tmp_path / "d.db")
    assert isinstance(sqlite, SqliteDedupStore)
    sqlite.close()
    memory = InMemoryDedupStore()
    assert open_dedup_store(memory) is memory
    wrapped = open_dedup_store(Flaky(), fallback=tmp_path / "local.db")
    assert isinstance(wrapped, FallbackDedupStore)
    wrapped.close()
    with pytest.raises(ConfigError, match="local SQLite file"):
        open_dedup_store(tmp_path / "d.db", fallback=tmp_path / "local.db")
    with pytest.raises(ConfigError, match="local SQLite file"):
        open_dedup_store(Flaky(), fallback="postgresql://u@h/db")
    with pytest.raises(ConfigError, match="dedup_store must be"):
        open_dedup_store(3.5)
