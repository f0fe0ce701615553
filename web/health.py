"""``/healthz`` (the process is up) and ``/readyz`` (the database answers)."""

from __future__ import annotations

from flask import Blueprint, current_app
from sqlalchemy import text

health = Blueprint("health", __name__)


@health.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@health.get("/readyz")
def readyz() -> tuple[dict[str, object], int]:
    checks: dict[str, str] = {}
    try:
        with current_app.extensions["inbox"]["engine"].connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = exc.__class__.__name__
    ok = all(v == "ok" for v in checks.values())
    return {"status": "ok" if ok else "unavailable", "checks": checks}, 200 if ok else 503
