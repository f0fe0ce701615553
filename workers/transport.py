"""kombu's Redis transport, with one fix: a broker restart must not kill a worker.

The crash (celery 5.7.0, kombu 5.7.0): when the broker goes away while the worker holds
unacknowledged messages (``task_acks_late`` and prefetch), the consumer's
``on_connection_error_after_connected`` first calls ``Connection.collect()``, then
``Connection.close()``. ``collect()`` closes the channels with the broker unreachable; the
default channel's close fails half-way (its BRPOP read raises a connection error, which
is swallowed) and the channel stays open. ``collect()`` then detaches the transport from
the connection (``transport.client = None``) to break reference cycles. ``close()``
closes that default channel again; now it gets as far as restoring the unacknowledged
messages, which builds a new Redis pool from ``transport.client`` (``_connparams``):
``AttributeError: 'NoneType' object has no attribute 'hostname'``. An AttributeError is
not a connection error, so the worker reports an "Unrecoverable error" and exits.

The fix: the transport keeps the connection it was made for, so a channel closed after
``collect()`` restores its messages (or, with the broker still down, fails with a
connection error, which kombu ignores and the consumer's reconnect loop handles). It is
used for ``redis://`` and ``sentinel://`` broker URLs only (``workers.app``);
tests/e2e/test_broker_restarts.py restarts a private redis-server under running processes.

Upstream: https://github.com/celery/kombu/issues/582 reports this AttributeError (a
channel closed after the transport let go of its connection, ``_connparams`` reading
``None.hostname``); it is closed, and the path still fails in kombu 5.7.0.
tests/integration/test_redis_transport.py replays the sequence on upstream's transport
and fails once kombu has fixed it: then delete this module.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis


class _Kept:
    _kept_client: Any = None

    @property
    def client(self) -> Any:
        return self._kept_client

    @client.setter
    def client(self, value: Any) -> None:
        # kombu sets None when the connection lets go of this transport; the channels it
        # still has (closed later) need the connection's parameters to reach Redis.
        if value is not None:
            self._kept_client = value


class Transport(_Kept, redis.Transport):
    """``redis://``."""


class Sentinel(_Kept, redis.SentinelTransport):
    """``sentinel://`` (``inbox.infra.redis_client``): the same channels, reached through
    the Sentinels, and the same crash when the master goes away under a worker."""
