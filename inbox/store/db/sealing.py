"""The data keys of a process: sealing payloads on the way in, opening them on the way out.

A payload is sealed under its tenant's data key, or its subject's (``inbox.domain.erasure``),
with one AEAD call per column (``inbox.infra.envelope``). The keys are unwrapped once and
kept per engine in a bounded cache (least recently used out first, each entry for at most
``INBOX_DATA_KEY_TTL_S``): a receiver whose tenant's key is cached seals with no round trip
at all. A key is made on first use (a tenant's first payload, a subject's first): read if
another process made it, else inserted (``ON CONFLICT DO NOTHING`` on the live key's unique
index, so two processes racing end up with the same key), in a short transaction of its own.

Opening reads the wrapped key by id (cached as well). A destroyed key (erasure) opens
nothing: ``open`` answers None and the reader says the payload was erased. The process
that erases forgets the keys at once; another process may keep an unwrapped key until its
entry expires (the threat model in docs/explanation/security.md says so).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text

from inbox.domain.erasure import TENANT_KEY
from inbox.domain.intake import Prepared
from inbox.infra import config
from inbox.infra import keyring as kr
from inbox.infra.envelope import DataKey, SealBroken, new_key, unwrap, wrap

BODY = "body"
HEADERS = "headers"

_LIVE = text(
    "SELECT id, wrapped FROM data_keys"
    " WHERE tenant_id = :t AND subject_digest = :s AND destroyed_at IS NULL"
)
_MAKE = text(
    "INSERT INTO data_keys (tenant_id, subject_digest, wrapped) VALUES (:t, :s, :w)"
    " ON CONFLICT (tenant_id, subject_digest) WHERE destroyed_at IS NULL DO NOTHING"
    " RETURNING id, wrapped"
)
_BY_ID = text("SELECT wrapped FROM data_keys WHERE id = :id")


def live(event: str) -> str:
    """SQL: whether the key of the events row aliased ``event`` is live (NULL: in clear);
    one primary-key probe inside the reader's own statement."""
    return f"(SELECT k.wrapped IS NOT NULL FROM data_keys k WHERE k.id = {event}.key_id)"


@dataclass(frozen=True, slots=True)
class Opened:
    """A stored payload as a reader sees it: ``erased`` when its key was destroyed (then
    ``body`` is None and ``headers`` empty)."""

    body: bytes | None
    headers: dict[str, Any]
    erased: bool = False


