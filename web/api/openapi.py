"""``/api/v1/openapi.json``: the OpenAPI 3.1 description of every admin API route.

A test checks that every ``/api/v1`` rule Flask knows is described here.
"""

from __future__ import annotations

from typing import Any

from inbox.domain.approval import BulkStatus
from inbox.domain.circuit import CIRCUIT_STATES
from inbox.domain.endpoint_health import ENDPOINT_STATES
from inbox.domain.holds import SCOPES
from inbox.domain.states import DELIVERY_STATES, STATES
from inbox.services import bulk
from web.api.blueprint import api
from web.common import DEFAULT_LIMIT, MAX_LIMIT

_ERR = {"$ref": "#/components/responses/Error"}
_OBJ: dict[str, Any] = {"type": "object", "additionalProperties": True}


def _q(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string", **schema},
    }


def _ok(schema: dict[str, Any], status: str = "200", description: str = "OK") -> dict[str, Any]:
    return {
        status: {"description": description, "content": {"application/json": {"schema": schema}}}
    }


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _ERR for c in (401, *codes)}


def _json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    """A JSON request body of ``schema``."""
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_PATH_ID = {"name": "public_id", "in": "path", "required": True, "schema": {"type": "string"}}
_PATH_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_TIME = {"format": "date-time"}
_COMMON = [
    _q("tenant", "Only this tenant (a tenant-scoped token sees its own tenant only)."),
    _q("type", "Only this event type."),
    _q("since", "Created/received at or after this ISO 8601 time.", **_TIME),
    _q("until", "Created/received before this ISO 8601 time.", **_TIME),
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    },
    _q("cursor", "The next_cursor of the previous page (opaque)."),
]


def _page(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["items", "next_cursor"],
        "properties": {
            "items": {"type": "array", "items": _ref(item)},
            "next_cursor": {"type": ["string", "null"], "description": "null on the last page"},
        },
    }


def _listing(summary: str, item: str, extra: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": extra + _COMMON,
            "responses": {**_ok(_page(item)), **_errors(400)},
        }
    }


def _detail(summary: str, schema: str) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": [_PATH_ID],
            "responses": {**_ok(_ref(schema)), **_errors(404)},
        }
    }


def _action(summary: str, schema: dict[str, Any], *codes: int) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "parameters": [_PATH_ID],
            "responses": {**_ok(schema), **_errors(403, 404, *codes)},
        }
    }


_REPLAYED = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "state": {"type": "string"},
        "replayed": {"type": "boolean"},
    },
}

_SKIPPED = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "status": {"type": "string", "enum": ["skipped", "skip requested"]},
        "held": {"type": "integer", "description": "Events waiting behind it."},
        "reason": {"type": "string"},
        "requested_by": {"type": "string"},
    },
}

_TENANT = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "disabled": {"type": "boolean"},
        "max_in_flight": {"type": ["integer", "null"]},
        "weight": {"type": "integer"},
    },
}

