"""Erasure by key destruction: what a payload key covers, and the rules of erasing one.

A payload (an event's raw body and stored headers) is sealed under a data key of its
tenant, or of its subject where the source names one (``subject_path``: the account or
person id in the body). Erasing destroys the key: every copy of the sealed bytes, in the
database, its backups, WAL archives and dumps, no longer opens. Nothing else goes: rows,
digests, verdicts and audit entries stay.

- ``subject``: one subject's key (a person), erased by one operator.
- ``tenant``: every key of the tenant, erased by two operators: one asks, another confirms
  (``inbox.domain.approval.check_reviewer``: the one who asked can never confirm).

An erasure is refused (409) while an active legal hold covers an event under the key, and
while an event under it is unfinished (the worker still needs its body).

Pure: imports no framework or driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from inbox.domain import jsonpath
from inbox.domain.errors import InboxError, PermanentError
from inbox.domain.idempotency import subject_digest

__all__ = [
    "Erasure",
    "ErasureHeld",
    "ErasureNotAwaiting",
    "ErasureScope",
    "ErasureUnfinished",
    "PayloadErased",
    "ReplayErased",
    "needs_two_people",
    "subject_digest",
    "subject_of",
]

TENANT_KEY = b""  # the subject digest of a tenant's own key


class ErasureScope(StrEnum):
    SUBJECT = "subject"
    TENANT = "tenant"


def needs_two_people(scope: ErasureScope | str) -> bool:
    """A tenant-wide erasure is confirmed by a second operator; a subject's is not."""
    return ErasureScope(scope) is ErasureScope.TENANT


def subject_of(tenant_id: int, path: str | None, body: bytes | None) -> bytes | None:
    """The subject digest of a stored JSON body (the sealing job's, for rows stored in
    clear), or None: not JSON, or no value at ``path``; the tenant's key then."""
    if not path or not body:
        return None
    try:
        value = jsonpath.get_text(json.loads(body), path)
    except ValueError:
        return None
    return subject_digest(tenant_id, value) if value else None


class ErasureHeld(InboxError):
    """A legal hold covers events under this key: nothing is erased until it is released."""

    http_status = 409
    code = "erasure_held"


class ErasureUnfinished(InboxError):
    """Events under this key are not finished: the worker still needs their bodies."""

    http_status = 409
    code = "erasure_unfinished"


class ErasureNotAwaiting(InboxError):
    """This erasure is not waiting for a second operator (done or rejected already)."""

    http_status = 409
    code = "erasure_not_awaiting"


class ReplayErased(InboxError):
    """This event's payload was erased: a replay would have nothing to run."""

    http_status = 409
    code = "payload_erased"


class PayloadErased(PermanentError):
    """The event's payload was erased (its key destroyed): there is nothing to run."""


@dataclass(frozen=True, slots=True)
class Erasure:
    id: int
    public_id: str
    tenant: str
    scope: str
    reason: str
    status: str  # awaiting_approval, destroying (keys being deleted), done, rejected
    requested_by: str
    requested_at: datetime
    approved_by: str | None
    done_at: datetime | None
    keys_destroyed: int
    events: int  # events whose payload no longer opens

    def public(self) -> dict[str, Any]:
        return {
            "id": self.public_id,
            "tenant": self.tenant,
            "scope": self.scope,
            "reason": self.reason,
            "status": self.status,
            "requested_by": self.requested_by,
            "requested_at": self.requested_at.isoformat(),
            "approved_by": self.approved_by,
            "done_at": self.done_at.isoformat() if self.done_at else None,
            "keys_destroyed": self.keys_destroyed,
            "events": self.events,
        }
