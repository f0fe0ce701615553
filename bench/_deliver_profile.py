"""In-process profile of ``inbox.courier.deliver_once`` against the instant sink.

Where one delivery's time goes: claim, signing, the HTTP round trip, recording the
result (attempt row + finish + commit), measured with cProfile's cumulative times.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Any

from sqlalchemy import Engine, text

from inbox.services.courier import deliver_once

# (label, file suffix, function name) picked out of the cProfile table.
_PARTS = [
    ("deliver_once", "inbox/courier.py", "deliver_once"),
    ("claim (txn)", "inbox/store/deliveries.py", "claim"),
    ("get_endpoint", "inbox/store/endpoints.py", "get_endpoint"),
    ("sign headers", "inbox/callbacks.py", "headers"),
    ("http post", "inbox/outbound/http.py", "post"),
    ("record round", "inbox/courier.py", "_record"),
    ("finish_many", "inbox/store/deliveries.py", "finish_many"),
    ("commit", "sqlalchemy/engine/base.py", "commit"),
    ("begin", "sqlalchemy/engine/base.py", "begin"),
    ("metrics", "inbox/metrics.py", "record_delivery_attempt"),
    ("redact_excerpt", "inbox/courier.py", "redact_excerpt"),
]


def _left(engine: Engine, endpoint_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM deliveries WHERE endpoint_id = :e AND state = 'pending'"
                ),
                {"e": endpoint_id},
            ).scalar_one()
        )


def profile(engine: Engine, endpoint_id: int, plain_id: int) -> dict[str, Any]:
    """Run deliver_once until ``endpoint_id`` is empty, under cProfile; and ``plain_id``
    the same way without the profiler, for the true per-delivery wall time."""
    start = time.perf_counter()
    plain = 0
    while True:
        r = deliver_once(engine, plain_id, allow_private=True)
        plain += r.delivered
        if not r.claimed:
            break
    plain_s = time.perf_counter() - start

    prof = cProfile.Profile()
    delivered = 0
    prof.enable()
    while True:
        r = deliver_once(engine, endpoint_id, allow_private=True)
        delivered += r.delivered
        if not r.claimed:
            break
    prof.disable()
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    per: dict[str, float] = {}
    for label, suffix, func in _PARTS:
        total = 0.0
        for (filename, _line, name), (_cc, _nc, _tt, ct, _callers) in raw.items():
            if name == func and filename.endswith(suffix):
                total += ct
        per[label] = round(1000 * total / max(1, delivered), 4)
    top = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:15]
    return {
        "plain_deliveries": plain,
        "plain_ms_per_delivery": round(1000 * plain_s / max(1, plain), 4),
        "plain_deliveries_per_s_one_thread": round(plain / plain_s, 1) if plain_s else None,
        "profiled_deliveries": delivered,
        "ms_per_delivery_cumulative": per,
        "top_tottime": [
            {"func": f"{fn.rsplit('/', 2)[-1]}:{ln}:{name}", "tottime_s": round(v[2], 4)}
            for (fn, ln, name), v in top
        ],
        "left_pending": _left(engine, endpoint_id),
    }
