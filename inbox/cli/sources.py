"""``inbox migrate``, ``inbox tenants`` and ``inbox sources``."""

from __future__ import annotations

import json
import secrets as pysecrets
from typing import Any

import click

from inbox.cli.base import current, main, settings, split_ref
from inbox.cli.output import emit_json, fields, json_option, table
from inbox.cli.params import Named
from inbox.cli.playbooks import check as check_playbook
from inbox.domain.fairness import MAX_IN_FLIGHT, MAX_WEIGHT
from inbox.domain.records import Source, Tenant
from inbox.domain.signatures import SCHEMES, Scheme
from inbox.domain.sources import OPTION_NAMES, SourceOptions
from inbox.infra import config
from inbox.services import admin, runtime


@main.command()
def migrate() -> None:
    """Apply the database migrations, in one transaction.

    On INBOX_MIGRATE_DATABASE_URL when set, else DATABASE_URL. A database at head is left
    as it is; a revision that fails leaves it as it was. Upgrading a running deployment:
    docs/how-to/upgrade.md.
    """
    click.echo(f"migrated to head ({runtime.migrate(settings().migration_url)})")


SCHEME = Named(sorted(SCHEMES), "scheme", "inbox sources schemes")


@main.group()
def tenants() -> None:
    """Tenants: each owns sources, events and endpoints."""


@tenants.command("create")
@click.argument("name")
def tenants_create(name: str) -> None:
    """Create a tenant: the first part of its sources' URLs (/hooks/<tenant>/<source>)."""
    t = admin.create_tenant(current(), name)
    click.echo(f"tenant {t.name} created (id {t.id})")


def _tenant_record(t: Tenant) -> dict[str, Any]:
    return {
        "name": t.name,
        "disabled": t.disabled,
        "max_in_flight": t.max_in_flight,
        "weight": t.weight,
    }


@tenants.command("list")
@json_option
def tenants_list(as_json: bool) -> None:
    """Every tenant, whether it is enabled, its in-flight cap and its weight."""
    rows = admin.tenant_settings(current())
    if as_json:
        emit_json([_tenant_record(t) for t in rows])
        return
    table(
        ["tenant", "enabled", "max in flight", "weight"],
        [(t.name, not t.disabled, t.max_in_flight or "-", t.weight) for t in rows],
    )


@tenants.command("set")
@click.argument("name")
@click.option(
    "--max-in-flight",
    type=click.IntRange(1, MAX_IN_FLIGHT),
    help="At most this many of the tenant's events run at once, across all workers.",
)
@click.option("--no-cap", is_flag=True, help="Remove the in-flight cap.")
@click.option(
    "--weight",
    type=click.IntRange(1, MAX_WEIGHT),
    help="The tenant's share of each claim against the others' weights (default 1).",
)
@json_option
def tenants_set(
    name: str, max_in_flight: int | None, no_cap: bool, weight: int | None, as_json: bool
) -> None:
    """Fairness for one tenant: an in-flight cap and a weight.

    Each claim gives every tenant up to its weight's share of the batch first (a tenant of
    weight 3 gets three times the share of one of weight 1), then fills the rest oldest
    first from tenants without a cap. A capped tenant never has more than its cap of events
    running at once, however deep its backlog.
    """
    if no_cap and max_in_flight is not None:
        raise click.UsageError("Give --max-in-flight or --no-cap, not both.")
    t = admin.set_fairness(current(), name, max_in_flight, weight, no_cap=no_cap)
    if as_json:
        emit_json(_tenant_record(t))
        return
    cap = "no cap" if t.max_in_flight is None else f"max {t.max_in_flight} in flight"
    click.echo(f"tenant {t.name}: {cap}, weight {t.weight}")


def _public_base() -> str:
    return config.settings().public_base


def _record(src: Source) -> dict[str, Any]:
    """What an operator may see of a source: never its secrets, only how many are active."""
    return {
        "source": f"{src.tenant}/{src.name}",
        "url": f"{_public_base()}{src.path}",
        "scheme": src.scheme,
        "enabled": src.enabled,
        "active_secrets": len(src.secrets),
        "options": src.options.to_dict(),
    }


def _show(src: Source, as_json: bool = False) -> None:
    record = _record(src)
    if as_json:
        emit_json(record)
        return
    recipe = f" ({src.options.recipe.get('name')})" if src.options.recipe else ""
    fields(
        [
            ("source", record["source"]),
            ("url", record["url"]),
            ("scheme", f"{src.scheme}{recipe}  ({SCHEMES[src.scheme].summary})"),
            ("enabled", src.enabled),
            ("secrets", f"{len(src.secrets)} active"),
            ("options", json.dumps(record["options"], sort_keys=True)),
        ]
    )
    if getattr(SCHEMES[src.scheme], "insecure", False):
        click.secho("WARNING  scheme 'none': anyone who knows the URL can post events.", fg="red")


