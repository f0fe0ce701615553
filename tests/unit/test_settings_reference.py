"""The settings are declared once: environment name, default and description."""

from __future__ import annotations

import os
from dataclasses import fields

import pytest

from dev.docs_hooks import MARKER, SCHEMES_MARKER, on_page_markdown
from inbox.domain.signatures import SCHEMES
from inbox.infra import config
from inbox.infra.config import Settings, documented, undocumented


def test_every_setting_has_a_variable_and_a_description():
    assert undocumented() == [], "declare these with setting(ENV, default, doc)"
    for s in documented():
        assert s.env and s.doc.strip(), s
    assert len(list(documented())) == len(fields(Settings))


def test_variable_names_are_unique():
    names = [s.env for s in documented()]
    assert len(names) == len(set(names))


def test_an_empty_environment_gives_the_declared_defaults():
    assert Settings.from_env({}) == Settings()


def _sample(default: object) -> tuple[str, object]:
    if isinstance(default, bool) or default is None:
        return "1", True
    if isinstance(default, int):
        return str(default + 7), default + 7
    if isinstance(default, float):
        return "0.25", 0.25
    if isinstance(default, tuple):
        return "a.b, c", ("a.b", "c")
    return "some-value", "some-value"


def test_from_env_reads_every_declared_variable():
    env: dict[str, str] = {}
    expected: dict[str, object] = {}
    for f in fields(Settings):
        raw, value = _sample(f.default)
        env[f.metadata["env"]] = raw
        expected[f.name] = value
    got = Settings.from_env(env)
    for name, value in expected.items():
        assert getattr(got, name) == value, name


def test_the_broker_defaults_to_redis():
    assert Settings.from_env({"REDIS_URL": "redis://r:1/0"}).broker_url == "redis://r:1/0"
    got = Settings.from_env({"REDIS_URL": "redis://r:1/0", "BROKER_URL": "amqp://b//"})
    assert got.broker_url == "amqp://b//"


def test_a_number_that_does_not_parse_names_its_variable():
    with pytest.raises(ValueError, match=r"^INBOX_BATCH_SIZE='ten' is not an integer$"):
        Settings.from_env({"INBOX_BATCH_SIZE": "ten"})


def test_the_reference_page_lists_every_variable_with_its_default():
    page = on_page_markdown(f"# Configuration\n\n{MARKER}\n")
    assert MARKER not in page
    assert "| `INBOX_BATCH_SIZE` | `100` |" in page
    for s in documented():
        assert f"| `{s.env}` | {s.default} |" in page


def test_the_provider_page_lists_every_scheme():
    page = on_page_markdown(f"# Providers\n\n{SCHEMES_MARKER}\n")
    assert SCHEMES_MARKER not in page
    for name, scheme in SCHEMES.items():
        assert f"| `{name}` | " in page
        assert scheme.summary.replace("|", "\\|") in page


def test_the_key_encryption_key_is_a_setting_kept_out_of_the_repr():
    key = "a-key-that-must-not-be-printed"
    got = Settings.from_env({"INBOX_KEK": key, "PROMETHEUS_MULTIPROC_DIR": "/tmp/m"})
    assert got.kek == key and got.metrics_dir == "/tmp/m"
    assert key not in repr(got)


def test_the_settings_are_read_once_until_reloaded(monkeypatch):
    monkeypatch.setenv("INBOX_BATCH_SIZE", "7")  # the test's monkeypatch reloads
    first = config.settings()
    assert first.batch_size == 7 and config.settings() is first
    os.environ["INBOX_BATCH_SIZE"] = "8"  # changed behind the settings' back: not seen
    try:
        assert config.settings() is first
        assert config.reload().batch_size == 8 and config.settings().batch_size == 8
    finally:
        os.environ["INBOX_BATCH_SIZE"] = "7"


def test_the_cli_address_defaults_to_this_host_and_port():
    assert Settings.from_env({}).public_base == "http://127.0.0.1:8000"
    assert Settings.from_env({"PORT": "9001"}).public_base == "http://127.0.0.1:9001"
    got = Settings.from_env({"INBOX_PUBLIC_URL": "https://hooks.example/"})
    assert got.public_base == "https://hooks.example"
