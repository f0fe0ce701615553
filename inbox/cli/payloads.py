"""``inbox payloads`` (seal the rows stored in clear, watch it) and ``inbox erase``."""

from __future__ import annotations

import getpass

import click

from inbox.cli.base import current, main
from inbox.cli.output import emit_json, fields, json_option, table
from inbox.infra import keyring as kr
from inbox.services import erasure, sealing_job
from inbox.services.operations import Actor

_ACTOR = click.option("--actor", default=getpass.getuser, show_default="current user")


@main.group()
def payloads() -> None:
    """Payloads (raw bodies and stored headers) are sealed at rest under per-tenant or
    per-subject data keys wrapped by INBOX_KEK (`inbox secrets reencrypt` rewraps them)."""


@payloads.command("seal")
@click.option(
    "--batch", default=sealing_job.BATCH, show_default=True, type=click.IntRange(1, 100_000)
)
def payloads_seal(batch: int) -> None:
    """Seal every payload stored in clear, a batch per transaction. Safe to stop at any
    moment and to run again: it resumes after the last batch it committed."""
    kr.keyring()  # KeyMissing (INBOX_KEK unset) before any work
    rt = current()
    done = 0

    def said(n: int) -> None:
        nonlocal done
        done += n
        p = sealing_job.progress(rt)
        click.echo(f"sealed {done} this run, {p.sealed} in all; {p.remaining} left")

    sealing_job.run(rt, batch, said)


@payloads.command("status")
@json_option
def payloads_status(as_json: bool) -> None:
    """How far the sealing job is: rows sealed, rows still in clear."""
    p = sealing_job.progress(current())
    shown = {
        "sealed": p.sealed,
        "remaining": p.remaining,
        "next_id": p.next_id,
        "started_at": p.started_at,
        "updated_at": p.updated_at,
        "finished_at": p.finished_at,
    }
    if as_json:
        emit_json(shown)
        return
    fields([(k.replace("_", " "), v) for k, v in shown.items()])


@main.command("erase")
@click.option("--tenant", help="The tenant whose payloads are erased.")
@click.option("--subject", help="With --tenant: erase only this subject's payloads (now).")
@click.option("--reason", help="Why (the request's reference): audited.")
@click.option("--approve", "approve", metavar="ERA", help="Confirm a tenant-wide erasure.")
@click.option("--reject", "reject", metavar="ERA", help="Reject a tenant-wide erasure.")
@click.option("--list", "listing", is_flag=True, help="The newest erasures.")
@_ACTOR
@json_option
def erase(
    tenant: str | None,
    subject: str | None,
    reason: str | None,
    approve: str | None,
    reject: str | None,
    listing: bool,
    actor: str,
    as_json: bool,
) -> None:
    """Erase payloads by deleting their keys from the key store (INBOX_KEYSTORE_URL): every
    copy of the inbox's database (backups and dumps too) no longer opens them; the key
    store's own backups keep a key until they expire (docs/how-to/erase.md). Rows, digests,
    verdicts and audit entries stay. `--tenant T --subject S` erases one subject at once;
    `--tenant T` alone asks, and another operator confirms with `--approve ERA`. Refused
    (409) while a legal hold covers them. An erasure the key store did not answer stays
    `destroying` and is finished by the next one (or the beat's hourly upkeep)."""
    rt = current()
    if listing:
        found = erasure.listing(rt, None)
        if as_json:
            emit_json([x.public() for x in found])
            return
        table(
            ["id", "tenant", "scope", "status", "requested_by", "approved_by", "done_at", "events"],
            [
                (
                    x.public_id,
                    x.tenant,
                    x.scope,
                    x.status,
                    x.requested_by,
                    x.approved_by,
                    x.done_at,
                    x.events,
                )
                for x in found
            ],
        )
        return
    if approve or reject:
        if tenant or subject:
            raise click.UsageError("--approve and --reject take no --tenant or --subject")
        done = erasure.review(rt, Actor(actor), approve or reject or "", approve=bool(approve))
    else:
        if not tenant or not reason:
            raise click.UsageError("give --tenant T --reason R (and --subject S for one subject)")
        done = erasure.erase(rt, Actor(actor), tenant, reason, subject=subject)
    if as_json:
        emit_json(done.public())
        return
    fields([(k.replace("_", " "), v) for k, v in done.public().items()])
    if done.status == "awaiting_approval":
        click.echo(
            f"a tenant-wide erasure: another operator confirms it with\n"
            f"  inbox erase --approve {done.public_id} --actor NAME"
        )
