"""Every program in ``examples/`` runs with no credentials, exits 0 and says what it did."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: A phrase each example prints when it did what it says.
EXPECTED = {
    "active_sender_with_queue.py": "replayed after the outage: 1",
    "azure_sdk_on_the_emulator.py": "received: ['order-1', 'order-2']",
    "dedup_receiver.py": "'event 4']",
    "outbox_orders.py": "received: ['order-1', 'order-2']",
    "passive_sender.py": "active namespace now: secondary",
    "relay_failover.py": "failover: primary -> secondary",
    "replay_after_outage.py": "waiting on disk: 0",
    "topic_subscriptions.py": "big: ['order-1!', 'order-3!']",
}


def test_every_example_is_checked() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GEOGATEWAY_DATA_DIR": str(tmp_path / "data"),
        "GEOGATEWAY_STATE_DIR": str(tmp_path / "state"),
        "PYTHONWARNINGS": "error",
    }
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True,
        timeout=60, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert EXPECTED[name] in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr
    # The examples keep their files in their own temporary directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == []
