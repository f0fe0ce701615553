"""``inbox events`` and ``inbox replay``: what operators use from a shell."""

from __future__ import annotations

import getpass
import json
from datetime import datetime
from typing import Any

import click

from inbox.cli.base import current, main, ringing
from inbox.cli.output import emit_json, fields, json_option, table, when
from inbox.cli.params import LIMIT, Rate
from inbox.domain.approval import BulkStatus
from inbox.domain.errors import NotFound
from inbox.domain.states import EventState
from inbox.services import bulk, operations, reading, replays
from inbox.services.operations import Actor
from inbox.services.runtime import Rung
from inbox.store.reads import listing
from inbox.store.reads.detail import EventDetail

# Lease bookkeeping: how the workers coordinate, not what happened to the event.
INTERNAL = ("id", "tenant_id", "source_id", "fence", "lease_owner", "lease_expires_at", "headers")


@main.group()
def events() -> None:
    """Find events and see what happened to them."""


@events.command("list")
@click.option(
    "--state", type=click.Choice([s.value for s in EventState]), help="Only events in this state."
)
@click.option("--tenant", help="Only this tenant's events.")
@click.option("--source", help="Only this source's events (its name).")
@click.option("--limit", type=LIMIT, default=50, show_default=True, help="At most this many.")
@json_option
def events_list(
    state: str | None, tenant: str | None, source: str | None, limit: int, as_json: bool
) -> None:
    """The newest events first (times in UTC)."""
    f = listing.Filter(state=state, tenant=tenant, source=source)
    rows = reading.list_events(current(), None, f, limit, None, check_names=True)
    if as_json:
        emit_json([r.public() for r in rows])
        return
    table(
        ["event", "source", "type", "state", "attempts", "received", "error"],
        [
            (
                r.public_id,
                f"{r.tenant}/{r.source}",
                r.event_type,
                r.state,
                r.attempts,
                r.received_at,
                r.last_error_class,
            )
            for r in rows
        ],
    )


@events.command("show")
@click.argument("public_id")
@json_option
def events_show(public_id: str, as_json: bool) -> None:
    """One event: state, attempts, errors, steps with results, duplicates, conflicts, audit."""
    detail = reading.event_detail(current(), public_id, None)
    if detail is None:
        raise NotFound(f"No event {public_id}.")
    if as_json:
        emit_json({k: v for k, v in detail.public().items() if k not in INTERNAL})
    else:
        summary(detail)


@events.command("redact")
@click.argument("public_id", metavar="EVT")
@click.option("--reason", required=True, help="Why (a request or case number): audited.")
@click.option(
    "--actor",
    default=getpass.getuser,
    show_default="current user",
    help="Who did it, as the audit log records it.",
)
@json_option
def events_redact(public_id: str, reason: str, actor: str, as_json: bool) -> None:
    """Delete an event's raw body; its SHA-256 and every other record stay.

    Refused while a legal hold covers the event, and while it is received or processing.
    An event whose body is gone already is reported as done.
    """
    done = operations.redact(current(), Actor(actor), public_id, reason)
    if as_json:
        emit_json(done.public())
    elif done.already:
        click.echo(f"{public_id}: body already removed (sha256 {done.body_sha256} kept)")
    else:
        click.echo(
            f"{public_id}: body redacted ({done.bytes_removed} bytes removed,"
            f" sha256 {done.body_sha256} kept)"
        )


def summary(d: EventDetail) -> None:
    """An event as an operator reads it: what it is, where it stands, what happened."""
    state = d.state + (f" ({d.outcome})" if d.outcome and d.outcome != d.state else "")
    pairs: list[tuple[str, object]] = [
        ("event", d.public_id),
        ("source", f"{d.tenant}/{d.source}"),
        ("type", d.event_type),
        ("state", state),
        ("attempts", f"{d.attempts} of {d.max_attempts}"),
        ("run", f"replay {d.replay}" if d.replay else "original"),
        ("received", d.received_at),
        ("finished", d.finished_at),
    ]
    if d.state == EventState.RECEIVED and d.last_error_class == "PlaybookMissing":
        # Held (inbox.store.write.queue.hold): not due until a sweep finds its playbook.
        pairs.append(("next try", "held until its playbook is registered (see last error)"))
    elif d.state == EventState.RECEIVED and d.available_at:
        pairs.append(("next try", d.available_at))
    if d.duplicate_count:
        pairs.append(
            (
                "duplicates",
                f"{d.duplicate_count} (first {when(d.first_duplicate_at)},"
                f" last {when(d.last_duplicate_at)})",
            )
        )
    if d.newer_event:
        pairs.append(("newer event", f"{d.newer_event} (completed first: this one is stale)"))
    if d.last_error_class:
        error = f"{d.last_error_class}: {d.last_error_message or ''}"
        pairs.append(("last error", error))
    size = len(d.body.encode()) if d.body is not None else None
    redacted = any(a.action == "redacted" for a in d.audit)
    gone = "removed by redaction" if redacted else "removed by retention"
    body = f"{size} bytes, {d.content_type}" if size is not None else gone
    pairs.append(("body", f"{body}, sha256 {d.body_sha256}"))
    if d.decision is not None:
        pairs.append(("decision", json.dumps(d.decision, sort_keys=True)))
    fields(pairs)
    _section(
        "steps",
        ["step", "attempt", "ran in", "completed", "result"],
        [
            (s.name, s.attempt, _run(s.replay), s.completed_at, json.dumps(s.result))
            for s in d.steps
        ],
    )
    _section(
        "conflicts (same key, another body)",
        ["other sha256", "count", "first", "last"],
        [(c.other_sha256, c.count, c.first_at, c.last_at) for c in d.conflicts],
    )
    _section(
        "audit",
        ["at", "actor", "action", "detail"],
        [(a.at, a.actor, a.action, _audit_detail(a.detail)) for a in d.audit],
    )


