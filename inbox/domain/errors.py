"""The error hierarchy. Each class's docstring is its default message.

Errors that reach a client carry an ``http_status`` and a short machine ``code``;
one Flask error handler turns any of them into a JSON body. Errors raised by
playbooks say whether a retry can help: ``PermanentError`` quarantines at once,
``RetryableError`` retries after ``delay`` seconds (or the source's backoff).
"""

from __future__ import annotations


class InboxError(Exception):
    """Something went wrong."""

    http_status = 500
    code = "internal_error"

    def __init__(self, message: str | None = None, **extra: object) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.extra = extra
        super().__init__(self.message)

    def body(self) -> dict[str, object]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


class NotFound(InboxError):
    """No such tenant or source."""

    http_status = 404
    code = "not_found"


class MethodNotAllowed(InboxError):
    """Webhooks are delivered with POST."""

    http_status = 405
    code = "method_not_allowed"


class PayloadTooLarge(InboxError):
    """The body is larger than this source accepts."""

    http_status = 413
    code = "payload_too_large"


class UnsupportedMediaType(InboxError):
    """This source does not accept that content type."""

    http_status = 415
    code = "unsupported_media_type"


class Unauthorized(InboxError):
    """The request could not be authenticated."""

    http_status = 401
    code = "unauthorized"


class Forbidden(InboxError):
    """This token may not do that."""

    http_status = 403
    code = "forbidden"


class PlaybookMissing(InboxError):
    """The source names a playbook that no loaded module registers. Not the event's
    failure: it is held, and runs when a process that has the playbook sweeps."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no playbook named {name!r} is registered here (check INBOX_PLAYBOOKS;"
            " the event is held and runs once the playbook is loaded)",
            playbook=name,
        )
        self.name = name


class BadRequest(InboxError):
    """The request is malformed."""

    http_status = 400
    code = "bad_request"


class IdempotencyConflict(InboxError):
    """This Idempotency-Key was already used with a different body."""

    http_status = 422
    code = "idempotency_key_reused"


class InFlight(InboxError):
    """The original request with this Idempotency-Key is still being processed."""

    http_status = 409
    code = "in_flight"
    retry_after = 1


class TooManyRequests(InboxError):
    """Too many requests; retry after the time given."""

    http_status = 429
    code = "too_many_requests"

    def __init__(self, message: str | None = None, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class Unavailable(InboxError):
    """The inbox cannot store events right now; retry later."""

    http_status = 503
    code = "unavailable"
    retry_after = 5


class StoreUnavailable(Unavailable):
    """The inbox cannot store events right now; retry later."""

    cause = "database"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, cause=self.cause)


class SchemaBehind(StoreUnavailable):
    """The database schema is missing or behind the code: run `inbox migrate`."""

    cause = "schema"


class ValueRefused(BadRequest):
    """The database refused a value in the request (out of range or not valid text)."""


class PlaybookError(InboxError):
    """A playbook step failed."""


class PermanentError(PlaybookError):
    """A step failed in a way no retry can fix; the event is quarantined."""


class RetryableError(PlaybookError):
    """A step failed and may succeed later."""

    def __init__(self, message: str | None = None, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class LeaseLost(InboxError):
    """This worker's lease on the event expired; another owner holds it now."""


class InvalidTransition(InboxError):
    """That state change is not allowed."""
