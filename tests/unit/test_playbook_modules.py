"""INBOX_PLAYBOOKS: modules loaded with their origin remembered, a module that does not
import said in one line, a source's playbook name checked with a message that helps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inbox.domain.errors import BadRequest
from inbox.domain.playbooks import Registry, registry
from inbox.services import playbooks


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # modules next to the Procfile are found, as celery -A does
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    for name in ("pb_ok_mod", "pb_broken_mod"):
        sys.modules.pop(name, None)


def test_a_module_in_the_working_directory_registers_with_its_origin(module_dir: Path) -> None:
    (module_dir / "pb_ok_mod.py").write_text(
        "from inbox.domain.playbooks import Playbook, register\n"
        "p = Playbook('pb-ok')\n"
        "@p.step('one', effect=False)\n"
        "def one(ctx):\n    return 1\n"
        "register(p, event_type='never.used')\n"
    )
    try:
        playbooks.load(("pb_ok_mod",))
        listed = {p.name: p for p in playbooks.listing()}
    finally:  # the process-wide registry as it was
        registry.by_name.pop("pb-ok", None)
        registry.origins.pop("pb-ok", None)
        registry._rules = [r for r in registry._rules if r.playbook.name != "pb-ok"]
    assert listed["pb-ok"].module == "pb_ok_mod"
    assert listed["pb-ok"].file == str(module_dir / "pb_ok_mod.py")
    assert listed["pb-ok"].steps == ("one",)
    assert listed["record"].module == "inbox.domain.playbooks"


@pytest.mark.parametrize(
    ("source", "cause"),
    [
        (None, "ModuleNotFoundError: No module named 'pb_missing_mod'"),
        (
            "raise RuntimeError('needs FRAUD_API_URL\\nset')",
            "RuntimeError: needs FRAUD_API_URL set",
        ),
        ("def broken(:\n", "SyntaxError"),
    ],
)
def test_a_module_that_does_not_import_is_one_line_naming_the_setting(
    module_dir: Path, source: str | None, cause: str
) -> None:
    name = "pb_missing_mod" if source is None else "pb_broken_mod"
    if source is not None:
        (module_dir / f"{name}.py").write_text(source)
    with pytest.raises(playbooks.CannotLoad) as caught:
        playbooks.load((name,))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"INBOX_PLAYBOOKS: module {name!r} does not import ({cause}")
    assert "remove it from INBOX_PLAYBOOKS" in message


def test_a_playbook_name_is_checked_with_a_message_that_says_what_to_do() -> None:
    reg = Registry()
    reg.by_name["record"] = registry.by_name["record"]
    playbooks.check_name(None, (), reg)
    playbooks.check_name("record", (), reg)
    with pytest.raises(BadRequest, match="INBOX_PLAYBOOKS is not set, so only the built-in"):
        playbooks.check_name("deny", (), reg)
    with pytest.raises(
        BadRequest, match=r"registered by INBOX_PLAYBOOKS \(a, b\); registered: record"
    ):
        playbooks.check_name("deny", ("a", "b"), reg)
