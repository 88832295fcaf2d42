"""Azurite (the Azure Storage emulator) for the test session, and a fresh container
per test.

Azurite is installed from npm into ``.azurite/`` by the README's test command; it is
started here on a free port of 127.0.0.1 and stopped at the end of the session. The
fixtures are made available to every test by ``tests/conftest.py``.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient

ROOT = Path(__file__).resolve().parents[1]
AZURITE = ROOT / ".azurite" / "node_modules" / ".bin" / "azurite-blob"

# Azurite's well-known development account; the key is public (Azure docs).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="



def connection_string(port: int, key: str = KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def azurite_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of an Azurite blob service running for this test session."""
    if not AZURITE.exists():
        pytest.fail(
            f"Azurite is not installed ({AZURITE} is missing): run the test command of "
            "README.md (## Running the tests), which installs it from npm into .azurite/",
            pytrace=False,
        )
    port = _free_port()
    location = tmp_path_factory.mktemp("azurite")
    process = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(location), "--silent", "--skipApiVersionCheck", "--loose"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers(port):
            if process.poll() is not None:
                stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
                pytest.fail(f"Azurite exited with {process.returncode}: {stderr}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail("Azurite did not answer within 30 s", pytrace=False)
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


@pytest.fixture(scope="session")
def azurite(azurite_port: int) -> str:
    """The connection string of the session's Azurite."""
    return connection_string(azurite_port)


@pytest.fixture
def container(azurite: str) -> Iterator[str]:
    """A fresh, empty container for one test; deleted afterwards."""
    name = f"checkpoints-{uuid.uuid4().hex[:12]}"
    with BlobServiceClient.from_connection_string(azurite) as service:
        service.create_container(name)
        yield name
        service.delete_container(name)
