"""Redis clients from a URL: one server, or the master that Redis Sentinel names.

``REDIS_URL`` (and ``BROKER_URL``) take kombu's Sentinel form, with the master's name as a
query parameter::

    sentinel://[:password@]host1:26379;sentinel://host2:26379;sentinel://host3:26379/0?master_name=mymaster

Each ``sentinel://`` part names one Sentinel; the database number and ``master_name`` may
follow any of them (the last, usually); the password is the master's. The doorbell, the
rate limiter's store, the alarms and the beat lease use ``client`` (redis-py's
``Sentinel.master_for``: a connection asks the Sentinels where the master is when it is
made, so after a promotion the next connection reaches the new master); Celery's broker
gets ``kombu_broker`` (kombu's ``sentinel://`` transport with its ``master_name`` transport
option). Any other URL is redis-py's own (``redis://``, ``rediss://``, ``unix://``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
from redis.sentinel import Sentinel

SCHEME = "sentinel://"
DEFAULT_PORT = 26379


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int = 0
    password: str | None = None
    username: str | None = None


def is_sentinel(url: str) -> bool:
    return url.strip().lower().startswith(SCHEME)


def parse(url: str) -> SentinelUrl:
    """The Sentinels, master name, database and password of a ``sentinel://`` URL; a
    ValueError saying what is missing otherwise."""
    sentinels: list[tuple[str, int]] = []
    master = ""
    db = 0
    password = username = None
    for part in url.strip().split(";"):
        if not part:
            continue
        if not part.lower().startswith(SCHEME):
            raise ValueError(f"every part of a Sentinel URL starts with {SCHEME}")
        bits = urlsplit(part)
        if not bits.hostname:
            raise ValueError("a sentinel:// part names no host")
        sentinels.append((bits.hostname, bits.port or DEFAULT_PORT))
        if bits.password:
            password = unquote(bits.password)
            username = unquote(bits.username) if bits.username else None
        if bits.path.strip("/"):
            db = int(bits.path.strip("/"))
        for name in parse_qs(bits.query).get("master_name", []):
            master = name
    if not sentinels:
        raise ValueError("a Sentinel URL names no Sentinel")
    if not master:
        raise ValueError("a Sentinel URL needs ?master_name=NAME (the master's name)")
    return SentinelUrl(tuple(sentinels), master, db, password, username)


def client(
    url: str, socket_timeout: float | None = None, socket_connect_timeout: float | None = None
) -> redis.Redis:
    """A client of ``url``'s Redis (through its Sentinels, for a ``sentinel://`` URL)."""
    timeouts: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout,
    }
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **timeouts)
    target = parse(url)
    sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        list(target.sentinels), sentinel_kwargs=dict(timeouts), **timeouts
    )
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
        target.master_name,
        db=target.db,
        password=target.password,
        username=target.username,
    )
    return master


def kombu_broker(url: str) -> tuple[str, dict[str, Any]]:
    """The URL kombu takes for ``url`` and the transport options it needs: a Sentinel URL
    without its query, the password and database on its first part (where kombu reads
    them), and ``master_name``; any other URL as it is."""
    if not is_sentinel(url):
        return url, {}
    target = parse(url)
    auth = ""
    if target.password is not None:
        auth = f"{quote(target.username or '', safe='')}:{quote(target.password, safe='')}@"
    parts = [f"{SCHEME}{host}:{port}" for host, port in target.sentinels]
    parts[0] = f"{SCHEME}{auth}{target.sentinels[0][0]}:{target.sentinels[0][1]}/{target.db}"
    return ";".join(parts), {"master_name": target.master_name}