_REDACTED = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "redacted": {"type": "boolean"},
        "already_redacted": {
            "type": "boolean",
            "description": "The body was gone before this request (nothing was written).",
        },
        "body_sha256": {"type": "string", "description": "Kept: the raw body's SHA-256."},
        "bytes_removed": {"type": "integer"},
    },
}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "fields": {
                        "type": "object",
                        "description": "a 400 for a body: what is wrong with each field",
                        "additionalProperties": True,
                    },
                },
                "additionalProperties": True,
            }
        },
    },
    "Event": {
        "type": "object",
        "properties": {
            "public_id": {"type": "string"},
            "tenant": {"type": "string"},
            "source": {"type": "string"},
            "event_type": {"type": ["string", "null"]},
            "state": {"type": "string", "enum": list(STATES)},
            "attempts": {"type": "integer"},
            "replay": {
                "type": "integer",
                "description": "0 for the original processing; each operator replay adds one.",
            },
            "received_at": {"type": "string", **_TIME},
            "finished_at": {"type": ["string", "null"], **_TIME},
            "outcome": {"type": ["string", "null"]},
            "last_error_class": {"type": ["string", "null"]},
            "duplicate_count": {"type": "integer"},
        },
    },
    "EventDetail": {
        **_OBJ,
        "description": "The event's columns (body as stored, after redaction; headers without"
        " credentials), with steps, conflicts, deliveries (with attempts_log) and audit."
        " replay: 0 for the original, N after the N-th operator replay (each step and delivery"
        " has its own); occurred_at or version: the provider's, for a source that names them;"
        " newer_event: for outcome stale, the newer completed event it yielded to;"
        " lane (an ordered source's event): held_behind and reason while a quarantined"
        " event of its lane holds it, blocking (events waiting) while it holds its lane.",
        "properties": {
            k: {"type": "array", "items": _OBJ}
            for k in ("steps", "conflicts", "deliveries", "audit")
        },
    },
    "Delivery": {
        "type": "object",
        "properties": {
            "public_id": {"type": "string"},
            "tenant": {"type": "string"},
            "endpoint": {"type": "string"},
            "url": {"type": "string"},
            "event_type": {"type": "string"},
            "event": {"type": ["string", "null"]},
            "state": {"type": "string", "enum": list(DELIVERY_STATES)},
            "replay": {
                "type": "integer",
                "description": "The event's replay number when the step that made it ran;"
                " sent as the webhook-replay header when above 0.",
            },
            "attempts": {"type": "integer"},
            "last_status": {"type": ["integer", "null"]},
            "last_error": {"type": ["string", "null"]},
            "created_at": {"type": "string", **_TIME},
            "finished_at": {"type": ["string", "null"], **_TIME},
        },
    },
    "DeliveryDetail": {
        **_OBJ,
        "properties": {k: {"type": "array", "items": _OBJ} for k in ("attempts_log", "audit")},
    },
    "BulkReplayRequest": {
        "type": "object",
        "required": ["kind"],
        "properties": {
            "kind": {"type": "string", "enum": list(bulk.KINDS)},
            "filter": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "tenant": {"type": "string"},
                    "source": {"type": "string", "description": "events only"},
                    "endpoint": {"type": "string", "description": "deliveries only"},
                    "state": {"type": "string", "enum": ["quarantined", "failed"]},
                    "type": {"type": "string"},
                    "since": {"type": "string", **_TIME},
                    "until": {"type": "string", **_TIME},
                },
            },
            "rate": {
                "type": "integer",
                "minimum": 1,
                "maximum": bulk.MAX_RATE,
                "default": bulk.DEFAULT_RATE,
                "description": "items a second",
            },
            "dry_run": {
                "type": "boolean",
                "default": False,
                "description": "Answer 200 with what the replay would do, per event and"
                " step (events only); nothing is written but the preview's audit row.",
            },
        },
    },
    "ReplayPreview": {
        "type": "object",
        "properties": {
            "dry_run": {"type": "boolean"},
            "matched": {"type": "integer"},
            "more": {"type": "boolean", "description": "More match than were planned."},
            "totals": {"type": "object", "additionalProperties": {"type": "integer"}},
            "events": {"type": "array", "items": _OBJ},
        },
    },
    "BulkReplayAccepted": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string"},
            "total": {"type": "integer"},
        },
    },
    "BulkReplay": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string"},
            "status": {"type": "string", "enum": [str(s) for s in BulkStatus]},
            "filter": _OBJ,
            "rate": {"type": "integer"},
            "actor": {"type": "string", "description": "The requesting token's name."},
            "reviewer": {
                "type": ["string", "null"],
                "description": "The second operator who approved or rejected the job.",
            },
            "review_note": {"type": ["string", "null"]},
            **{k: {"type": "integer"} for k in ("total", "done", "moved", "skipped")},
            **{
                k: {"type": ["string", "null"], **_TIME}
                for k in ("created_at", "started_at", "finished_at", "reviewed_at")
            },
        },
    },
    "LegalHold": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "tenant": {"type": "string"},
            "scope": {"type": "string", "enum": list(SCOPES)},
            "subject": {"type": "string"},
            "reason": {"type": "string"},
            "status": {"type": "string", "enum": ["active", "release requested", "released"]},
            "placed_by": {"type": "string"},
            "release_requested_by": {"type": ["string", "null"]},
            "released_by": {"type": ["string", "null"]},
            **{k: {"type": ["string", "null"], **_TIME} for k in ("placed_at", "released_at")},
        },
    },
    "EndpointState": {
        "type": "object",
        "properties": {
            "endpoint": {"type": "string"},
            "tenant": {"type": "string"},
            "state": {"type": "string", "enum": list(ENDPOINT_STATES)},
            "circuit": {"type": "string", "enum": list(CIRCUIT_STATES)},
            "circuit_changed_at": {"type": ["string", "null"], **_TIME},
            "disabled_reason": {"type": ["string", "null"]},
            "attempts_recent": {"type": "integer", "description": "In the last 15 minutes."},
            "failure_rate": {"type": "number", "description": "Of those, the share without 2xx."},
            "waiting": {"type": "integer", "description": "Pending or being sent."},
            "held": {"type": "integer", "description": "Kept while it is paused or disabled."},
            "held_oldest_age_seconds": {"type": "number"},
            "rate_per_second": {"type": ["number", "null"]},
            "max_in_flight": {"type": "integer"},
            "ordered": {
                "type": "boolean",
                "description": "One delivery in flight, the next once the previous is"
                " delivered or dead.",
            },
            "deleted_at": {"type": ["string", "null"], **_TIME},
        },
    },
    "EndpointDeleted": {
        "type": "object",
        "properties": {
            "endpoint": {"type": "string"},
            "deleted": {
                "type": "boolean",
                "description": "false (202): its discard awaits a second operator; the"
                " endpoint is disabled now and deleted when the discard is approved.",
            },
            "discard": {"oneOf": [{"$ref": "#/components/schemas/HeldDiscard"}, {"type": "null"}]},
        },
    },
    "EndpointChange": {
        "type": "object",
        "properties": {
            "endpoint": {"type": "string"},
            "sends": {"type": "boolean", "description": "Its deliveries are attempted now."},
            "held": {"type": "integer", "description": "Deliveries this change held."},
            "released": {"type": "integer", "description": "Held deliveries it released."},
        },
    },
    "HeldDiscard": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "endpoint": {"type": "string"},
            "reason": {"type": "string"},
            "requested_by": {"type": "string"},
            "held": {"type": "integer", "description": "Held deliveries it covers."},
            "status": {"type": "string", "enum": ["awaiting", "discarded", "withdrawn"]},
            "discarded": {"type": "integer"},
            "decided_by": {"type": ["string", "null"]},
            "delete_endpoint": {
                "type": "boolean",
                "description": "Asked by a delete: approving it deletes the endpoint.",
            },
        },
    },
    "BlockedLane": {
        "type": "object",
        "description": "A lane held by its quarantined event: nothing behind it runs until"
        " the event is replayed or skipped.",
        "properties": {
            "event": {"type": "string", "description": "The blocker's id (evt_...)."},
            "tenant": {"type": "string"},
            "source": {"type": "string"},
            "since": {"type": "string", **_TIME},
            "state": {"type": "string", "enum": ["blocked", "skip requested"]},
            "error_class": {"type": ["string", "null"]},
            "error_message": {"type": ["string", "null"]},
            "held": {"type": "integer", "description": "Events waiting behind it."},
            "skip_requested_by": {"type": ["string", "null"]},
            "skip_reason": {"type": ["string", "null"]},
        },
    },
    "Erasure": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "tenant": {"type": "string"},
            "scope": {"type": "string", "enum": ["subject", "tenant"]},
            "reason": {"type": "string"},
            "status": {
                "type": "string",
                "enum": ["awaiting_approval", "destroying", "done", "rejected"],
            },
            "requested_by": {"type": "string"},
            "approved_by": {"type": ["string", "null"]},
            "keys_destroyed": {"type": "integer"},
            "events": {"type": "integer", "description": "Events whose payload was erased."},
            **{k: {"type": ["string", "null"], **_TIME} for k in ("requested_at", "done_at")},
        },
    },
    "ErasureRequest": {
        "type": "object",
        "required": ["tenant", "reason"],
        "additionalProperties": False,
        "description": "With subject: erase that subject's payloads now; without: ask for a"
        " tenant-wide erasure, which another operator approves.",
        "properties": {
            "tenant": {"type": "string", "minLength": 1},
            "reason": {"type": "string"},
            "subject": {
                "type": ["string", "null"],
                "description": "The value at the source's subject_path.",
            },
        },
    },
    "LegalHoldRequest": {
        "type": "object",
        "required": ["tenant", "reason"],
        "additionalProperties": False,
        "description": "A tenant, plus at most one of source, business_key and event.",
        "properties": {
            "tenant": {"type": "string"},
            "reason": {"type": "string"},
            "source": {"type": "string"},
            "business_key": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            "event": {"type": "string", "description": "An event id (evt_...)."},
        },
    },
}