@main.group()
def sources() -> None:
    """Sources: one provider endpoint of one tenant, at /hooks/<tenant>/<source>."""


_FILTER_HELP = (
    "A CEL expression over body and headers; events it is not true for are stored as"
    " filtered and never run (docs/reference/filters.md)."
)
_OPTION_HELP = f"A source option, e.g. --option tolerance=600 (valid: {', '.join(OPTION_NAMES)})."


@sources.command("create")
@click.option("--tenant", required=True, help="The tenant it belongs to (inbox tenants create).")
@click.option("--name", required=True, help="Its name in the URL: /hooks/<tenant>/<name>.")
@click.option(
    "--scheme",
    required=True,
    type=SCHEME,
    help="How deliveries are verified (inbox sources schemes lists them).",
)
@click.option("--secret", "secrets", multiple=True, help="Repeat for several active secrets.")
@click.option("--option", "options", multiple=True, metavar="KEY=JSON", help=_OPTION_HELP)
@click.option("--filter", "filter_", metavar="CEL", help=_FILTER_HELP)
@json_option
def sources_create(
    tenant: str,
    name: str,
    scheme: str,
    secrets: tuple[str, ...],
    options: tuple[str, ...],
    filter_: str | None,
    as_json: bool,
) -> None:
    """Create a source and print its URL."""
    if scheme != "none" and not secrets:
        raise click.UsageError("--secret is required (scheme 'none' is the only exception).")
    if scheme == "recipe" and "recipe" not in dict(o.partition("=")[::2] for o in options):
        raise click.UsageError("--scheme recipe needs --option recipe=@FILE (docs/recipes.md).")
    raw = _parse_options(options)
    if filter_ is not None:
        raw["filter"] = filter_
    opts = SourceOptions.from_dict(raw)
    check_playbook(opts.playbook)
    src = admin.create_source(current(), tenant, name, scheme, list(secrets), opts)
    _show(src, as_json)


def _parse_options(pairs: tuple[str, ...]) -> dict[str, object]:
    """KEY=JSON pairs; KEY=@FILE reads the JSON from a file (a recipe, say)."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise click.UsageError(f"--option {pair!r}: expected KEY=VALUE")
        if raw.startswith("@"):
            try:
                with open(raw[1:], encoding="utf-8") as fh:
                    raw = fh.read()
            except OSError as exc:
                raise click.UsageError(f"--option {key}: cannot read {raw[1:]}: {exc}") from None
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


@sources.command("update")
@click.argument("ref", metavar="TENANT/SOURCE")
@click.option("--option", "options", multiple=True, metavar="KEY=JSON", help=_OPTION_HELP)
@click.option("--filter", "filter_", metavar="CEL", help=_FILTER_HELP)
@click.option("--unset", multiple=True, metavar="KEY", help="Back to the option's default.")
@click.option("--playbook", help="The playbook that runs this source's events.")
@click.option("--body-schema", metavar="JSON", help='e.g. \'{"account": "str", "n": "int?"}\'')
@click.option("--enable/--disable", "enabled", default=None, help="Accept events, or not (404).")
@json_option
def sources_update(
    ref: str,
    options: tuple[str, ...],
    filter_: str | None,
    unset: tuple[str, ...],
    playbook: str | None,
    body_schema: str | None,
    enabled: bool | None,
    as_json: bool,
) -> None:
    """Change a source's options, playbook, body schema, or whether it is enabled.

    Every change is validated as at create: an unknown option is named with the valid
    ones, and a body schema with an unknown type is refused before any event meets it.
    """
    changes = _parse_options(options)
    if filter_ is not None:
        changes["filter"] = filter_
    if playbook is not None:
        changes["playbook"] = playbook
    if body_schema is not None:
        try:
            changes["body_schema"] = json.loads(body_schema)
        except ValueError:
            raise click.BadParameter("not JSON", param_hint="--body-schema") from None
    unknown = sorted(set(unset) - set(OPTION_NAMES))
    if unknown:
        raise click.BadParameter(
            f"unknown option {', '.join(unknown)}; valid: {', '.join(OPTION_NAMES)}",
            param_hint="--unset",
        )
    if not changes and not unset and enabled is None:
        raise click.UsageError("nothing to change: give --option, --unset, --playbook, ...")
    tenant, name = split_ref(ref)
    src = admin.update_source(current(), tenant, name, changes, unset, enabled, check_playbook)
    _show(src, as_json)


def _where(locations: tuple[str, ...]) -> str:
    """Where a value comes from, first places first (``--json`` lists them all)."""
    if not locations:
        return "-"
    more = f" (+{len(locations) - 2} more)" if len(locations) > 2 else ""
    return " or ".join(locations[:2]) + more


def _identity(scheme: Scheme) -> dict[str, Any]:
    """What a scheme's deliveries are deduplicated by when no Idempotency-Key is sent."""
    if scheme.event_id_from:
        return {"kind": "event_id", "from": list(scheme.event_id_from)}
    if scheme.body_identity:
        return {"kind": "body", "from": ["sha256(body)"]}
    return {"kind": "idempotency_key", "from": ["header:idempotency-key"]}


