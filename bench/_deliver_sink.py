"""The delivery benchmark's HTTP sink, run as its own process (its CPU is not the courier's).

An asyncio HTTP/1.1 server with keep-alive on 127.0.0.1. The path picks the behaviour:
``/fast/...`` answers 200 at once, ``/slow/...`` after 50 ms, ``/dead/...`` accepts the
request and never answers. ``GET /stats`` returns the POST count per first path segment.

    python bench/_deliver_sink.py     # prints the port on the first line of stdout
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

OK = b'{"ok":true}'
SLOW_SECONDS = 0.05
COUNTS: Counter[str] = Counter()


def _response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length:
                await reader.readexactly(length)
            if method == "GET" and path == "/stats":
                writer.write(_response("200 OK", json.dumps(dict(COUNTS)).encode()))
                await writer.drain()
                continue
            kind = path.strip("/").split("/", 1)[0]
            COUNTS[kind] += 1
            if kind == "dead":
                await reader.read()  # hold the connection until the client gives up
                return
            if kind == "slow":
                await asyncio.sleep(SLOW_SECONDS)
            writer.write(_response("200 OK", OK))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def _main() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(_main())
    except KeyboardInterrupt:
        pass