_PATHS: dict[str, Any] = {
    "/api/v1/events": _listing(
        "List events, newest first.",
        "Event",
        [_q("source", "Only this source."), _q("state", "Only this state.", enum=list(STATES))],
    ),
    "/api/v1/events/{public_id}": _detail("One event in full.", "EventDetail"),
    "/api/v1/events/{public_id}/replay": _action(
        "Replay a quarantined or filtered event (operator); 409 payload_erased, naming the"
        " erasure, when its payload was erased.",
        _REPLAYED,
        409,
    ),
    "/api/v1/events/{public_id}/redact": {
        "post": {
            "summary": "Delete an event's raw body, keep its SHA-256 and every row; audited"
            " (operator). 409 while a legal hold covers the event (event_held, naming the"
            " holds) or it is received/processing (event_unfinished). Idempotent.",
            "parameters": [_PATH_ID],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "required": ["reason"],
                    "properties": {"reason": {"type": "string", "maxLength": 2000}},
                    "additionalProperties": False,
                }
            ),
            "responses": {**_ok(_REDACTED), **_errors(400, 403, 404, 409)},
        }
    },
    "/api/v1/events/{public_id}/skip": {
        "post": {
            "summary": "Let an ordered lane move on past its quarantined event, which stays"
            " quarantined; audited (operator). With more than INBOX_LANE_SKIP_APPROVAL_ABOVE"
            " events held behind it, the first call asks (status: skip requested) and a"
            " second operator's confirms (403 for the one who asked). 409 (lane_not_blocked)"
            " unless the event blocks a lane.",
            "parameters": [_PATH_ID],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "properties": {"reason": {"type": "string", "maxLength": 2000}},
                    "additionalProperties": False,
                }
            ),
            "responses": {**_ok(_SKIPPED), **_errors(400, 403, 404, 409)},
        }
    },
    "/api/v1/tenants/{name}": {
        "get": {
            "summary": "A tenant's fairness settings: in-flight cap (null: none) and weight.",
            "parameters": [_PATH_NAME],
            "responses": {**_ok(_TENANT), **_errors(404)},
        },
        "patch": {
            "summary": "Set a tenant's in-flight cap and claim weight (all-tenants operator).",
            "parameters": [_PATH_NAME],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "max_in_flight": {
                            "type": ["integer", "null"],
                            "minimum": 1,
                            "description": "At most this many of its events run at"
                            " once; null removes the cap.",
                        },
                        "weight": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 100,
                            "description": "Its share of each claim against the"
                            " other tenants' weights.",
                        },
                    },
                }
            ),
            "responses": {**_ok(_TENANT), **_errors(400, 403, 404)},
        },
    },
    "/api/v1/lanes/blocked": {
        "get": {
            "summary": "Ordered lanes held by a quarantined event, longest blocked first.",
            "responses": {
                **_ok(
                    {
                        "type": "object",
                        "properties": {"data": {"type": "array", "items": _ref("BlockedLane")}},
                    }
                ),
            },
        }
    },
    "/api/v1/deliveries": _listing(
        "List outbound deliveries, newest first.",
        "Delivery",
        [
            _q("endpoint", "Only this endpoint (its public id)."),
            _q("state", "Only this state.", enum=list(DELIVERY_STATES)),
        ],
    ),
    "/api/v1/deliveries/{public_id}": _detail("One delivery with its attempts.", "DeliveryDetail"),
    "/api/v1/deliveries/{public_id}/replay": _action(
        "Replay a failed delivery with the same webhook-id (operator).", _REPLAYED, 409
    ),
    "/api/v1/replays": {
        "post": {
            "summary": "Start a bulk replay of dead letters (operator).",
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "The same key returns the same job (1-255 printable ASCII).",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                }
            ],
            "requestBody": _json_body(_ref("BulkReplayRequest")),
            "responses": {
                **_ok(_ref("BulkReplayAccepted"), "202", "Accepted"),
                **_ok(_ref("ReplayPreview"), "200", "The preview (dry_run)"),
                **_errors(400, 403, 422),
            },
        }
    },
    "/api/v1/replays/{public_id}": _detail("A bulk replay's progress.", "BulkReplay"),
    "/api/v1/replays/{public_id}/cancel": _action(
        "Cancel a bulk replay; it stops before its next batch (operator).",
        _ref("BulkReplay"),
        409,
    ),
    "/api/v1/replays/{public_id}/approve": _action(
        "Approve a bulk replay awaiting approval; starts it (an operator other than the"
        ' requester). Optional body {"note": "..."}.',
        _ref("BulkReplay"),
        409,
    ),
    "/api/v1/replays/{public_id}/reject": _action(
        "Reject a bulk replay awaiting approval; nothing is replayed."
        ' Optional body {"note": "..."}.',
        _ref("BulkReplay"),
        409,
    ),
    "/api/v1/holds": {
        "get": {
            "summary": "Legal holds in force; ?all=true includes released ones.",
            "parameters": [_q("all", "Include released holds.", type="boolean")],
            "responses": {
                **_ok(
                    {
                        "type": "object",
                        "properties": {"data": {"type": "array", "items": _ref("LegalHold")}},
                    }
                ),
                **_errors(400),
            },
        },
        "post": {
            "summary": "Place a legal hold: retention keeps what it covers (operator).",
            "requestBody": _json_body(_ref("LegalHoldRequest")),
            "responses": {**_ok(_ref("LegalHold"), "201", "Created"), **_errors(400, 403, 404)},
        },
    },
    "/api/v1/holds/{public_id}": _detail("One legal hold.", "LegalHold"),
    "/api/v1/holds/{public_id}/release": _action(
        "Release a legal hold (operator). A tenant-wide hold: the first release asks for"
        " it, another operator's release ends it (403 for the same operator).",
        _ref("LegalHold"),
        409,
    ),
    "/api/v1/endpoints": {
        "get": {
            "summary": "Callback endpoints' state (healthy, degraded, open_circuit, paused,"
            " disabled: as the console, the CLI and /metrics show it) and backlog.",
            "responses": {
                **_ok(
                    {
                        "type": "object",
                        "properties": {"data": {"type": "array", "items": _ref("EndpointState")}},
                    }
                ),
                **_errors(),
            },
        }
    },
    "/api/v1/endpoints/{public_id}": {
        **_detail("One endpoint's state (a deleted one too, by its id).", "EndpointState"),
        "delete": {
            "summary": "Delete it (operator; audited): a soft delete, the row stays. It is"
            " sent nothing, gets no new deliveries and leaves the listing. 409 while"
            " deliveries are being sent, and while it has held or waiting deliveries unless"
            ' {"held": "discard", "reason": R} (a JSON body or query parameters): each'
            " becomes a dead letter, audited; past INBOX_HELD_DISCARD_APPROVAL_MIN the"
            " discard awaits a second operator (202; deleted on approval). There is no"
            " release: a deleted endpoint is sent nothing.",
            "parameters": [
                _PATH_ID,
                _q("held", "What becomes of its held and waiting deliveries: discard."),
                _q("reason", "With held=discard: why (audited)."),
            ],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "held": {"type": "string", "enum": ["discard"]},
                        "reason": {"type": "string"},
                    },
                },
                required=False,
            ),
            "responses": {
                **_ok(_ref("EndpointDeleted")),
                **_ok(_ref("EndpointDeleted"), "202", "Accepted: the discard awaits approval"),
                **_errors(400, 403, 404, 409),
            },
        },
    },
    "/api/v1/endpoints/{public_id}/order": {
        "post": {
            "summary": "Ordered delivery on or off (operator; audited): one delivery in"
            " flight, the next once the previous is delivered or dead, in the order made,"
            " across every courier process.",
            "parameters": [_PATH_ID],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "required": ["ordered"],
                    "additionalProperties": False,
                    "properties": {"ordered": {"type": "boolean"}},
                }
            ),
            "responses": {**_ok(_ref("EndpointState")), **_errors(400, 403, 404)},
        }
    },
    **{
        f"/api/v1/endpoints/{{public_id}}/{verb}": _action(summary, _ref("EndpointChange"))
        for verb, summary in (
            ("disable", "Disable it (operator): nothing is sent, its deliveries are held."),
            ("enable", "Enable it (operator): its held deliveries go out in their order."),
            ("pause", "Pause it (operator): nothing is sent, its deliveries are held."),
            ("resume", "Resume it (operator): its held deliveries go out in their order."),
        )
    },
    "/api/v1/endpoints/{public_id}/limits": {
        "post": {
            "summary": "Set its rate (messages a second, null: none) and in-flight limit"
            " (operator); they hold across every courier process, the backlog waits.",
            "parameters": [_PATH_ID],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "minProperties": 1,
                    "description": "A field left out (or a null max_in_flight) keeps"
                    " what is set; a null rate_per_second removes the rate.",
                    "properties": {
                        "rate_per_second": {
                            "type": ["number", "null"],
                            "exclusiveMinimum": 0,
                            "maximum": 10_000,
                        },
                        "max_in_flight": {
                            "type": ["integer", "null"],
                            "minimum": 1,
                            "maximum": 64,
                        },
                    },
                }
            ),
            "responses": {**_ok(_ref("EndpointState")), **_errors(400, 403, 404)},
        }
    },
    "/api/v1/endpoints/{public_id}/discard": {
        "post": {
            "summary": "Discard its held deliveries with a reason (operator): each becomes a"
            " dead letter, audited; past INBOX_HELD_DISCARD_APPROVAL_MIN it awaits a second"
            " operator.",
            "parameters": [_PATH_ID],
            "requestBody": _json_body(
                {
                    "type": "object",
                    "required": ["reason"],
                    "additionalProperties": False,
                    "properties": {"reason": {"type": "string"}},
                }
            ),
            "responses": {**_ok(_ref("HeldDiscard")), **_errors(400, 403, 404, 409)},
        }
    },
    "/api/v1/endpoints/{public_id}/discard/approve": _action(
        "Approve the awaiting discard (another operator than the one who asked; 403 else).",
        _ref("HeldDiscard"),
        409,
    ),
    "/api/v1/endpoints/{public_id}/discard/withdraw": _action(
        "Withdraw the awaiting discard: nothing is discarded.", _ref("HeldDiscard"), 409
    ),
    "/api/v1/erasures": {
        "get": {
            "summary": "The newest erasures.",
            "responses": {
                **_ok(
                    {
                        "type": "object",
                        "properties": {"data": {"type": "array", "items": _ref("Erasure")}},
                    }
                ),
            },
        },
        "post": {
            "summary": "Erase payloads by destroying their keys (operator): a subject's now"
            " (201), a tenant's once another operator approves (202). 409 erasure_held names"
            " the legal holds that cover them; 409 erasure_unfinished while events under the"
            " keys still run; 503 (cause keystore) while the key store does not answer (the"
            " erasure stays destroying and is finished later).",
            "requestBody": _json_body(_ref("ErasureRequest")),
            "responses": {
                **_ok(_ref("Erasure"), "201", "Erased"),
                **_ok(_ref("Erasure"), "202", "Awaiting a second operator"),
                **_errors(400, 403, 404, 409),
            },
        },
    },
    "/api/v1/erasures/{public_id}": _detail("One erasure.", "Erasure"),
    "/api/v1/erasures/{public_id}/approve": _action(
        "Approve a tenant-wide erasure (another operator than the one who asked: 403)."
        " The keys are destroyed.",
        _ref("Erasure"),
        409,
    ),
    "/api/v1/erasures/{public_id}/reject": _action(
        "Reject a tenant-wide erasure awaiting approval; nothing is erased.",
        _ref("Erasure"),
        409,
    ),
    "/api/v1/openapi.json": {
        "get": {"summary": "This document.", "security": [], "responses": _ok({"type": "object"})}
    },
}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Webhook Inbox admin API",
        "version": "1",
        "description": "Events, deliveries and replays. Bearer tokens come from"
        " `inbox tokens create`; a viewer reads, an operator also replays and cancels.",
    },
    "security": [{"bearer": []}],
    "paths": _PATHS,
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "inb_<43 chars>"}
        },
        "schemas": _SCHEMAS,
        "responses": {
            "Error": {
                "description": "401 no/unknown/revoked token (with WWW-Authenticate: Bearer),"
                " 403 a viewer writing, 404 not found or another tenant's, 400/409/422/503.",
                "content": {"application/json": {"schema": _ref("Error")}},
            }
        },
    },
}


@api.get("/openapi.json")
def openapi_document() -> dict[str, Any]:
    return DOCUMENT