class PayloadKeys:
    """One engine's data keys, unwrapped, in a bounded cache (thread-safe)."""

    def __init__(self, engine: Engine, size: int, ttl_s: float, enabled: bool) -> None:
        self._engine = weakref.ref(engine)
        self.size = max(1, size)
        self.ttl_s = ttl_s
        self.enabled = enabled
        self._lock = threading.Lock()
        self._live: OrderedDict[tuple[int, bytes], tuple[DataKey, float]] = OrderedDict()
        self._by_id: OrderedDict[int, tuple[DataKey | None, float]] = OrderedDict()
        # The key each loaded event's payload is sealed under, for its step results.
        self._events: OrderedDict[int, tuple[DataKey, float]] = OrderedDict()
        self.misses = 0  # keys read from the database (for tests and the benchmark)

    # -- the cache -------------------------------------------------------------------
    def _get(self, cache: OrderedDict[Any, Any], k: Any) -> Any:
        with self._lock:
            found = cache.get(k)
            if found is None:
                return None
            if found[1] < time.monotonic():
                del cache[k]
                return None
            cache.move_to_end(k)
            return found

    def _put(self, cache: OrderedDict[Any, Any], k: Any, value: Any) -> None:
        with self._lock:
            cache[k] = (value, time.monotonic() + self.ttl_s)
            cache.move_to_end(k)
            while len(cache) > self.size:
                cache.popitem(last=False)

    def cached(self) -> int:
        with self._lock:
            return len(self._live) + len(self._by_id)

    def clear(self) -> None:
        """Forget every key (a restored or emptied database)."""
        with self._lock:
            self._live.clear()
            self._by_id.clear()
            self._events.clear()

    def forget(self, key_ids: set[int]) -> None:
        """Drop these keys (destroyed by an erasure in this process) from the cache."""
        with self._lock:
            for k in [k for k, (dk, _) in self._live.items() if dk.id in key_ids]:
                del self._live[k]
            for i in key_ids:
                self._by_id.pop(i, None)
            for e in [e for e, (dk, _) in self._events.items() if dk.id in key_ids]:
                del self._events[e]

    # -- sealing -----------------------------------------------------------------------
    def key_for(self, tenant_id: int, subject: bytes | None) -> DataKey:
        """The live key of a tenant (``subject`` None) or of one of its subjects, made on
        first use."""
        k = (tenant_id, subject or TENANT_KEY)
        found = self._get(self._live, k)
        if found is not None:
            key: DataKey = found[0]
            return key
        engine = self._engine()
        assert engine is not None
        ring = kr.keyring()
        self.misses += 1
        params = {"t": k[0], "s": k[1]}
        with engine.begin() as conn:
            row = conn.execute(_LIVE, params).first()
            if row is None:
                row = conn.execute(_MAKE, {**params, "w": wrap(ring, new_key())}).first()
            if row is None:  # another process made it meanwhile
                row = conn.execute(_LIVE, params).one()
        key = DataKey(int(row.id), unwrap(ring, row.wrapped))
        self._put(self._live, k, key)
        self._put(self._by_id, key.id, key)
        return key

    def seal(self, tenant_id: int, ev: Prepared) -> Prepared:
        """``ev`` with its body and headers sealed (unchanged while sealing is off)."""
        if not self.enabled or ev.key_id is not None:
            return ev
        key = self.key_for(tenant_id, ev.subject_digest)
        sealed_headers = key.seal(json.dumps(ev.headers).encode(), HEADERS)
        return _replace(ev, key.id, key.seal(ev.body, BODY), sealed_headers)

    # -- opening -----------------------------------------------------------------------
    def key_by_id(self, conn: Connection, key_id: int) -> DataKey | None:
        """The key ``key_id`` (read on ``conn`` when not cached); None once destroyed."""
        found = self._get(self._by_id, key_id)
        if found is not None:
            key: DataKey | None = found[0]
            return key
        self.misses += 1
        wrapped = conn.execute(_BY_ID, {"id": key_id}).scalar()
        key = None if wrapped is None else DataKey(key_id, unwrap(kr.keyring(), wrapped))
        self._put(self._by_id, key_id, key)
        return key

    def open(
        self,
        conn: Connection,
        key_id: int | None,
        body: bytes | None,
        headers: dict[str, Any] | None,
        headers_sealed: bytes | None,
        live: bool | None = None,
    ) -> Opened:
        """A stored payload in clear: as it is where ``key_id`` is None (stored in clear).
        ``live``: whether the key is live as the reader's own statement found it (``LIVE``),
        so an erasure is seen at once, whatever this process has cached."""
        if key_id is None:
            return Opened(None if body is None else bytes(body), dict(headers or {}))
        if live is False:
            self.forget({key_id})
            return Opened(None, {}, erased=True)
        key = self.key_by_id(conn, key_id)
        if key is None:
            return Opened(None, {}, erased=True)
        opened = None if body is None else key.open(bytes(body), BODY)
        hdrs = (
            {} if headers_sealed is None else json.loads(key.open(bytes(headers_sealed), HEADERS))
        )
        return Opened(opened, hdrs)

    # -- step results ------------------------------------------------------------------
    def loaded(self, event_id: int, key: DataKey | None) -> None:
        """A worker loaded this event, sealed under ``key`` (None: in clear): its step
        results and decision are stored the same way, with no round trip to ask."""
        self._put(self._events, event_id, key)

    def seal_steps(
        self, conn: Connection, event_id: int, steps: dict[str, Any]
    ) -> tuple[dict[str, Any], int | None]:
        """Step results as stored: each a JSON string of its sealed bytes (base64) under the
        event's key, and that key's id; as they are (and None) for a payload in clear."""
        if not steps:
            return steps, None
        found = self._get(self._events, event_id)
        key: DataKey | None
        if found is not None:
            key = found[0]
        else:  # not loaded here, or dropped from the cache: its row says
            key_id = conn.execute(_EVENT_KEY, {"id": event_id}).scalar()
            key = None if key_id is None else self.key_by_id(conn, int(key_id))
        if key is None:
            return steps, None
        return {
            n: _b64(key.seal(json.dumps(r).encode(), STEP + n)) for n, r in steps.items()
        }, key.id

    def seal_decision(self, conn: Connection, event_id: int, decision: Any) -> Any:
        """A decision as stored: a JSON string (the base64 of it sealed under the event's
        key) where the payload is sealed, else as it is (a decision in clear is an object,
        never a string, so the two cannot be mistaken)."""
        sealed, key = self.seal_steps(conn, event_id, {DECISION: decision})
        return sealed[DECISION] if key is not None else decision

    def open_decision(self, conn: Connection, key_id: int | None, decision: Any) -> Any:
        """A stored decision in clear (None under a destroyed key)."""
        if key_id is None or not isinstance(decision, str):
            return decision
        return self.open_steps(conn, {DECISION: decision}, {DECISION: key_id})[DECISION]

    def open_steps(
        self, conn: Connection, steps: dict[str, Any], sealed: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Step results in clear: ``sealed`` names the sealed ones, with their key's id (a
        destroyed key: the result reads None)."""
        if not sealed:
            return dict(steps)
        out = dict(steps)
        for name, key_id in sealed.items():
            key = self.key_by_id(conn, int(key_id))
            raw = str(steps[name])
            out[name] = (
                None if key is None else json.loads(key.open(base64.b64decode(raw), STEP + name))
            )
        return out


STEP = "step:"
DECISION = "\x00decision"  # sealed as a step of this name: no step name holds a NUL
_EVENT_KEY = text("SELECT key_id FROM events WHERE id = :id")


def _b64(sealed: bytes) -> str:
    return base64.b64encode(sealed).decode()


def steps_sealed(alias: str, lo: str = "", hi: str = "") -> str:
    """SQL: the sealed step results of the events row aliased ``alias``, by name, with
    their key's id (NULL: none sealed); ``lo`` and ``hi`` bound the steps' days."""
    bound = f" AND st.event_id >= {lo} AND st.event_id < {hi}" if lo else ""
    return (
        "(SELECT jsonb_object_agg(st.name, st.key_id) FROM steps st"
        f" WHERE st.event_id = {alias}.id AND st.key_id IS NOT NULL{bound})"
    )


def _replace(ev: Prepared, key_id: int, body: bytes, headers_sealed: bytes) -> Prepared:
    """``dataclasses.replace`` without its cost on the receiver's path (it runs ``__init__``
    with every field: the larger part of sealing's CPU per request, in a profile): a copy
    of the frozen instance's fields with the sealed ones changed."""
    sealed = object.__new__(Prepared)
    sealed.__dict__.update(ev.__dict__)
    sealed.__dict__.update(key_id=key_id, body=body, headers={}, headers_sealed=headers_sealed)
    return sealed


_shared: weakref.WeakKeyDictionary[Engine, PayloadKeys] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def for_engine(engine: Engine) -> PayloadKeys:
    """The data keys of ``engine`` (made on first use, from the settings as they are then:
    sealing is on where ``INBOX_ENCRYPT_PAYLOADS`` is and ``INBOX_KEK`` names a key)."""
    with _shared_lock:
        found = _shared.get(engine)
        if found is None:
            enabled = bool(config.settings().encrypt_payloads) and kr.configured()
            found = _shared[engine] = PayloadKeys(
                engine,
                int(config.settings().data_key_cache),
                float(config.settings().data_key_ttl_s),
                enabled,
            )
        return found


__all__ = [
    "BODY",
    "HEADERS",
    "STEP",
    "Opened",
    "PayloadKeys",
    "SealBroken",
    "for_engine",
    "live",
    "steps_sealed",
]