def _run(replay: int | None) -> str:
    return f"replay {replay}" if replay else "original"


def _audit_detail(detail: dict[str, Any] | None) -> str:
    """A replay's number and what it followed; a bulk replay's job and approver."""
    d = detail or {}
    said = [f"replay {d['replay']}"] if d.get("replay") else []
    if d.get("attempts_before") is not None:
        said.append(f"after {d['attempts_before']} attempt(s) ({d.get('error_before') or '-'})")
    if d.get("bulk_replay"):
        said.append(f"bulk {d['bulk_replay']}, approved by {d.get('approved_by') or '-'}")
    return "; ".join(said)


def _section(title: str, headers: list[str], rows: list[tuple[object, ...]]) -> None:
    if not rows:
        return
    click.echo(f"\n{title}:")
    table(headers, rows)


@main.command()
@click.argument("ids", nargs=-1)
@click.option("--quarantined", is_flag=True, help="Replay quarantined events by filter.")
@click.option("--tenant", help="Only this tenant's dead letters.")
@click.option("--source", help="Only this source's dead letters (its name).")
@click.option("--since", type=click.DateTime(), help="Received at or after this time.")
@click.option(
    "--rate", type=Rate(bulk.MAX_RATE), default=50.0, show_default=True, help="Events per second."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show, per event, the steps that would be skipped, run or stopped by a guard and"
    " the callbacks that would be sent; change nothing (the preview is audited).",
)
@json_option
@click.option(  # the name before --json; kept for scripts
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", hidden=True
)
@click.option("--approve", "approve_id", metavar="JOB", help="Approve a waiting bulk replay.")
@click.option("--reject", "reject_id", metavar="JOB", help="Reject a waiting bulk replay.")
@click.option("--note", help="With --approve/--reject: a note for the audit log.")
@click.option("--awaiting", is_flag=True, help="List bulk replays waiting for approval.")
@click.option(
    "--actor",
    default=getpass.getuser,
    show_default="current user",
    help="Who asks, as the audit log records it.",
)
def replay(
    ids: tuple[str, ...],
    quarantined: bool,
    tenant: str | None,
    source: str | None,
    since: datetime | None,
    rate: float,
    dry_run: bool,
    approve_id: str | None,
    reject_id: str | None,
    note: str | None,
    awaiting: bool,
    actor: str,
    as_json: bool,
    fmt: str,
) -> None:
    """Move quarantined events back to received; completed steps are kept.

    More than INBOX_BULK_APPROVAL_MIN events (default 100) by filter: a bulk replay job
    is made that waits for a second operator: `inbox replay --approve JOB --actor NAME`
    (another name than the requester's) runs it, `--reject JOB` refuses it.
    """
    fmt = "json" if as_json else fmt
    if awaiting:
        _awaiting()
        return
    if approve_id or reject_id:
        if (approve_id and reject_id) or ids or quarantined:
            raise click.UsageError("--approve/--reject take a job id and nothing else")
        _review(approve_id or reject_id or "", bool(approve_id), note, actor)
        return
    _check_targets(ids, quarantined, tenant)
    who = Actor(actor)
    try:
        plan = replays.plan_event_replay(
            current(), who, ids, tenant=tenant, source=source, since=since, quarantined=quarantined
        )
    except replays.TooManyIds as exc:
        raise click.UsageError(str(exc)) from None
    targets = plan.targets
    if dry_run:
        _preview(targets, who, {"ids": list(ids)} if ids else _about(tenant, source, since), fmt)
        return
    if plan.needs_approval:
        _request_approval(tenant, source, since, rate, who, plan.approval_min)
        return
    if ids:
        operations.refuse_erased(current(), who, targets)
    with click.progressbar(length=len(targets), label="replaying", show_pos=True) as bar:
        done = operations.replay_events(
            ringing(), who, targets, rate=rate, each=lambda _: bar.update(1)
        )
    click.echo(f"replayed {len(done.moved)} of {len(targets)}")
    _said(done.rung)
    if ids and len(done.moved) < len(targets):
        raise NotFound(f"{len(targets) - len(done.moved)} of the events named were not quarantined")


