"""``inbox audit``: the invariants checked on demand, and repairs behind a second operator."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime

import click

from inbox.cli.base import current, main
from inbox.domain.errors import BadRequest
from inbox.domain.invariants import MEANING, Invariant, parse
from inbox.services import audit


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@main.command("audit")
@click.argument("invariants", nargs=-1, metavar="[INVARIANT]...")
@click.option(
    "--since",
    callback=_since,
    metavar="ISO",
    help="Check only rows from this time on (the ledger's: from the start of its UTC day).",
)
@click.option(
    "--incremental",
    is_flag=True,
    help="Check from each invariant's watermark, as beat does, and advance it.",
)
@click.option("--list", "list_", is_flag=True, help="List the invariants and what each means.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def audit_cmd(
    invariants: tuple[str, ...],
    since: datetime | None,
    incremental: bool,
    list_: bool,
    as_json: bool,
) -> None:
    """Check the inbox's invariants: every one, or those named (--list names them).

    Without --since or --incremental every row is read (a full pass). Each violation
    found is recorded (the console's Invariants page lists the open ones, with their
    rows) and printed; the exit status is 1 when any invariant is violated, 0 when all
    hold.
    """
    if list_:
        for inv in Invariant:
            click.echo(f"{inv.value:<22} {MEANING[inv]}")
        return
    if incremental and since is not None:
        raise click.UsageError("give at most one of --since and --incremental")
    try:
        chosen = parse(list(invariants))
    except BadRequest as exc:
        raise click.BadParameter(exc.message, param_hint="INVARIANT") from None
    report = audit.run(current(), chosen, full=since is None and not incremental, since=since)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        for c in report.checked:
            verdict = "holds" if not c.found else f"VIOLATED ({len(c.found)})"
            click.echo(f"{c.invariant.value:<22} {verdict:<14} {c.seconds * 1000:8.1f} ms")
            for f in c.found:
                problems = [str(r["problem"]) for r in f.rows if r.get("problem")]
                click.echo(
                    f"  {f.subject}: {'; '.join(problems) or MEANING[Invariant(f.invariant)]}"
                )
                if f.trace_id:
                    click.echo(f"    trace {f.trace_id}")
    if report.violations:
        raise click.exceptions.Exit(1)


_ACTOR = click.option("--actor", default=getpass.getuser, show_default="current user")


@main.group("repair")
def repair() -> None:
    """Repairs of invariant violations: proposed with a preview, applied only when a
    second operator approves, audited, and checked again afterwards. Only repairs that
    cannot double an effect exist: reclaiming expired leases, writing a missing delivery
    as held (sent only once an operator releases it: inbox endpoints resume), releasing a
    lane held by a block whose event no longer blocks it."""


@repair.command("open")
@click.option("--json", "as_json", is_flag=True)
def repair_open(as_json: bool) -> None:
    """The open violations, with the rows each names."""
    found = audit.open_violations(current())
    if as_json:
        click.echo(json.dumps([v.public() for v in found], indent=2, default=str))
        return
    for v in found:
        click.echo(
            f"{v.id:<6} {v.invariant:<22} {v.subject}  since {v.first_seen_at:%Y-%m-%d %H:%M}"
        )


@repair.command("propose")
@click.argument("violation_id", type=click.IntRange(min=1, max=2**63 - 1))
@_ACTOR
def repair_propose(violation_id: int, actor: str) -> None:
    """Propose the safe repair of an open violation; prints its preview."""
    r = audit.propose(current(), actor, violation_id)
    click.echo(json.dumps(r.public(), indent=2, default=str))


@repair.command("approve")
@click.argument("repair_id")
@_ACTOR
def repair_approve(repair_id: str, actor: str) -> None:
    """Approve a repair another operator proposed: it runs, then its invariant is checked
    again; the exit status is 1 when the violation is still there."""
    r = audit.review(current(), actor, repair_id, approve=True)
    click.echo(json.dumps(r.public(), indent=2, default=str))
    if not (r.result or {}).get("holds_after"):
        raise click.exceptions.Exit(1)


@repair.command("reject")
@click.argument("repair_id")
@_ACTOR
def repair_reject(repair_id: str, actor: str) -> None:
    """Reject a proposed repair: it never runs."""
    r = audit.review(current(), actor, repair_id, approve=False)
    click.echo(json.dumps(r.public(), indent=2, default=str))
