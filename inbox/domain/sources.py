"""A source's options: one provider endpoint of one tenant, and how to read its events.

Pure: validated with marshmallow, stored as JSON in ``sources.options``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from inbox.domain.bodyschema import spec_errors
from inbox.domain.errors import BadRequest
from inbox.domain.filters import SOURCE_VARIABLES
from inbox.domain.filters import check as check_filter
from inbox.domain.signatures import RecipeError, parse_recipe


class _ReconcileSchema(Schema):
    """Where and how to ask the provider what it sent (docs/how-to/reconcile.md)."""

    fetcher = fields.String(required=True, validate=validate.OneOf(["stripe", "github"]))
    # A file holding the API key or token: the credential itself is never stored here.
    credentials = fields.String(required=True, validate=validate.Regexp(r"^/\S+$"))
    api_base = fields.String(validate=validate.Regexp(r"^https?://[^/\s]+(/\S*)?$"))
    # GitHub: owner/repo/HOOK_ID for a repository hook, orgs/ORG/HOOK_ID for an org hook.
    hook = fields.String(validate=validate.Regexp(r"^[\w.-]+/[\w.-]+/\d+$"))
    every_minutes = fields.Integer(validate=validate.Range(min=1, max=7 * 24 * 60))

    @validates_schema
    def _hook_for_github(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("fetcher") == "github" and not data.get("hook"):
            raise ValidationError("the github fetcher needs hook: owner/repo/ID or orgs/ORG/ID")


class _OptionsSchema(Schema):
    tolerance = fields.Integer(validate=validate.Range(min=1, max=86400))
    max_body_bytes = fields.Integer(validate=validate.Range(min=1, max=64 * 1024 * 1024))
    header = fields.String(validate=validate.Length(min=1, max=100))
    public_url = fields.String(validate=validate.Regexp(r"^https?://[^/\s]+$"))
    event_type_path = fields.String(validate=validate.Length(min=1))
    event_id_path = fields.String(validate=validate.Length(min=1))
    business_key_paths = fields.List(fields.String(validate=validate.Length(min=1)))
    # The account or person a body is about: its payload is sealed under that subject's
    # own key, erased alone (inbox.domain.erasure); without it, under the tenant's key.
    subject_path = fields.String(validate=validate.Length(min=1))
    redact_paths = fields.List(fields.String(validate=validate.Length(min=1)))
    require_idempotency_key = fields.Boolean()
    # A delivery with no Idempotency-Key and no provider id is keyed by its body's digest
    # (default: the scheme's), or by the digest of these fields' values.
    body_identity = fields.Boolean()
    identity_paths = fields.List(
        fields.String(validate=validate.Length(min=1)), validate=validate.Length(min=1)
    )
    max_attempts = fields.Integer(validate=validate.Range(min=1, max=100))
    playbook = fields.String(validate=validate.Length(min=1))
    serialize_by_business_key = fields.Boolean()
    # An ordered source's lane, instead of its business key (inbox.domain.lanekeys): JSON
    # paths over the body (``headers.NAME``: a header), or a CEL expression over both.
    lane_key_paths = fields.List(
        fields.String(validate=validate.Length(min=1)), validate=validate.Length(min=1)
    )
    lane_key = fields.String(validate=validate.Length(min=1, max=4096))
    key_ttl_hours = fields.Integer(validate=validate.Range(min=1))
    retention_days = fields.Integer(validate=validate.Range(min=1))
    # Past this many requests a second (with bursts of up to rate_limit_burst): 429.
    rate_limit_per_second = fields.Float(validate=validate.Range(min=0.001, max=1_000_000))
    rate_limit_burst = fields.Integer(validate=validate.Range(min=1, max=1_000_000))
    # A marshmallow-style field spec the body must satisfy ({"name": "str", ...}).
    body_schema = fields.Dict(keys=fields.String(), values=fields.String())
    # Stale events (inbox.domain.ordering): the provider's own event time, or version.
    occurred_at_path = fields.String(validate=validate.Length(min=1))
    version_path = fields.String(validate=validate.Length(min=1))

    @validates_schema
    def _one_lane_key(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("lane_key") and data.get("lane_key_paths"):
            raise ValidationError("give lane_key or lane_key_paths, not both")
        named = data.get("lane_key") or data.get("lane_key_paths")
        if named and not data.get("serialize_by_business_key"):
            raise ValidationError(
                "lane_key and lane_key_paths name an ordered source's lanes: they need"
                " serialize_by_business_key"
            )

    @validates_schema
    def _one_order(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("occurred_at_path") and data.get("version_path"):
            raise ValidationError("give occurred_at_path or version_path, not both")
        named = data.get("occurred_at_path") or data.get("version_path")
        if named and not data.get("business_key_paths"):
            raise ValidationError(
                "occurred_at_path and version_path compare events with the same business key:"
                " they need business_key_paths"
            )

    # An operator's own provider, for scheme ``recipe`` (docs/recipes.md).
    recipe = fields.Dict(keys=fields.String())
    # The provider's own list of what it sent, fetched on a schedule to fill gaps.
    reconcile = fields.Nested(_ReconcileSchema)
    # A CEL expression over body and headers: events it is not true for are stored as
    # filtered and never run (inbox.domain.filters, docs/reference/filters.md).
    filter = fields.String()


OPTION_NAMES: tuple[str, ...] = tuple(sorted(_OptionsSchema().fields))


def _flat(value: object) -> str:
    if isinstance(value, list):
        return " ".join(_flat(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_flat(v)}" for k, v in value.items())
    return str(value)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    tolerance: int = 300
    max_body_bytes: int | None = None  # None: the process-wide default
    header: str | None = None
    public_url: str | None = None
    event_type_path: str | None = None
    event_id_path: str | None = None
    business_key_paths: tuple[str, ...] = ()
    subject_path: str | None = None
    redact_paths: tuple[str, ...] = ()
    require_idempotency_key: bool = False
    body_identity: bool | None = None  # None: the scheme's default
    identity_paths: tuple[str, ...] = ()
    max_attempts: int = 5
    playbook: str | None = None
    serialize_by_business_key: bool = False
    lane_key_paths: tuple[str, ...] = ()  # () and no lane_key: the business key is the lane
    lane_key: str | None = None  # a CEL expression over body and headers
    key_ttl_hours: int | None = None  # None: the process-wide default
    retention_days: int = 30
    body_schema: dict[str, str] = field(default_factory=dict)
    occurred_at_path: str | None = None
    version_path: str | None = None
    recipe: dict[str, Any] | None = None
    rate_limit_per_second: float | None = None  # None: no limit
    rate_limit_burst: int | None = None  # None: one second's worth, at least 1
    reconcile: dict[str, Any] | None = None  # None: no gap filling from the provider
    filter: str | None = None  # a CEL expression (inbox.domain.filters); None: all run

    @property
    def burst(self) -> int:
        if self.rate_limit_burst is not None:
            return self.rate_limit_burst
        return max(1, int(self.rate_limit_per_second or 1))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, check_schema: bool = True) -> SourceOptions:
        """Validated options. ``check_schema=False`` for rows already stored: a body schema
        stored before it was checked here still loads (its events quarantine, as before)."""
        unknown = sorted(set(raw) - set(OPTION_NAMES))
        if unknown:
            names = ", ".join(repr(u) for u in unknown)
            raise BadRequest(
                f"Unknown source option {names}. Valid options: {', '.join(OPTION_NAMES)}.",
                fields={u: "unknown option" for u in unknown},
            )
        try:
            data = _OptionsSchema().load(raw)
        except ValidationError as exc:
            messages = exc.messages if isinstance(exc.messages, dict) else {"_": exc.messages}
            detail = "; ".join(f"{k}: {_flat(v)}" for k, v in sorted(messages.items()))
            raise BadRequest(
                f"Invalid source option: {detail.rstrip('.')}.", fields=messages
            ) from exc
        schema_problems = spec_errors(data.get("body_schema", {})) if check_schema else {}
        if schema_problems:
            detail = "; ".join(f"{k}: {v}" for k, v in sorted(schema_problems.items()))
            raise BadRequest(f"Invalid body_schema: {detail}.", fields=schema_problems)
        for name in ("business_key_paths", "redact_paths", "identity_paths", "lane_key_paths"):
            if name in data:
                data[name] = tuple(data[name])
        if "recipe" in data and check_schema:  # a stored row loads; its requests get 401
            try:
                parse_recipe(data["recipe"])
            except RecipeError as exc:
                raise BadRequest(
                    f"Invalid recipe: {exc.field} {exc.message}.",
                    fields={"recipe": {exc.field: [exc.message]}},
                ) from exc
        if "filter" in data and check_schema:  # a stored row loads (compiled when used)
            check_filter(data["filter"], SOURCE_VARIABLES, "filter")
        if "lane_key" in data and check_schema:
            check_filter(data["lane_key"], SOURCE_VARIABLES, "lane_key")
        if "header" in data:
            data["header"] = data["header"].lower()
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Only the options that differ from the defaults."""
        default = SourceOptions()
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if value != getattr(default, key):
                out[key] = list(value) if isinstance(value, tuple) else value
        return out
