"""How long the inbox keeps things: the pure policy behind ``inbox prune``.

Three windows, each per source:

- the **key window** (``key_ttl_hours``, else ``INBOX_KEY_TTL_HOURS``): how long a dedup
  key digest is kept after receipt. It may never be shorter than the longest time the
  source's provider keeps retrying one event (its *retry horizon*, below): a key
  removed while the provider is still retrying would let a late retry in as a second
  event. ``check_key_window`` refuses such a window when a source is configured, and
  pruning skips the keys of any source whose window is too short;
- the **body retention** (``retention_days``, default 30): how long the raw body of a
  finished event is kept. After it the body is set to NULL; the row, its body hash,
  headers, decision, steps and audit trail (the ledger) stay;
- the same retention bounds the per-attempt receipts of delivered callbacks.

Nothing here touches the database; ``inbox.store.write.retention`` applies the policy.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from inbox.domain.errors import BadRequest

# The longest time, in hours, each provider keeps retrying one event after the first
# attempt, as its public documentation describes it. A source's key window must cover
# it. Values are rounded up to whole hours when compared (windows are whole hours).
RETRY_HORIZON_HOURS: dict[str, float] = {
    # Stripe: in live mode, failed deliveries are retried with exponential backoff for
    # up to three days (sandboxes retry for a few hours only).
    "stripe": 72.0,
    # GitHub: failed deliveries are not redelivered automatically; redelivery is a
    # manual action (or a script of the integrator's) and not a provider retry.
    "github": 0.0,
    # Shopify: a failed delivery is retried 8 times over 4 hours with exponential
    # backoff (since September 2024).
    "shopify": 4.0,
    # Standard Webhooks / Svix default schedule: immediately, then after 5 s, 5 min,
    # 30 min, 2 h, 5 h, 10 h and 10 h, each counted from the previous failure:
    # about 27 h 35 min from the first attempt to the last.
    "standard": (5 + 5 * 60 + 30 * 60 + 2 * 3600 + 5 * 3600 + 10 * 3600 + 10 * 3600) / 3600,
    # Slack Events API: up to three retries, the last a few minutes after the first
    # attempt; one hour leaves room for delays on Slack's side.
    "slack": 1.0,
    # Twilio: no scheduled redelivery; retries happen at the connection level within
    # the same callback exchange (configurable per URL), so a few minutes at most.
    "twilio": 0.25,
    # Paddle: a failed delivery is retried 60 times over 3 days in live accounts.
    "paddle": 72.0,
    # Coinbase Commerce: retried with exponential backoff for up to three days.
    "coinbase-commerce": 72.0,
    # Meta (Graph API webhooks): retried for up to 36 hours.
    "meta": 36.0,
}
# Clerk and Resend send through Svix: the Standard Webhooks schedule above.
RETRY_HORIZON_HOURS["clerk"] = RETRY_HORIZON_HOURS["resend"] = RETRY_HORIZON_HOURS["standard"]
# Schemes whose sender's retry behaviour is not known (a tenant's own systems, Okta or
# Auth0 behind `token`, `none`): assume a day, the inbox's default key window.
UNKNOWN_HORIZON_HOURS = 24.0

DEFAULT_RETENTION_DAYS = 30


def retry_horizon_hours(scheme: str) -> float:
    """How long the scheme's provider may keep retrying one event, in hours."""
    return RETRY_HORIZON_HOURS.get(scheme, UNKNOWN_HORIZON_HOURS)


def min_key_window_hours(scheme: str) -> int:
    """The shortest whole-hour key window that covers the scheme's retry horizon (>= 1)."""
    return max(1, math.ceil(retry_horizon_hours(scheme)))


def key_window_hours(scheme: str, source_hours: int | None, default_hours: int) -> int:
    """The window a source's keys get: its own ``key_ttl_hours``, else the global one
    stretched to cover the scheme's retry horizon (Stripe's 3 days, say)."""
    if source_hours is not None:
        return source_hours
    return max(default_hours, min_key_window_hours(scheme))