def _about(tenant: str | None, source: str | None, since: datetime | None) -> dict[str, Any]:
    about: dict[str, Any] = {"tenant": tenant, "source": source}
    if since is not None:
        about["since"] = since.isoformat()
    return {"filter": {k: v for k, v in about.items() if v is not None}}


def _preview(targets: list[str], actor: Actor, about: dict[str, Any], fmt: str) -> None:
    """A replay's dry run: the plan, and its one audit row."""
    found = replays.preview_events(current(), actor, targets, about)
    if fmt == "json":
        click.echo(json.dumps(found.to_dict(), indent=2, default=str))
        return
    for ev in found.events:
        if not ev.replayable:
            click.echo(f"{ev.event}  not replayed: {ev.problem}")
            continue
        said = f"  ({ev.problem})" if ev.problem else ""
        click.echo(f"{ev.event}  playbook {ev.playbook}  outcome {ev.outcome}{said}")
        for st in ev.steps:
            sends = "" if st.action != "run" else _sends(st.sends)
            click.echo(f"  {st.action:<15} {st.name}: {st.why}{sends}")
        for cb in ev.callbacks:
            click.echo(
                f"  callback        {cb.event_type} to {cb.endpoint} (webhook-replay {cb.replay})"
                f": {cb.delivery}"
            )
    totals = found.totals
    more = " (more match: only these were planned)" if found.more else ""
    click.echo(
        f"would replay {totals['replayable']} of {found.matched} event(s){more}:"
        f" steps skipped {totals['skip']}, run {totals['run']},"
        f" stopped as stale {totals['stale']}, stopped as duplicate_fact"
        f" {totals['duplicate_fact']}; callbacks {totals['callbacks']}"
        f" ({totals['callbacks_held']} held, {totals['callbacks_filtered']} more filtered out)"
        + (
            f" (+ unknown from {totals['unknown_callbacks']} step(s))"
            if totals["unknown_callbacks"]
            else ""
        )
    )


def _sends(sends: list[str] | None) -> str:
    if sends is None:
        return "; may send callbacks (the step does not declare them)"
    return f"; sends {', '.join(sends)}" if sends else ""


def _check_targets(ids: tuple[str, ...], quarantined: bool, tenant: str | None) -> None:
    if ids and quarantined:
        raise click.UsageError("give event ids or --quarantined, not both")
    if quarantined and not tenant:
        raise click.UsageError("--quarantined needs --tenant")
    if not ids and not quarantined:
        raise click.UsageError("give event ids, or --quarantined --tenant T")


def _awaiting() -> None:
    """What waits for a second operator, oldest first."""
    jobs = replays.awaiting(current(), None)
    table(
        ["job", "events", "requested by", "created", "filter"],
        [
            (j.public_id, j.total, j.actor, j.created_at, json.dumps(j.filter, sort_keys=True))
            for j in jobs
        ],
    )


def _request_approval(
    tenant: str | None,
    source: str | None,
    since: datetime | None,
    rate: float,
    actor: Actor,
    approval_min: int,
) -> None:
    """The two-person rule: snapshot the events into a job that waits for approval."""
    raw = {k: v for k, v in (("tenant", tenant), ("source", source)) if v}
    if since is not None:
        raw["since"] = since.isoformat()
    req = bulk.parse_request(
        {"kind": "events", "filter": raw, "rate": max(1, min(bulk.MAX_RATE, round(rate)))}
    )
    job, _ = replays.start(current(), actor, req)
    click.echo(f"bulk replay {job.public_id}: {job.total} event(s), {job.status}")
    if job.status == BulkStatus.AWAITING_APPROVAL:
        click.echo(
            f"more than {approval_min} events: another operator approves it with"
            f"\n  inbox replay --approve {job.public_id} --actor NAME"
        )


def _review(public_id: str, approve: bool, note: str | None, actor: str) -> None:
    """Approve (then run here, at the job's rate) or reject a waiting bulk replay."""
    rt = ringing()
    job = replays.review(rt, Actor(actor), public_id, approve=approve, note=note)
    click.echo(
        f"bulk replay {job.public_id}: {job.status} by {actor}; requested by {job.actor},"
        f" {job.total} event(s), filter {json.dumps(job.filter, sort_keys=True)}"
    )
    if not approve:
        return
    run, rung = replays.run_here(rt, job.id)
    click.echo(f"{run.status}: replayed {run.moved}, skipped {run.skipped}")
    _said(rung)


def _said(rung: Rung | None) -> None:
    """The workers are told at once; without a broker answering, the next sweep finds
    the events."""
    if rung == "failed":
        click.echo("(the broker did not answer: the next sweep will run them)")
