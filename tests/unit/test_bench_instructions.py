"""bench.instructions: what it hands the counted processes, and the checkouts it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import instructions

ROOT = Path(__file__).resolve().parents[2]


def test_tracing_is_off_in_the_counted_process_whatever_this_shell_says(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4318")
    env = instructions.tracing_env(None)
    assert not [k for k in env if k.startswith("OTEL_")]


def test_otlp_points_the_counted_process_at_the_sink(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://elsewhere:4318/v1/traces")
    env = instructions.tracing_env("http://127.0.0.1:4999")
    assert env["OTEL_TRACES_EXPORTER"] == "otlp"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4999"
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" not in env


def test_a_checkout_needs_its_own_venv(tmp_path, capsys):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "instructions.py").write_text("")
    with pytest.raises(SystemExit):
        instructions.parse_args(["--checkout", str(tmp_path)])
    assert "has no .venv" in capsys.readouterr().err


def test_a_checkout_with_a_venv_is_taken_in_order():
    args = instructions.parse_args(
        ["--checkout", str(ROOT), "--checkout", str(ROOT), "--runs", "2"]
    )
    assert args.checkout == [ROOT, ROOT]
    assert args.runs == 2
