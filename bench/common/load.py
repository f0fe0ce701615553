"""The load: signed requests, their bodies, wrk, and an open-loop sender.

**wrk** (``apt-get install wrk``), an epoll loop in C with a little Lua per request,
so most of the two cores are left to what is measured: a closed loop over keep-alive
connections, one per sender; 1 KiB JSON bodies signed with the ``hmac`` scheme, which takes
the event id from the Idempotency-Key header, so one body and one signature serve a whole
level. wrk stops at its deadline with up to one request per connection in flight: those
may be stored without their answer being counted.

**The open loop** (``paced``): Python threads sending at a fixed rate however late the
answers come, for latency at a given load rather than throughput.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import shutil
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def signed(secret: str, body: bytes, key: str) -> dict[str, str]:
    """Headers of a request signed with the ``hmac`` scheme."""
    ts = str(int(time.time()))
    sig = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-Timestamp": ts, "X-Signature": sig}
    return {**headers, "Idempotency-Key": key}


# -- wrk ---------------------------------------------------------------------------------

_RESULT = "WRK-RESULT "

# %(...)s are filled in by Python; everything else is Lua. With ``repeat`` every second
# request carries the previous request's key: wrk calls request() for whichever of the
# thread's connections is free next, so the copy goes out on another connection (and,
# as the kernel spreads connections over the server's processes, often another process),
# usually while the first is still in flight.
_SCRIPT = """
local counter, prefix, last = 0, "k-", "k-0"
local copies = %(repeat)s
local threads = {}
statuses, replayed = {}, 0
local body = %(body)s
local headers = {
  ["Content-Type"] = "application/json", ["X-Timestamp"] = "%(ts)s", ["X-Signature"] = "%(sig)s",
}

function setup(thread)
  threads[#threads + 1] = thread
  thread:set("tid", #threads)
end

function init(args) prefix = args[1] .. "-" .. tid .. "-" end

function request()
  counter = counter + 1
  if not (copies and counter %% 2 == 0) then last = prefix .. counter end
  headers["Idempotency-Key"] = last
  return wrk.format("POST", "%(path)s", headers, body)
end

function response(status, hdrs, resp_body)
  statuses[status] = (statuses[status] or 0) + 1
  if hdrs["idempotent-replayed"] or hdrs["Idempotent-Replayed"] then replayed = replayed + 1 end
end

function done(summary, latency, requests)
  local counts, copies_seen, st, e = {}, 0, {}, summary.errors
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do counts[status] = (counts[status] or 0) + n end
    copies_seen = copies_seen + thread:get("replayed")
  end
  for status, n in pairs(counts) do st[#st + 1] = string.format('"%%d":%%d', status, n) end
  io.write(string.format('%(marker)s{"requests":%%d,"duration_us":%%d,"p50_ms":%%.3f,'
    .. '"p90_ms":%%.3f,"p99_ms":%%.3f,"max_ms":%%.3f,"transport_errors":%%d,"replayed":%%d,'
    .. '"statuses":{%%s}}\\n', summary.requests, summary.duration, latency:percentile(50) / 1000,
    latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    e.connect + e.read + e.write + e.timeout, copies_seen, table.concat(st, ",")))
end
"""


def make_body(key: str, size: int = 1024) -> bytes:
    """A JSON object of exactly ``size`` bytes whose ``id`` is ``key``."""
    head = '{"id":"' + key + '","type":"bench.event","data":{"pad":"'
    tail = '"}}'
    return (head + "x" * (size - len(head) - len(tail)) + tail).encode()


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def wrk_script(path: str, secret: bytes, repeat: bool) -> str:
    body = make_body("wrk-body")
    ts = str(int(time.time()))
    sig = hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    lua = json.dumps(body.decode())  # a JSON string is a valid Lua string here
    fill = {"body": lua, "ts": ts, "sig": sig, "path": path, "marker": _RESULT}
    return _SCRIPT % {**fill, "repeat": "true" if repeat else "false"}


def run_wrk(url: str, script: Path, senders: int, seconds: float, tag: str) -> dict[str, Any]:
    """One wrk run: requests, latency percentiles (ms), statuses ("0": transport errors)."""
    cmd = [
        *("wrk", f"-t{min(2, senders)}", f"-c{senders}", f"-d{max(1, round(seconds))}s"),
        *("--timeout", "30s", "-s", str(script), url, "--", tag),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited with {done.returncode}: {done.stderr}")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(_RESULT)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{done.stdout}")
    result: dict[str, Any] = json.loads(line[len(_RESULT) :])
    statuses = {str(k): int(v) for k, v in result["statuses"].items()}
    if result["transport_errors"]:
        statuses["0"] = statuses.get("0", 0) + int(result["transport_errors"])
    result["statuses"] = dict(sorted(statuses.items()))
    return result


# -- the open loop -----------------------------------------------------------------------


def paced(
    port: int, path: str, rate: float, seconds: float, prefix: str, secret: str, event_type: str
) -> dict[str, Any]:
    """Open loop: request i is due at ``start + i / rate`` and handed then to one of 16
    threads with keep-alive connections (queued when all are busy, so sent late), so a
    slow answer does not lower the offered rate. Request i: ``{"type": event_type, "seq":
    i}`` signed with ``secret`` (``signed``), Idempotency-Key ``{prefix}-{i}``."""
    local, opened = threading.local(), []

    def send(i: int) -> tuple[int, float]:
        body = json.dumps({"type": event_type, "seq": i}, separators=(",", ":")).encode()
        headers = signed(secret, body, f"{prefix}-{i}")
        if (conn := getattr(local, "conn", None)) is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            opened.append(conn)
        t = time.perf_counter()
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            local.conn, status = conn, resp.status
        except (OSError, http.client.HTTPException):
            conn.close()
            local.conn, status = None, 0
        return status, time.perf_counter() - t

    total, start = int(rate * seconds), time.perf_counter() + 0.2
    with ThreadPoolExecutor(16) as pool:
        futures = []
        for i in range(total):
            time.sleep(max(0.0, start + i / rate - time.perf_counter()))
            futures.append(pool.submit(send, i))
        answers = [f.result() for f in futures]
    elapsed = time.perf_counter() - start
    for conn in opened:
        conn.close()
    lat = sorted(t for _, t in answers) or [float("nan")]
    ms = {q: round(lat[round(q / 100 * (len(lat) - 1))] * 1000, 2) for q in (50, 99)}
    statuses = {str(k): v for k, v in sorted(Counter(s for s, _ in answers).items())}
    head = {"sent": total, "seconds": round(elapsed, 3), "offered_per_s": round(total / elapsed, 1)}
    return head | {"statuses": statuses, "http_p50_ms": ms[50], "http_p99_ms": ms[99]}
