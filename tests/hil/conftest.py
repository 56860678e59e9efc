"""Fixtures of the device server tests: a small program, servers that every test shuts
down, a raw wire client for the protocol's failure cases, an fsim whose runs can be
held at a gate and that records how many run at once, a memory session, and
``tensorfab`` subcommands run as processes."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tensorfab.compiler.tensor.operators import conv2d
from tensorfab.hil.errors import ConnectionClosed
from tensorfab.hil.server import DeviceServer
from tensorfab.hil.wire import HEADER, PROTOCOL_VERSION, encode_message, recv_message
from tensorfab.isa import HwConfig, Program, get_config
from tensorfab.isa.device import DeviceMemory, RunResult
from tensorfab.isa.placement import place_program, placement_alignment
from tensorfab.sim import FunctionalSimulator

#: The size limit of the test servers' frames.
TEST_MAX_MESSAGE = 1 << 20
#: Seconds the test servers give a new connection for its HELLO.
TEST_HELLO_TIMEOUT = 1.0


def conv_program(seed: int = 1, config: str = "tiny") -> Program:
    """A 3x3 convolution with its data in the program's segments."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 8, (1, 8, 6, 6), dtype=np.int8)
    w = rng.integers(-8, 8, (8, 8, 3, 3), dtype=np.int8)
    return conv2d(get_config(config), x, w, padding=1).program


def scattered(program: Program, start: int = 1 << 12) -> dict[str, int]:
    """Addresses of ``program``'s regions, in reverse order from ``start``, with gaps."""
    lay = program.layout()
    a = placement_alignment(program)
    addresses, pos = {}, start
    for name in reversed([n for n in lay if n != "end"]):
        addresses[name] = pos
        pos += -(-lay[name].nbytes // a) * a + 2 * a
    return addresses


def memory_session(device, program: Program) -> tuple[list[np.ndarray], list]:
    """Place ``program``'s image once, then run it twice with new inputs written in
    between; the outputs and results of each run."""
    placed = place_program(program, scattered(program))
    image = placed.dram_image()
    lay = placed.layout()
    out = lay["out"]
    got, results = [], []
    with device.open_memory(program.config, placed.dram_size) as mem:
        mem.write(0, image)  # program, micro-ops and weights: once
        for seed in (5, 6):
            x = conv_program(seed).segment("inp").data
            mem.write(lay["inp"].offset, x)
            results.append(mem.run(placed))
            got.append(mem.read(out.offset, out.nbytes))
        assert mem.host_bytes_written == image.size + 2 * lay["inp"].nbytes
    return got, results


@pytest.fixture(scope="session")
def program() -> Program:
    return conv_program()


class GatedFsim(FunctionalSimulator):
    """fsim whose runs wait for :attr:`gate` and which counts runs in progress and open
    memories (the server's serialization and clean-up are visible through them)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.finished = threading.Event()
        self.active = 0
        self.max_active = 0
        self.open_memories = 0
        self._count = threading.Lock()

    def run(self, program: Program, dram: np.ndarray | None = None) -> RunResult:
        with self._count:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.started.set()
        try:
            assert self.gate.wait(10), "the test never opened the gate"
            time.sleep(0.01)  # long enough for an overlapping run to show
            return super().run(program, dram)
        finally:
            with self._count:
                self.active -= 1
            self.finished.set()

    def open_memory(self, config: HwConfig, size: int) -> DeviceMemory:
        memory = super().open_memory(config, size)
        self.open_memories += 1
        inner = memory.close

        def close() -> None:
            self.open_memories -= 1
            inner()

        memory.close = close  # type: ignore[method-assign]
        return memory


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(device, **options)`` starts a :class:`DeviceServer` on 127.0.0.1:0 with
    the test limits; every one is closed at the end of the test."""
    servers: list[DeviceServer] = []

    def start(device: Any = "fsim", **options: Any) -> DeviceServer:
        options.setdefault("hello_timeout", TEST_HELLO_TIMEOUT)
        options.setdefault("max_message", TEST_MAX_MESSAGE)
        server = DeviceServer(device, **options).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.close()


class RawClient:
    """A plain socket speaking (or breaking) the wire format."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode_message(message))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_payload(self, payload: bytes) -> None:
        self.sock.sendall(HEADER.pack(len(payload)) + payload)

    def recv(self, within: float = 5.0) -> dict[str, Any]:
        return recv_message(self.sock, deadline=time.monotonic() + within)

    def hello(self, token: str) -> dict[str, Any]:
        self.send({"type": "hello", "token": token, "protocol": PROTOCOL_VERSION})
        return self.recv()

    def is_closed_by_server(self, within: float = 5.0) -> bool:
        """Whether the server closes the connection (after any reply) within ``within``
        seconds."""
        try:
            self.recv(within)
        except (ConnectionClosed, ConnectionResetError):
            return True
        except TimeoutError:
            return False
        return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_client() -> Iterator[Any]:
    """``raw_client(port)`` opens a :class:`RawClient`; all are closed after the test."""
    clients: list[RawClient] = []

    def connect(port: int) -> RawClient:
        c = RawClient(port)
        clients.append(c)
        return c

    yield connect
    for c in clients:
        c.close()


class Process:
    """A ``tensorfab`` subcommand in a process of its own, read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorfab.cli", *args], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})

    def expect(self, pattern: str) -> re.Match:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.match(pattern, line)
        assert m, (line, self.proc.poll())
        return m

    def interrupt(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    procs: list[Process] = []
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.communicate()
