"""``inbox events export`` and ``inbox evidence``: bundles an auditor can check offline."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from pathlib import Path

import click

from inbox.cli.base import current, main, settings
from inbox.cli.events import events
from inbox.domain import evidence as bundle
from inbox.services import evidence, reports
from inbox.store.reads.listing import Filter

_FILTERS = {f.name for f in fields(Filter)} - {"endpoint", "untyped"}


def _filter(given: tuple[str, ...]) -> Filter:
    values: dict[str, object] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or name not in _FILTERS or not value:
            raise click.BadParameter(
                f"{item!r}: expected NAME=VALUE, NAME one of {', '.join(sorted(_FILTERS))}",
                param_hint="--filter",
            )
        if name in ("since", "until"):
            try:
                values[name] = datetime.fromisoformat(value)
            except ValueError:
                raise click.BadParameter(
                    f"{item!r}: not an ISO date", param_hint="--filter"
                ) from None
        else:
            values[name] = value
    return Filter(**values)  # type: ignore[arg-type]


@events.command("export")
@click.argument("public_ids", nargs=-1)
@click.option("--filter", "filters", multiple=True, help="NAME=VALUE, e.g. source=stripe")
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="at most this many (--filter)",
)
@click.option("--out", default=".", show_default=True, help="the directory to write into")
def events_export(
    public_ids: tuple[str, ...], filters: tuple[str, ...], limit: int, out: str
) -> None:
    """Write one signed evidence bundle per event (a directory OUT/EVENT_ID)."""
    if bool(public_ids) == bool(filters):
        raise click.UsageError("give event ids or --filter, not both and not neither")
    key = evidence.load_key(settings().evidence_key_file)
    match = _filter(filters) if filters else None
    written = evidence.export_events(
        current(), Path(out), key, ids=public_ids, match=match, limit=limit
    )
    for path in written:
        click.echo(path)
    click.echo(
        f"{len(written)} bundle(s), signed by key {bundle.key_id(key.public_key())}", err=True
    )


@main.group("evidence")
def evidence_group() -> None:
    """Export keys, and offline checks of evidence bundles."""


@evidence_group.command("keygen")
@click.argument("path")
def keygen(path: str) -> None:
    """Make an Ed25519 export key at PATH (and its public key at PATH.pub)."""
    public = evidence.keygen(Path(path))
    click.echo(f"export key {bundle.key_id(public)}: {path} (public key {path}.pub)")
    click.echo(f"export INBOX_EVIDENCE_KEY_FILE={path}")


@evidence_group.command("reports")
@click.option("--out", default=".", show_default=True, help="the directory to write into")
@click.option("--kind", type=click.Choice(["prune", "erasure"]), help="only this kind")
def reports_export(out: str, kind: str | None) -> None:
    """Write one signed bundle per retention report (each prune with its day drops, each
    erasure: what went, by which rule or request, what holds kept) as OUT/REPORT_ID; check
    one with `inbox evidence verify OUT/REPORT_ID`. Reports already there are kept."""
    key = evidence.load_key(settings().evidence_key_file)
    written = reports.export_all(current(), Path(out), key, kind)
    for path in written:
        click.echo(path)
    click.echo(f"{len(written)} report(s) written", err=True)


@evidence_group.command("verify")
@click.argument("path")
@click.option("--public-key", help="the export key's public PEM (PATH.pub of keygen)")
@click.option("--secret", help="the source's secret: re-verify the provider's signature")
@click.option("--secret-file", help="the source's secret, read from this file")
def verify(path: str, public_key: str | None, secret: str | None, secret_file: str | None) -> None:
    """Check a bundle (an event's, or a retention report's) offline: every digest, the
    manifest's signature, and (given the source's secret) the provider's signature over
    the stored bytes."""
    if secret is not None and secret_file is not None:
        raise click.UsageError("give --secret or --secret-file, not both")
    if secret_file is not None:
        secret = evidence.read_secret(Path(secret_file))
    files = evidence.load(Path(path))
    pinned = evidence.load_public(Path(public_key)) if public_key is not None else None
    try:
        checked = bundle.check(files, pinned)
        scheme = bundle.reverify(files, secret) if secret is not None else None
    except bundle.EvidenceError as exc:
        raise click.ClickException(f"{path}: NOT VERIFIED: {exc}") from None
    what = "report" if checked.event.startswith("rpt_") else "event"
    click.echo(f"{path}: verified: {what} {checked.event}, every part matches its digest")
    how = "the given key" if checked.pinned else "the key in the bundle (give --public-key)"
    click.echo(f"signed by export key {checked.key_id}, checked against {how}")
    if scheme is not None:
        click.echo(f"the provider's signature verifies ({scheme}) over the stored bytes")
