"""Instructions per request of the receiver: the one repeatable measure on a noisy machine.

Throughput on the 2-core benchmark machine drifts by half within minutes (bench/README.md),
so a change worth a few percent cannot be told from the noise with wrk. This counts what the
receiver's own code executes instead: the real app (``web.create_app``, its routes from a
real database) called as a WSGI app in a loop on one thread, with the claims answered in
memory (no statement: the database's share is the ingest benchmark's), under valgrind's
cachegrind, which counts every instruction the process runs. A run of N requests less a run
of none, over N, is the count per request; with ``PYTHONHASHSEED=0`` two runs agree to
about 0.01 %.

    .venv/bin/python -m bench.instructions [--requests 2000] [--views receiver,floor]
        [--checkout PATH ...] [--runs 1] [--otlp]

``--checkout`` (once per checkout, e.g. a ``git worktree`` of an older commit after its own
``make setup``) runs each checkout's own ``bench.instructions`` with its own ``.venv`` on a
database its own code migrated, and compares them, the first as the reference: one command for
"did this range of commits change the count". ``--runs`` repeats the set, the checkouts taking
turns. Tracing is off (every ``OTEL_*`` variable removed) unless ``--otlp``, which turns it on
with ``OTEL_TRACES_EXPORTER=otlp`` to a sink in this process (``bench.common.otlp_sink``;
the batch span processor's encoding and export are counted, the sink's work is not).

``receiver`` is the whole request (the ``hooks.receive`` view, signed 1 KiB JSON events of
the ``hmac`` scheme, a new Idempotency-Key each); ``floor`` is the same app whose view
answers a constant 202 (what Flask, werkzeug and the app's hooks cost). Caveats: valgrind
hashes without the CPU's SHA instructions (SHA-256 of 1 KiB is about 31k instructions
here), so hashing weighs more than it does on the CPU; and the count says nothing of system
calls, context switches or waits for the interpreter lock (``perf`` and ``strace`` on a
loaded receiver do). Needs valgrind (``apt-get install valgrind``). JSON goes to
bench/results/instructions.json.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import procs

TENANT, SOURCE, SECRET = "bench", "own", "benchsecret"
# ``receiver-clear``: the receiver with payload sealing off (INBOX_ENCRYPT_PAYLOADS=0), to
# state what sealing costs per request beside ``receiver`` (sealed, the default).
VIEWS = ("receiver", "floor", "receiver-clear")
CLEAR_VIEW = "receiver-clear"
WARM = 200
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    p.add_argument("--requests", type=int, default=2000, help="requests per counted run")
    p.add_argument("--views", default=",".join(VIEWS), help="receiver,floor")
    p.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL"), help="a server of yours")
    p.add_argument("--out", type=Path, default=procs.RESULTS / "instructions.json")
    p.add_argument(
        "--checkout",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="measure in this checkout with its .venv (repeat; the first is the reference)",
    )
    p.add_argument("--runs", type=int, default=1, help="runs per checkout (with --checkout)")
    p.add_argument("--otlp", action="store_true", help="tracing on: OTLP to a local sink")
    p.add_argument("--child", nargs=2, metavar=("VIEW", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.view_list = [v for v in args.views.split(",") if v]
    if set(args.view_list) - set(VIEWS):
        p.error("unknown view")
    for path in args.checkout:
        if not (path / ".venv" / "bin" / "python").exists():
            p.error(f"{path} has no .venv (run make setup there)")
        if not (path / "bench" / "instructions.py").exists():
            p.error(f"{path} has no bench/instructions.py")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


# -- the counted process -----------------------------------------------------------------


def _environ(body: bytes, key: str, base: dict[str, str]) -> dict[str, Any]:
    """What granian hands the app: the process environment, then the request's keys."""
    ts = str(int(time.time()))
    sig = hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {
        **base,
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": f"/hooks/{TENANT}/{SOURCE}",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.input_terminated": True,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "wrk",
        "HTTP_X_TIMESTAMP": ts,
        "HTTP_X_SIGNATURE": sig,
        "HTTP_IDEMPOTENCY_KEY": key,
    }


def child(view: str, n: int) -> None:
    """Build the app, warm it, then run ``n`` requests (valgrind counts the process)."""
    import dataclasses

    from flask import Response

    from inbox.domain.records import EventId
    from inbox.infra import metrics
    from inbox.store.db.group_commit import Claims
    from web import create_app

    app = create_app()
    ids = itertools.count(1)
    ext = app.extensions["inbox"]
    app.extensions["inbox"] = dataclasses.replace(
        ext,
        claims=Claims(
            None,
            send=lambda rows: {r[0]: EventId(next(ids)) for r in rows},
            counted=metrics.record_claims,
        ),
    )
    if view == "floor":
        from web.receiver import unmount

        unmount(app)  # the floor is Flask's: its view answers
        answer = b'{"id":"evt_x","status":"accepted"}'
        app.view_functions["hooks.receive"] = lambda tenant, source: Response(
            answer, status=202, content_type="application/json"
        )
    body = json.dumps({"type": "bench.event", "data": "x" * 960}).encode()
    base = dict(os.environ)
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)
        return lambda data: None  # the WSGI write callable, unused

    for i in range(WARM + n):
        out = app(_environ(body, f"k-{os.getpid()}-{i}", base), start_response)
        b"".join(out)
        if i == WARM - 1 and not statuses[-1].startswith("202"):
            raise SystemExit(f"the warm-up was answered {statuses[-1]}")


