"""Random hex for public ids, from the operating system's CSPRNG, fetched in blocks.

``secrets.token_hex`` asks the kernel for every id, and ``os.urandom`` lets go of the
interpreter lock around that call: with a receiver's threads all wanting the lock, the
thread that let go then waits for it again, a context switch or two per request (perf's
sched_switch trace, bench/README.md). One call per ``BLOCK`` bytes instead; the bytes are
the same kernel randomness, each handed out once. A forked child drops what its parent
fetched, so two processes never hand out the same bytes.
"""

from __future__ import annotations

import os
import threading

BLOCK = 4096


class RandomHex:
    def __init__(self, block: int = BLOCK) -> None:
        self._block = block
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it at the fork
        self._buf, self._pos = b"", 0

    def token_hex(self, nbytes: int) -> str:
        """``nbytes`` random bytes as ``2 * nbytes`` hex digits."""
        with self._lock:
            pos = self._pos
            if pos + nbytes > len(self._buf):
                self._buf, pos = os.urandom(max(self._block, nbytes)), 0
            self._pos = pos + nbytes
            chunk = self._buf[pos : pos + nbytes]
        return chunk.hex()


_shared = RandomHex()
token_hex = _shared.token_hex
