"""Random hex for public ids: fetched in blocks, each byte handed out once, never shared
with a forked child."""

from __future__ import annotations

import os
import threading

import pytest

from inbox.domain import random_ids
from inbox.domain.random_ids import RandomHex


def test_hex_of_the_asked_length_and_no_repeats_across_refills() -> None:
    gen = RandomHex(block=64)  # 8 ids a block: many refills
    seen = [gen.token_hex(8) for _ in range(2000)]
    assert all(len(v) == 16 and int(v, 16) >= 0 for v in seen)
    assert len(set(seen)) == len(seen)


def test_one_kernel_call_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.urandom

    def counted(n: int) -> bytes:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(random_ids.os, "urandom", counted)
    gen = RandomHex(block=4096)
    for _ in range(1024):  # 8 KiB of ids
        gen.token_hex(8)
    assert calls == [4096, 4096]


def test_a_request_larger_than_a_block_is_served_whole() -> None:
    assert len(RandomHex(block=4).token_hex(32)) == 64


def test_threads_never_get_the_same_bytes() -> None:
    gen = RandomHex(block=256)
    out: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def take(mine: list[str]) -> None:
        start.wait()
        mine.extend(gen.token_hex(8) for _ in range(2000))

    threads = [threading.Thread(target=take, args=(o,)) for o in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [v for o in out for v in o]
    assert len(set(flat)) == len(flat) == 16000


def test_a_forked_child_does_not_reuse_the_parents_block() -> None:
    gen = RandomHex(block=4096)
    gen.token_hex(8)  # the parent holds a block with 4088 bytes left
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the next id, to the parent
        try:
            os.write(write, gen.token_hex(8).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert len(child) == 16
    assert child != gen.token_hex(8)  # without the fork hook both would take bytes 8-16
