"""The failover tests' Patroni pair starts even when a port it picked is taken meanwhile."""

from __future__ import annotations

import socket

import pytest

from tests import patroni

pytestmark = pytest.mark.e2e


def test_a_pair_whose_port_was_taken_starts_again_on_new_ports(capsys):
    why = patroni.missing()
    if why:
        pytest.skip(f"no Patroni pair on this machine: {why}")
    cluster = patroni.Pair()
    taken = cluster.nodes[0].rest
    # What a busy machine's outgoing connection does between free_port() and Patroni's bind.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", taken))
    squatter.listen()
    try:
        cluster.start(attempts=2)
        assert cluster.nodes[0].rest != taken
        assert cluster.leader() is cluster.nodes[0]
        assert "attempt 1 of 2: node0 exited before it was up" in capsys.readouterr().out
    finally:
        squatter.close()
        cluster.stop()


def test_a_pair_starts_from_a_directory_the_postgres_user_may_not_enter(tmp_path, monkeypatch):
    why = patroni.missing()
    if why:
        pytest.skip(f"no Patroni pair on this machine: {why}")
    # A CI clone under a 0700 folder: Patroni's spawned starter once changed into it and died.
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    monkeypatch.chdir(closed)
    cluster = patroni.Pair()
    try:
        cluster.start(attempts=1)
        assert cluster.leader() is cluster.nodes[0]
    finally:
        cluster.stop()
