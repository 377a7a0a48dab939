"""The ports tests hand out: no parallel worker's server can be given one in the meantime."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from tests.conftest import listen_port


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_a_refused_port_refuses_connections_and_no_server_can_take_it(refused_port: int) -> None:
    """For the whole test a connection is refused, and a server binding the port fails."""
    with socket.socket() as client, pytest.raises(ConnectionRefusedError):
        client.connect(("127.0.0.1", refused_port))
    with socket.socket() as server, pytest.raises(OSError, match="in use"):
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's servers do
        server.bind(("127.0.0.1", refused_port))


def test_a_listen_port_is_never_one_the_kernel_hands_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the ephemeral range (port 0 and outgoing connections), in a block per xdist worker."""
    low, _ = ephemeral_range()
    blocks = {}
    for worker in ("gw0", "gw1", "gw7"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        ports = {listen_port() for _ in range(20)}
        assert max(ports) < low
        blocks[worker] = (min(ports), max(ports))
    spans = sorted(blocks.values())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), blocks
