"""Listening ports for servers the tests and the demo start: never where outgoing connections take theirs."""

from __future__ import annotations

import socket

from simhost.ports import _ephemeral_range, free_port


def test_a_free_port_is_outside_the_kernels_ephemeral_range_and_bindable():
    low, high = _ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50  # never handed out twice by one process
    for port in ports:
        assert not low <= port <= high
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))
