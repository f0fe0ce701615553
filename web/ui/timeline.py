"""One event's history in time order: receipts, duplicates, conflicts, steps, errors,
every failed attempt (kept across replays), deliveries with their attempts, and the
audit trail. Pure: it reads the ``EventDetail`` ``inbox.store.reads.events.event_detail``
returns and the attempts ``inbox.store.reads.events.attempts`` does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from inbox.domain.states import EventState
from inbox.store.reads.detail import AuditRecord, EventDetail
from inbox.store.reads.events import Attempt


@dataclass(frozen=True)
class Entry:
    at: datetime
    kind: str  # a CSS class: receipt, duplicate, conflict, step, error, delivery, audit, done
    title: str
    detail: str = ""
    trace: str | None = None  # a failed attempt's redacted traceback excerpt


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _receipts(e: EventDetail) -> list[Entry]:
    out = [
        Entry(
            e.received_at,
            "receipt",
            "Received",
            f"{e.content_type}; answered {e.response_status}",
        )
    ]
    n = int(e.duplicate_count or 0)
    if n and e.first_duplicate_at is not None:
        answer = "each answered with the stored response"
        out.append(
            Entry(
                e.first_duplicate_at,
                "duplicate",
                "First duplicate",
                f"{_plural(n, 'duplicate')}, {answer}",
            )
        )
        if n > 1 and e.last_duplicate_at is not None:
            out.append(
                Entry(e.last_duplicate_at, "duplicate", "Last duplicate", _plural(n, "duplicate"))
            )
    for c in e.conflicts:
        what = f"the same key with another body (sha256 {c.other_sha256[:16]}…), answered 422"
        out.append(
            Entry(c.first_at, "conflict", "Conflict", f"{_plural(int(c.count), 'time')}: {what}")
        )
        if int(c.count) > 1:
            out.append(Entry(c.last_at, "conflict", "Last conflict", what))
    return out


def _attempts(e: EventDetail, attempts: list[Attempt]) -> list[Entry]:
    """Every failed run, kept across replays: the step, the error and its traceback."""
    out = []
    for a in attempts:
        message = f"{a.error_class}: {a.error_message or ''}".rstrip(": ")
        where = f" in step {a.step}" if a.step else ""
        if a.outcome == "quarantined":
            title = f"Quarantined after attempt {a.attempt}{where}"
        else:
            title = f"Attempt {a.attempt} failed{where}"
        out.append(Entry(a.at, "error", title, message, a.traceback))
    if e.state == EventState.RECEIVED and attempts and attempts[-1].outcome == "retry":
        out.append(Entry(e.available_at, "retry", "Retry due", f"attempt {e.attempts + 1}"))
    return out


def _last_error(e: EventDetail) -> list[Entry]:
    """Events failed before attempts were kept: only the latest error is known."""
    error = e.last_error_class
    if not error:
        return []
    message = f"{error}: {e.last_error_message or ''}".rstrip(": ")
    if e.state == EventState.QUARANTINED and e.finished_at is not None:
        detail = f"after {_plural(int(e.attempts), 'attempt')}: {message}"
        return [Entry(e.finished_at, "error", "Quarantined", detail)]
    if e.state == EventState.RECEIVED:
        detail = f"attempt {e.attempts} failed: {message}"
        return [Entry(e.available_at, "error", "Retry due", detail)]
    return []


def _processing(e: EventDetail, attempts: list[Attempt]) -> list[Entry]:
    out = [
        Entry(
            s.completed_at,
            "step",
            f"Step {s.name} completed",
            f"attempt {s.attempt}" + (f", replay {s.replay}" if s.replay else ""),
        )
        for s in e.steps
    ]
    out += _attempts(e, attempts) if attempts else _last_error(e)
    if e.state == EventState.COMPLETED and e.finished_at is not None:
        outcome = e.outcome or "done"
        out.append(
            Entry(
                e.finished_at,
                "done",
                "Completed",
                f"{outcome} after {_plural(int(e.attempts), 'attempt')}",
            )
        )
    return out


def _deliveries(e: EventDetail) -> list[Entry]:
    out = []
    for d in e.deliveries:
        ident = d.public_id
        out.append(Entry(d.created_at, "delivery", "Delivery created", f"{ident} → {d.url}"))
        for a in d.attempts_log:
            ok = a.status is not None and 200 <= int(a.status) < 300
            answer = f"HTTP {a.status}" if a.status is not None else a.error_class
            excerpt = f": {a.excerpt}" if a.excerpt and not ok else ""
            out.append(
                Entry(
                    a.at,
                    "delivery" if ok else "delivery-error",
                    f"Delivery attempt: {answer}",
                    f"{ident}, {a.latency_ms} ms{excerpt}",
                )
            )
        if d.state == "failed" and d.finished_at is not None:
            tries = _plural(int(d.attempts), "attempt")
            out.append(
                Entry(
                    d.finished_at,
                    "error",
                    "Callback dead (delivery failed)",
                    f"{ident} after {tries}: {d.last_error}",
                )
            )
        for au in d.audit:
            out.append(Entry(au.at, "audit", f"Delivery {au.action} by {au.actor}", ident))
    return out


def _audit(a: AuditRecord) -> Entry:
    """An operator's action; a replay says which one it was and what it ended."""
    detail = a.detail or {}
    number = f" {detail['replay']}" if detail.get("replay") else ""
    said = []
    if detail.get("attempts_before") is not None:
        said.append(f"after {_plural(int(detail['attempts_before']), 'attempt')}")
    if detail.get("approved_by"):
        said.append(f"bulk {detail.get('bulk_replay')}, approved by {detail['approved_by']}")
    return Entry(a.at, "audit", f"{a.action.capitalize()}{number} by {a.actor}", "; ".join(said))


def event_timeline(e: EventDetail, attempts: list[Attempt]) -> list[Entry]:
    entries = _receipts(e) + _processing(e, attempts) + _deliveries(e)
    entries += [_audit(a) for a in e.audit]
    return sorted(entries, key=lambda x: x.at)
