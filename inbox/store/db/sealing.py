"""The data keys of a process: sealing payloads on the way in, opening them on the way out.

A payload is sealed under its tenant's data key, or its subject's (``inbox.domain.erasure``),
with one AEAD call per column (``inbox.infra.envelope``). The wrapped keys live in the key
store (``inbox.store.db.keystore``, a database of their own); the inbox's database has each
key's registry row (``data_keys``: tenant, subject digest, destroyed or not), no key
material. The keys are unwrapped once and kept per engine in a bounded cache (least
recently used out first, each entry for at most ``INBOX_DATA_KEY_TTL_S``): a receiver whose
tenant's key is cached seals with no round trip at all. A key is made on first use (a
tenant's first payload, a subject's first): the registry's live row if another process made
it; else a new key committed in the key store first, then registered (``ON CONFLICT DO
NOTHING`` on the live key's unique index, so two processes racing end up with the same key;
the loser's key is deleted again, and would be a harmless orphan if that failed).

Opening reads the wrapped key by id from the key store (cached as well). Every reader's own
statement says whether the registry has the key live (``live``), so an erasure is seen at
once by every process whatever it has cached; a key the key store no longer has (erased,
or a copy of the inbox's database restored from before an erasure) opens nothing. Sealing
with a cached tenant or subject key is the one use not checked: a process that had the key
may seal under it for at most ``INBOX_DATA_KEY_TTL_S`` after an erasure (such a payload
reads as erased; docs/explanation/security.md says so).
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
from inbox.infra.envelope import DataKey, SealBroken, new_key, tagged_key, unwrap, wrap
from inbox.store.db import keystore

BODY = "body"
HEADERS = "headers"
DELIVERY = "deliveries.body"
RESPONSE = "events.response_body"

_LIVE = text(
    "SELECT id FROM data_keys WHERE tenant_id = :t AND subject_digest = :s AND destroyed_at IS NULL"
)
_REGISTER = text(
    "INSERT INTO data_keys (id, tenant_id, subject_digest) VALUES (:id, :t, :s)"
    " ON CONFLICT (tenant_id, subject_digest) WHERE destroyed_at IS NULL DO NOTHING"
    " RETURNING id"
)


class KeyLost(SealBroken):
    """The registry has a live key that the key store does not (a key store restored from
    an older backup, or pointed at the wrong database): nothing is sealed under a guess."""

    http_status = 503


def destroyed(conn: Connection, values: list[bytes]) -> set[int]:
    """Of the keys these ``seal_tagged`` values name, those the registry has destroyed: one
    look-up per batch, so an erasure is seen at once whatever a process has cached."""
    ids = {k for k in map(tagged_key, values) if k is not None}
    if not ids:
        return set()
    found = conn.execute(_DESTROYED, {"ids": sorted(ids)}).scalars()
    return {int(k) for k in found}


_DESTROYED = text("SELECT id FROM data_keys WHERE id = ANY(:ids) AND destroyed_at IS NOT NULL")


def live(event: str) -> str:
    """SQL: whether the key of the events row aliased ``event`` is live in the registry
    (NULL: in clear); one primary-key probe inside the reader's own statement."""
    return f"(SELECT k.destroyed_at IS NULL FROM data_keys k WHERE k.id = {event}.key_id)"


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
        store = keystore.current()
        self.misses += 1
        params = {"t": k[0], "s": k[1]}
        with engine.connect() as conn:
            key_id = conn.execute(_LIVE, params).scalar()
        if key_id is None:
            # The key store first, committed: a failure from here on leaves an orphan key
            # that nothing is sealed under, never a payload whose key was not kept.
            made = store.create(tenant_id, wrap(ring, new_key()))
            with engine.begin() as conn:
                key_id = conn.execute(_REGISTER, {**params, "id": made}).scalar()
                if key_id is None:  # another process registered one meanwhile: use it
                    key_id = conn.execute(_LIVE, params).scalar_one()
            if key_id != made:
                store.destroy([made])
        wrapped = store.get(int(key_id))
        if wrapped is None:
            raise KeyLost(
                f"data key {key_id} is live in the inbox's database but not in the key store"
                " (INBOX_KEYSTORE_URL): restored from an older backup, or the wrong database?"
            )
        key = DataKey(int(key_id), unwrap(ring, wrapped))
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
    def key_by_id(self, conn: Connection | None, key_id: int) -> DataKey | None:
        """The key ``key_id`` (read from the key store when not cached); None once
        destroyed, or where the key store has no such key."""
        found = self._get(self._by_id, key_id)
        if found is not None:
            key: DataKey | None = found[0]
            return key
        self.misses += 1
        wrapped = keystore.current().get(key_id)
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

    def event_key(self, conn: Connection, event_id: int) -> DataKey | None:
        """The key event ``event_id``'s payload is sealed under (None: in clear, or erased):
        cached where a worker loaded the event, else its row says."""
        found = self._get(self._events, event_id)
        if found is not None:
            key: DataKey | None = found[0]
            return key
        key_id = conn.execute(_EVENT_KEY, {"id": event_id}).scalar()
        return None if key_id is None else self.key_by_id(conn, int(key_id))

    def seal_tagged(
        self, conn: Connection, event_id: int | None, label: str, value: bytes, column: str
    ) -> bytes:
        """A payload-bearing value of another table (a delivery's body, a synchronous
        answer) sealed under its event's key, naming the key itself
        (``envelope.DataKey.seal_tagged``); as it is where the event's payload is in clear."""
        key = None if event_id is None else self.event_key(conn, event_id)
        return value if key is None else key.seal_tagged(value, column, label)

    def open_tagged(self, value: bytes, column: str, live: bool | None = None) -> bytes | None:
        """A ``seal_tagged`` value in clear (a value stored in clear as it is); None once
        its key was destroyed. ``live``: whether the registry has the key live, as the
        reader's own statement found it (False: erased, whatever this process cached)."""
        key_id = tagged_key(value)
        if key_id is None:
            return value
        if live is False:
            self.forget({key_id})
            return None
        key = self.key_by_id(None, key_id)
        return None if key is None else key.open_tagged(value, column)

    def seal_steps(
        self, conn: Connection, event_id: int, steps: dict[str, Any]
    ) -> tuple[dict[str, Any], int | None]:
        """Step results as stored: each a JSON string of its sealed bytes (base64) under the
        event's key, and that key's id; as they are (and None) for a payload in clear."""
        if not steps:
            return steps, None
        key = self.event_key(conn, event_id)
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
        self,
        conn: Connection,
        steps: dict[str, Any],
        sealed: dict[str, Any] | None,
        erased: bool = False,
    ) -> dict[str, Any]:
        """Step results in clear: ``sealed`` names the sealed ones, with their key's id (a
        destroyed key: the result reads None; ``erased``: the reader's statement found the
        event's key destroyed, so the key store is not asked)."""
        if not sealed:
            return dict(steps)
        out = dict(steps)
        for name, key_id in sealed.items():
            key = None if erased else self.key_by_id(conn, int(key_id))
            raw = str(steps[name])
            out[name] = (
                None if key is None else json.loads(key.open(base64.b64decode(raw), STEP + name))
            )
        return out


STEP = "step:"
INTENT = "intent:"  # a callback intent's envelope, bound to its webhook-id
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
    sealing is on where ``INBOX_ENCRYPT_PAYLOADS`` is, ``INBOX_KEK`` names a key and
    ``INBOX_KEYSTORE_URL`` a key store)."""
    with _shared_lock:
        found = _shared.get(engine)
        if found is None:
            enabled = (
                bool(config.settings().encrypt_payloads)
                and kr.configured()
                and keystore.configured()
            )
            found = _shared[engine] = PayloadKeys(
                engine,
                int(config.settings().data_key_cache),
                float(config.settings().data_key_ttl_s),
                enabled,
            )
        return found


__all__ = [
    "BODY",
    "DELIVERY",
    "HEADERS",
    "INTENT",
    "RESPONSE",
    "STEP",
    "Opened",
    "PayloadKeys",
    "SealBroken",
    "destroyed",
    "for_engine",
    "live",
    "steps_sealed",
]