def key_window_problem(scheme: str, hours: int) -> str | None:
    """Why ``hours`` is too short a key window for ``scheme``, or None when it is enough."""
    minimum = min_key_window_hours(scheme)
    if hours >= minimum:
        return None
    return (
        f"key window {hours} h is shorter than the {scheme} retry horizon "
        f"(at least {minimum} h needed): a late retry would be taken as a new event"
    )


def check_key_window(scheme: str, hours: int) -> None:
    """Raise ``BadRequest`` when a key window of ``hours`` does not cover ``scheme``'s retries."""
    problem = key_window_problem(scheme, hours)
    if problem is not None:
        raise BadRequest(
            f"key_ttl_hours: {problem}.",
            minimum_key_ttl_hours=min_key_window_hours(scheme),
        )


@dataclass
class PruneResult:
    """What one pruning round removed (or, with ``dry_run``, would remove)."""

    keys_removed: int = 0
    bodies_removed: int = 0
    # Bodies past their retention kept because a legal hold covers their event.
    bodies_held: int = 0
    attempts_folded: int = 0
    # "tenant/source: reason" for each source whose keys were kept because its key
    # window is shorter than its provider's retry horizon.
    refused_sources: list[str] = field(default_factory=list)
    dry_run: bool = False
    # Whole days of the ledger dropped (or that would be), and the days past the window
    # that stay, with why ("2026-01-05: 3 unfinished event(s)").
    days_dropped: list[str] = field(default_factory=list)
    days_kept: list[str] = field(default_factory=list)
    # Set when the ledger window was stretched to cover the longest key window.
    ledger_window_note: str | None = None


# The ledger window: whole days of the ledger (events, deliveries and their children,
# partitioned by day) are dropped once they are older than this. A day is dropped only
# when nothing in it can still matter to the hot path:
# - it is older than the window (the setting, stretched to the key window: below);
# - it holds no unfinished event (received, processing) and no unfinished delivery
#   (pending, sending): those are still being worked on, whatever their age;
# - no dedup key points into it: a live key answers its duplicates from its event;
# - no legal hold covers an event of it, or the event of a delivery of it.
DEFAULT_LEDGER_RETENTION_DAYS = 365


def min_ledger_days(longest_key_window_hours: float) -> int:
    """The shortest ledger window that outlives every key: a day's last event is received
    at its end, and its key lives the key window from then (plus the day itself)."""
    return math.ceil(longest_key_window_hours / 24) + 1


def ledger_days(setting: int, longest_key_window_hours: float) -> tuple[int, str | None]:
    """The ledger window in use, and why it differs from ``setting`` (None: it does not)."""
    minimum = min_ledger_days(longest_key_window_hours)
    if setting >= minimum:
        return setting, None
    return minimum, (
        f"ledger window {setting} d is shorter than the longest key window in use "
        f"({longest_key_window_hours:g} h): {minimum} d kept"
    )


@dataclass(frozen=True)
class DayContents:
    """What one day of the ledger still holds that would keep it."""

    unfinished_events: int = 0
    unfinished_deliveries: int = 0
    live_keys: int = 0
    # Events of the day under a legal hold, and those holds' public ids.
    held_events: int = 0
    holds: tuple[str, ...] = ()


def day_kept_because(
    day: dt.date, today: dt.date, window_days: int, contents: DayContents | None
) -> str | None:
    """Why ``day``'s partitions stay, or None when they may be dropped. ``contents`` is
    read only for a day past the window (None: not read yet)."""
    if day > today - dt.timedelta(days=window_days):
        return f"inside the ledger window ({window_days} d)"
    if contents is None:
        return "not looked at"
    if contents.held_events:
        return f"legal hold {', '.join(contents.holds)} ({contents.held_events} held event(s))"
    if contents.unfinished_events:
        return f"{contents.unfinished_events} unfinished event(s)"
    if contents.unfinished_deliveries:
        return f"{contents.unfinished_deliveries} unfinished deliveries"
    if contents.live_keys:
        return f"{contents.live_keys} live dedup key(s) point into it"
    return None
