"""A signing secret is added and revoked one way, for sources and endpoints alike
(``inbox.store.write.secrets``): no other command encrypts or revokes one itself."""

from __future__ import annotations

from pathlib import Path

WRITE = Path(__file__).resolve().parents[2] / "inbox" / "store" / "write"


def test_only_the_secrets_module_encrypts_or_compares_secrets() -> None:
    doing = {
        p.name
        for p in WRITE.glob("*.py")
        if ".encrypt(" in p.read_text() or ".decrypt(" in p.read_text()
    }
    assert doing <= {"secrets.py"}
