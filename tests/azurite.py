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
import urllib.error
import urllib.request
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


def _is_azurite(port: int) -> bool:
    """Whether what answers on ``port`` is Azurite (its ``Server`` header says so)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            server = str(response.headers.get("Server", ""))
    except urllib.error.HTTPError as error:  # Azurite answers this path with an error
        server = str(error.headers.get("Server", ""))
    except OSError:
        return False
    return server.startswith("Azurite")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stderr:
        process.stderr.close()


def _start(location: Path) -> tuple[subprocess.Popen[bytes], int] | None:
    """Start Azurite on a free port; ``None`` when another program took the port first
    (the port is free when picked, and Azurite binds it a second or so later)."""
    port = _free_port()
    process = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(location), "--silent", "--skipApiVersionCheck", "--loose"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not _answers(port) or process.poll() is not None:
        if process.poll() is not None:
            stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
            _stop(process)
            if "EADDRINUSE" in stderr:
                return None
            pytest.fail(f"Azurite exited with {process.returncode}: {stderr}", pytrace=False)
        if time.monotonic() > deadline:
            _stop(process)
            pytest.fail("Azurite did not answer within 30 s", pytrace=False)
        time.sleep(0.05)
    if not _is_azurite(port):  # another program listens there, and Azurite will exit
        _stop(process)
        return None
    return process, port


@pytest.fixture(scope="session")
def azurite_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of an Azurite blob service running for this test session."""
    if not AZURITE.exists():
        pytest.fail(
            f"Azurite is not installed ({AZURITE} is missing): run the test command of "
            "README.md (## Running the tests), which installs it from npm into .azurite/",
            pytrace=False,
        )
    location = tmp_path_factory.mktemp("azurite")
    for _ in range(5):
        started = _start(location)
        if started is not None:
            break
    else:
        pytest.fail("Azurite found its port taken by another program 5 times", pytrace=False)
    process, port = started
    try:
        yield port
    finally:
        _stop(process)


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
