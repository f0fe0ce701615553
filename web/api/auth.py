"""Bearer tokens: who is calling, what they may do, and which tenant they see."""

from __future__ import annotations

from flask import g, request

from inbox.domain import tokens
from inbox.domain.errors import Forbidden, Unauthorized
from inbox.domain.records import TenantId
from inbox.services import admin
from inbox.services.admin import Token
from web import actions, throttle
from web.api.blueprint import api

PUBLIC_ENDPOINTS = frozenset({"api.openapi_document"})


@api.before_request
def _authenticate() -> None:
    if request.endpoint in PUBLIC_ENDPOINTS:
        return
    raw = tokens.bearer(request.headers.get("Authorization"))
    if raw is None:
        raise Unauthorized("A bearer token is required.")
    throttle.check("bearer")  # 429 while this address is over its failures
    token = admin.authenticate(actions.runtime(), raw)
    if token is None:
        throttle.failed("bearer")
        raise Unauthorized("The token is unknown or revoked.")
    if not tokens.may(token.role, request.method):
        raise Forbidden(f"A {token.role} token may only read.")
    g.api_token = token


def current() -> Token:
    token: Token = g.api_token
    return token


def scope() -> TenantId | None:
    """The tenant the caller is limited to; None for an all-tenants token."""
    return current().tenant_id
