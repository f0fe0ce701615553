"""Helpers for the signature scheme tests: requests, configs and independent signers."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

import pytest

from inbox.domain.signatures import (
    SchemeConfig,
    SignatureError,
    SignedRequest,
    Verified,
    get_scheme,
)

NOW = 1_700_000_000
URL = "https://h.example/hooks/acme/src"


def req(
    headers: Mapping[str, str],
    body: bytes = b"{}",
    *,
    url: str = URL,
    method: str = "POST",
    form: Mapping[str, list[str]] | None = None,
) -> SignedRequest:
    return SignedRequest(method=method, url=url, headers=dict(headers), body=body, form=form or {})


def cfg(*secrets: str, **kw: object) -> SchemeConfig:
    return SchemeConfig(secrets=secrets, **kw)  # type: ignore[arg-type]


def hex256(secret: str, msg: bytes) -> str:
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def b64_256(secret: str, msg: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), msg, hashlib.sha256).digest()).decode()


def fails(scheme: str, request: SignedRequest, config: SchemeConfig, now: float = NOW) -> None:
    with pytest.raises(SignatureError):
        get_scheme(scheme).verify(request, config, now)


def passes(scheme: str, request: SignedRequest, config: SchemeConfig, now: float = NOW) -> Verified:
    return get_scheme(scheme).verify(request, config, now)
