"""``geogateway emulator`` as a process: its administration API, what it creates kept
when the process is started again, and one line when the ``serve`` extra is missing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio.management import ServiceBusAdministrationClient

from gateway.emulator import EmulatorProcess
from tests.gateway.cli.cli_support import without_modules

pytestmark = pytest.mark.anyio


def admin(emu: EmulatorProcess) -> ServiceBusAdministrationClient:
    assert emu.certificate is not None
    return ServiceBusAdministrationClient.from_connection_string(
        emu.connection_string("primary"), connection_verify=emu.certificate, retry_total=0)


async def test_what_the_api_creates_survives_a_restart_of_the_process(tmp_path: Path):
    # Given a queue created through the API of an emulator process, and a message in it
    async with EmulatorProcess(["primary"], data_dir=tmp_path) as emu, admin(emu) as client:
        await client.create_queue("made", max_delivery_count=4)
        with ServiceBusClient.from_connection_string(emu.connection_string("primary")) as sb, \
                sb.get_queue_sender("made") as sender:
            sender.send_messages(ServiceBusMessage("kept"))
    # When the process is started again on the same data directory
    async with EmulatorProcess(["primary"], data_dir=tmp_path) as emu, admin(emu) as client:
        # Then the queue is there with its settings and its message
        assert (await client.get_queue("made")).max_delivery_count == 4
        props = await client.get_queue_runtime_properties("made")
        assert props.active_message_count == 1


def test_without_the_serve_extra_the_emulator_says_so_in_one_line(tmp_path: Path):
    # Given an interpreter without uvicorn
    env = {**os.environ, **without_modules(tmp_path, "uvicorn"), "PYTHONWARNINGS": "error"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "emulator", "--json", "-n", "primary=0",
         "--data-dir", str(tmp_path / "data")], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    try:
        # When it starts / Then it serves AMQP, without a certificate
        ready = json.loads(proc.stdout.readline())
        assert "certificate" not in ready
        with socket.create_connection(("127.0.0.1", ready["namespaces"]["primary"]["port"]),
                                      timeout=5) as s:
            s.sendall(b"AMQP\x00\x01\x00\x00")
            assert s.recv(8) == b"AMQP\x00\x01\x00\x00"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    # And one line says the administration API is off and how to get it
    assert proc.returncode == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "administration API" in lines[0] and "pip install 'geogateway[serve]'" in lines[0]