# -- the driver --------------------------------------------------------------------------


def count(view: str, n: int, env: dict[str, str]) -> int:
    """Instructions valgrind counted in a child process running ``n`` requests."""
    cmd = [
        *("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"),
        *(sys.executable, "-m", "bench.instructions", "--child", view, str(n)),
    ]
    done = subprocess.run(cmd, env=env, cwd=procs.ROOT, capture_output=True, text=True)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the counted run failed:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def tracing_env(otlp_url: str | None) -> dict[str, str]:
    """This environment without any ``OTEL_*`` variable, plus OTLP to ``otlp_url`` if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if otlp_url is not None:
        env.update(
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp_url,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        )
    return env


def revision(path: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def compiled(python: str, root: Path) -> None:
    """Byte-compile the checkout first: else the first counted process compiles what it
    imports and the next ones do not, and the difference lands in the count per request."""
    cmd = [python, "-m", "compileall", "-q", "inbox", "web", "bench"]
    subprocess.run(cmd, cwd=root, check=True, capture_output=True)


def compare(args: argparse.Namespace, otlp_url: str | None) -> dict[str, Any]:
    """Each checkout's own ``bench.instructions`` ``args.runs`` times, taking turns."""
    env = tracing_env(otlp_url)
    checkouts: list[dict[str, Any]] = [
        {"path": str(path.resolve()), "revision": revision(path), "runs": []}
        for path in args.checkout
    ]
    with tempfile.TemporaryDirectory(prefix="inbox-instructions-") as tmp:
        out = Path(tmp) / "run.json"
        for run in range(1, args.runs + 1):
            for path, co in zip(args.checkout, checkouts, strict=True):
                cmd = [
                    str(path / ".venv" / "bin" / "python"),
                    *("-m", "bench.instructions", "--requests", str(args.requests)),
                    *("--views", ",".join(args.view_list), "--out", str(out)),
                    *(("--pg-url", args.pg_url) if args.pg_url else ()),
                ]
                print(f"run {run}: {co['revision']} ({co['path']})", flush=True)
                if run == 1:
                    compiled(str(path / ".venv" / "bin" / "python"), path)
                subprocess.run(cmd, env=env, cwd=path, check=True)
                co["runs"].append(json.loads(out.read_text())["instructions_per_request"])
    ref = checkouts[0]
    for co in checkouts:
        co["mean"] = {
            view: sum(r[view] for r in co["runs"]) / len(co["runs"]) for view in args.view_list
        }
        co["ratio"] = {view: co["mean"][view] / ref["mean"][view] for view in args.view_list}
    print(f"{'revision':10} {'view':9} {'runs':>24} {'ratio':>8}")
    for co in checkouts:
        for view in args.view_list:
            runs = ", ".join(f"{r[view]:,}" for r in co["runs"])
            print(f"{co['revision']:10} {view:9} {runs:>24} {co['ratio'][view]:>8.4f}")
    return {"checkouts": checkouts}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    from bench.common.otlp_sink import OtlpSink  # not in the counted child's imports

    sink = OtlpSink() if args.otlp else None
    otlp_url = sink.url if sink is not None else None
    try:
        if args.checkout:
            procs.RESULTS.mkdir(parents=True, exist_ok=True)
            report = compare(args, otlp_url)
            procs.write_report(args.out, {"requests": args.requests, "otlp": args.otlp, **report})
            return 0
        return measure(args, otlp_url)
    finally:
        if sink is not None:
            print(f"OTLP sink: {sink.requests} exports, {sink.bytes:,} bytes", flush=True)
            sink.close()


def measure(args: argparse.Namespace, otlp_url: str | None) -> int:
    procs.use_own_kek()
    procs.RESULTS.mkdir(parents=True, exist_ok=True)
    compiled(sys.executable, procs.ROOT)
    metrics_dir = tempfile.mkdtemp(prefix="inbox-instructions-metrics-")
    source = (TENANT, SOURCE, SECRET)
    try:
        with procs.source_database(args.pg_url, "inbox_instructions", source) as db_url:
            env = tracing_env(otlp_url)
            for name in ("REDIS_URL", "BROKER_URL"):
                env.pop(name, None)
            env.update(
                DATABASE_URL=db_url, PYTHONHASHSEED="0", PROMETHEUS_MULTIPROC_DIR=metrics_dir
            )
            per_request = {}
            for view in args.view_list:
                own = env if view != CLEAR_VIEW else {**env, "INBOX_ENCRYPT_PAYLOADS": "0"}
                kind = "receiver" if view == CLEAR_VIEW else view
                per_request[view] = (
                    count(kind, args.requests, own) - count(kind, 0, own)
                ) // args.requests
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    for view, n in per_request.items():
        print(f"{view:9} {n:>9,} instructions per request")
    procs.write_report(
        args.out,
        {"requests": args.requests, "otlp": args.otlp, "instructions_per_request": per_request},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
