"""REDIS_URL / BROKER_URL naming Sentinels: one form for the inbox's clients and kombu."""

from __future__ import annotations

import pytest

from inbox.infra import redis_client
from inbox.infra.broker import celery_conf
from inbox.infra.config import Settings

URL = "sentinel://:pw@h1:26379;sentinel://h2:26380;sentinel://h3/2?master_name=inbox"


def test_the_sentinel_form_is_parsed_whole():
    got = redis_client.parse(URL)
    assert got.sentinels == (("h1", 26379), ("h2", 26380), ("h3", 26379))
    assert (got.master_name, got.db, got.password) == ("inbox", 2, "pw")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sentinel://h1:26379;sentinel://h2:26379", "master_name"),
        ("sentinel://h1:26379;redis://h2:6379?master_name=m", "every part"),
        ("sentinel://?master_name=m", "no host"),
    ],
)
def test_an_incomplete_sentinel_url_says_what_is_missing(url, why):
    with pytest.raises(ValueError, match=why):
        redis_client.parse(url)


def test_kombu_gets_its_own_form_and_the_master_name_as_a_transport_option():
    url, options = redis_client.kombu_broker(URL)
    assert url == "sentinel://:pw@h1:26379/2;sentinel://h2:26380;sentinel://h3:26379"
    assert options == {"master_name": "inbox"}
    assert redis_client.kombu_broker("redis://h:6379/0") == ("redis://h:6379/0", {})


def test_the_broker_settings_carry_the_master_name():
    conf = celery_conf(Settings(broker_url=URL))
    assert conf["broker_transport_options"] == {"master_name": "inbox"}
    assert conf["broker_url"].startswith("sentinel://:pw@h1:26379/2;")


def test_quorum_queues_declare_their_type_and_what_celery_needs_with_them():
    conf = celery_conf(Settings(broker_url="amqp://h//", broker_queues="quorum"))
    queues = {q.name: q for q in conf["task_queues"]}
    assert set(queues) == {"inbox", "deliveries"}
    for q in queues.values():
        assert q.queue_arguments == {"x-queue-type": "quorum"}
        assert q.exchange.type == "topic"  # native delayed delivery for countdowns
    assert conf["worker_detect_quorum_queues"] is True  # no global QoS
    assert conf["broker_transport_options"]["confirm_publish"] is True
    classic = celery_conf(Settings(broker_url="amqp://h//"))
    assert "task_queues" not in classic


def test_an_unknown_queue_type_is_refused_in_one_line():
    with pytest.raises(RuntimeError, match="INBOX_BROKER_QUEUES='mirrored'"):
        celery_conf(Settings(broker_url="amqp://h//", broker_queues="mirrored"))
