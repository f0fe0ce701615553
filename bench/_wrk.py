"""The load generator, in C: wrk (Debian's package ``wrk``) driving one level.

The Python generator in ``_load.py`` costs ~0.3 ms of CPU per request, on the same two
cores as the receiver and PostgreSQL: 15-20 % of the machine at the rates measured here.
wrk (an epoll loop in C, a little Lua per request) costs a fraction of that, so more of
the machine is left to what is measured, as it would be with the senders elsewhere.

Same traffic as ``_load.py``: a closed loop (each connection sends its next request when
the previous one is answered) over keep-alive connections, one per sender; 1 KiB JSON
bodies signed with the ``hmac`` scheme, a unique ``Idempotency-Key`` per request. The
``hmac`` scheme signs ``{timestamp}.{body}`` and takes the event id from the
Idempotency-Key header, so one body and one signature, made when the level starts, serve
every request of the level (the timestamp stays well inside the 300 s tolerance), and
only the key changes per request, which needs no cryptography in Lua.

wrk stops at its deadline with up to one request per connection in flight; those may be
stored without their answer being counted. So rows >= answered 202s, and the excess is at
most the connections of the level's two wrk runs (warm-up and measured).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _load

WRK = "wrk"
_RESULT = "WRK-RESULT "

# %(...)s are filled in by Python; everything else is Lua.
_SCRIPT = """
local counter = 0
local prefix = "k-"
local threads = {}
statuses = {}
local body = %(body)s
local headers = {
  ["Content-Type"] = "application/json",
  ["X-Timestamp"] = "%(ts)s",
  ["X-Signature"] = "%(sig)s",
}

function setup(thread)
  threads[#threads + 1] = thread
  thread:set("tid", #threads)
end

function init(args)
  prefix = args[1] .. "-" .. tid .. "-"
end

function request()
  counter = counter + 1
  headers["Idempotency-Key"] = prefix .. counter
  return wrk.format("POST", "%(path)s", headers, body)
end

function response(status, hdrs, resp_body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local e = summary.errors
  local out = {
    requests = summary.requests,
    duration_us = summary.duration,
    p50_ms = latency:percentile(50) / 1000,
    p90_ms = latency:percentile(90) / 1000,
    p99_ms = latency:percentile(99) / 1000,
    max_ms = latency.max / 1000,
    transport_errors = e.connect + e.read + e.write + e.timeout,
  }
  local parts = {}
  for k, v in pairs(out) do parts[#parts + 1] = string.format("%%q:%%s", k, v) end
  local counts = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      counts[status] = (counts[status] or 0) + n
    end
  end
  local st = {}
  for status, n in pairs(counts) do st[#st + 1] = string.format("\\"%%d\\":%%d", status, n) end
  parts[#parts + 1] = "\\"statuses\\":{" .. table.concat(st, ",") .. "}"
  io.write("%(marker)s{" .. table.concat(parts, ",") .. "}\\n")
end
"""


def available() -> bool:
    return shutil.which(WRK) is not None


def script(path: str, secret: bytes, now: float | None = None) -> str:
    body = _load.make_body("wrk-body")
    ts = str(int(now if now is not None else time.time()))
    sig = hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return _SCRIPT % {
        "body": json.dumps(body.decode()),  # a JSON string is a valid Lua string here
        "ts": ts,
        "sig": sig,
        "path": path,
        "marker": _RESULT,
    }


def _command(url: str, script_path: Path, senders: int, seconds: float, tag: str) -> list[str]:
    return [
        WRK,
        f"-t{min(2, senders)}",
        f"-c{senders}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "30s",
        "-s",
        str(script_path),
        url,
        "--",
        tag,
    ]


def _run(cmd: list[str], during: Callable[[], Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Run wrk; ``during`` is called one second in (its result is returned too)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = None
    if during is not None:
        time.sleep(1.0)
        seen = during()
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited with {proc.returncode}: {err}")
    line = next((ln for ln in out.splitlines() if ln.startswith(_RESULT)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{out}")
    result: dict[str, Any] = json.loads(line[len(_RESULT) :])
    return result, seen


def _statuses(result: dict[str, Any]) -> dict[str, int]:
    """HTTP status -> count; "0" for transport errors, as in ``_load``."""
    counts = {str(k): int(v) for k, v in result["statuses"].items()}
    if result["transport_errors"]:
        counts["0"] = counts.get("0", 0) + int(result["transport_errors"])
    return counts


def run_level(
    level: _load.Level, script_dir: Path, probe: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """One level with wrk; the same keys as ``_load.run_level``."""
    senders, seconds, warmup, tag = level.senders, level.seconds, level.warmup, level.tag
    script_path = script_dir / f"wrk-{tag}.lua"
    script_path.write_text(script(level.path, level.secret))
    url = f"http://{level.host}:{level.port}/"
    try:
        warm = None
        if warmup > 0:
            warm, _ = _run(_command(url, script_path, senders, warmup, f"{tag}-w"))
        before = probe() if probe is not None else None
        measured, during = _run(_command(url, script_path, senders, seconds, f"{tag}-m"), probe)
        after = probe() if probe is not None else None
    finally:
        script_path.unlink(missing_ok=True)
    if before is not None and during is not None:
        before["connections"] = during["connections"]  # wrk's connections exist only while it runs
    window_s = measured["duration_us"] / 1e6
    window = _statuses(measured)
    total = Counter(window)
    if warm:
        total.update(_statuses(warm))
    accepted = sum(n for status, n in window.items() if 200 <= int(status) < 300)
    return {
        "senders": senders,
        "load_processes": 1,
        "load_generator": f"wrk -t{min(2, senders)}",
        "seconds": window_s,
        "warmup_seconds": warmup,
        "accepted": accepted,
        "accepted_per_s": accepted / window_s if window_s else math.nan,
        "p50_ms": measured["p50_ms"],
        "p90_ms": measured["p90_ms"],
        "p99_ms": measured["p99_ms"],
        "max_ms": measured["max_ms"],
        "errors": sum(window.values()) - accepted,
        "window_statuses": dict(sorted(window.items())),
        "total_statuses": dict(sorted(total.items())),
        "in_flight_at_stop_max": senders * (2 if warm else 1),
        "probe": [before, after] if probe is not None else None,
    }