def _dedup(scheme: Scheme) -> str:
    identity = _identity(scheme)
    if identity["kind"] == "event_id":
        return _where(scheme.event_id_from)
    if identity["kind"] == "body":
        return "sha256(body)"
    return "Idempotency-Key only"


@sources.command("schemes")
@json_option
def sources_schemes(as_json: bool) -> None:
    """Every scheme, one per line: the answer an accepted delivery (and every copy of it)
    gets, what deliveries are deduplicated by, where the event type comes from, what it
    verifies.

    An Idempotency-Key header, when sent, is the dedup key on every scheme; the
    event_id_path, event_type_path, body_identity and identity_paths options override what
    is shown. ``--json`` adds where each answer code is documented and the body fields the
    provider restamps between retries (left out when a copy is compared).
    """
    names = sorted(SCHEMES)
    if as_json:
        emit_json(
            [
                {
                    "scheme": n,
                    "answer": SCHEMES[n].accept_status,
                    "answer_docs": SCHEMES[n].accept_docs,
                    "identity": _identity(SCHEMES[n]),
                    "restamped": list(SCHEMES[n].restamped),
                    "verifies": SCHEMES[n].summary,
                    "event_id": list(SCHEMES[n].event_id_from),
                    "event_type": list(SCHEMES[n].event_type_from),
                    "timestamped": SCHEMES[n].timestamped,
                }
                for n in names
            ]
        )
        return
    rows = [
        (
            n,
            SCHEMES[n].accept_status,
            _dedup(SCHEMES[n]),
            _where(SCHEMES[n].event_type_from),
            SCHEMES[n].summary,
        )
        for n in names
    ]
    table(["scheme", "answer", "dedup key", "event type", "verifies"], rows)


@sources.command("list")
@click.option("--tenant", help="Only this tenant's sources.")
@json_option
def sources_list(tenant: str | None, as_json: bool) -> None:
    """Every source: its scheme, whether it is enabled, how many secrets, its URL."""
    rows = admin.list_sources(current(), tenant)
    if as_json:
        emit_json([_record(s) for s in rows])
        return
    table(
        ["source", "scheme", "enabled", "secrets", "url"],
        [
            (f"{s.tenant}/{s.name}", s.scheme, s.enabled, len(s.secrets), _public_base() + s.path)
            for s in rows
        ],
    )


@sources.command("show")
@click.argument("ref", metavar="TENANT/SOURCE")
@json_option
def sources_show(ref: str, as_json: bool) -> None:
    """One source: its URL, scheme, options and how many secrets are active (not them)."""
    _show(admin.get_source(current(), *split_ref(ref)), as_json)


@sources.command("rotate")
@click.argument("ref", metavar="TENANT/SOURCE")
@click.option(
    "--secret", help="The new secret (generated when omitted); with --finish, the one to keep."
)
@click.option("--finish", is_flag=True, help="End the overlap: keep only --secret.")
def sources_rotate(ref: str, secret: str | None, finish: bool) -> None:
    """Add a secret (both verify during the overlap), or --finish --secret S to drop the others."""
    tenant, name = split_ref(ref)
    if finish:
        if not secret:
            raise click.UsageError("--finish needs --secret (the one to keep).")
        n = admin.keep_source_secret(current(), tenant, name, secret)
        click.echo(f"revoked {n} secret(s)")
        return
    new = admin.add_source_secret(
        current(), tenant, name, lambda src: secret or _generate_secret(src.scheme)
    )
    click.echo(f"added secret {new}" if not secret else "added secret")


def _generate_secret(scheme: str) -> str:
    import base64

    raw = pysecrets.token_bytes(24)
    if scheme in ("standard", "clerk", "resend"):  # Svix-style secrets: whsec_ + base64
        return "whsec_" + base64.b64encode(raw).decode()
    return raw.hex()


def _set_enabled(ref: str, enabled: bool) -> None:
    admin.set_source_enabled(current(), *split_ref(ref), enabled)
    click.echo("enabled" if enabled else "disabled")


@sources.command("disable")
@click.argument("ref", metavar="TENANT/SOURCE")
def sources_disable(ref: str) -> None:
    """Stop accepting events (the URL answers 404)."""
    _set_enabled(ref, False)


@sources.command("enable")
@click.argument("ref", metavar="TENANT/SOURCE")
def sources_enable(ref: str) -> None:
    """Accept events again at its URL."""
    _set_enabled(ref, True)
