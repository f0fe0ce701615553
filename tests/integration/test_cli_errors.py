"""Every ``inbox`` command, met with mistakes: a non-zero exit, one line on stderr that
says what is wrong, and never a traceback.

The command tree is walked, so a command added later is attacked too; a parameter of a
type this file has no hostile values for fails the walk until some are added here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner, Result

from inbox.cli import main
from inbox.cli.params import MAX_TEXT, Rate, Seconds, Text

# Commands that make something when the names they are given are new: a well-formed
# unknown name is a success for them, not a mistake.
MAKERS = {"tenants create", "tokens create", "evidence keygen"}

TEXT_HOSTILE = ["", "   ", "x" * (MAX_TEXT + 1), "a\x00b", "\x1b[31mred", "tab\x7f"]


@dataclass(frozen=True)
class Cmd:
    path: str
    command: click.Command


def commands(group: click.Group = main, prefix: str = "") -> Iterator[Cmd]:
    for name, cmd in sorted(group.commands.items()):
        path = f"{prefix} {name}".strip()
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path)
        else:
            yield Cmd(path, cmd)


ALL = list(commands())


def hostile(param: click.Parameter) -> list[str]:
    """Values this parameter must refuse, by its type."""
    t = param.type
    if isinstance(t, Text):
        return TEXT_HOSTILE
    if isinstance(t, Seconds):
        return ["5,abc", "", ",", "-5", "1e3", "5,,30", "90000", ",".join(["1"] * 21)]
    if isinstance(t, Rate):
        return ["0", "-1", "nan", "inf", "abc", "", "1e9"]
    if isinstance(t, click.IntRange):
        out = ["abc", "", "1.5", "9" * 30]
        out += [str(t.min - 1)] if t.min is not None else []
        out += [str(t.max + 1)] if t.max is not None else []
        return out
    if isinstance(t, click.Choice):
        return ["nosuch", ""]
    if isinstance(t, click.DateTime):
        return ["abc", "2026-13-45", ""]
    if isinstance(t, click.File):
        return ["/nonexistent/ids.txt"]
    raise AssertionError(f"no hostile values for {param.name} of type {t!r}: add some here")


def well_formed(param: click.Parameter) -> str:
    """A value of the right form that names nothing that exists."""
    t = param.type
    if isinstance(t, click.Choice):
        return str(t.choices[0])
    if isinstance(t, click.IntRange):
        return str(t.min if t.min is not None else 1)
    if param.name == "url":
        return "https://example.invalid/hook"
    if param.metavar == "TENANT/SOURCE" or param.name == "ref":
        return "nosuch/source"
    return "nosuch-zz"


def attackable(param: click.Parameter) -> bool:
    return not (isinstance(param, click.Option) and (param.is_flag or param.is_bool_flag))


def argv(cmd: Cmd, override: click.Parameter | None = None, value: str = "") -> list[str]:
    """The command with its required parameters well formed, and ``override`` set."""
    args = cmd.path.split()
    for p in cmd.command.params:
        if p is override:
            given = value
        elif p.required:
            given = well_formed(p)
        else:
            continue
        if isinstance(p, click.Option):
            args += [p.opts[0], given]
        else:
            args.append(given)
    return args


def hint(param: click.Parameter) -> list[str]:
    """How click names the parameter in an error."""
    if isinstance(param, click.Option):
        return list(param.opts)
    return [param.metavar or "", (param.name or "").upper()]


def run(args: list[str]) -> Result:
    return CliRunner().invoke(main, args, prog_name="inbox")


def assert_one_line_error(result: Result, args: list[str]) -> str:
    shown = f"inbox {' '.join(a[:40] for a in args)}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{shown}: raised {result.exception!r}") from result.exception
    assert result.exit_code != 0, f"{shown}: exit 0\n{result.output}"
    assert "Traceback" not in result.output, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), f"{shown}: {result.stderr!r}"
    assert "unexpected error" not in lines[0], f"{shown}: {lines[0]}"
    return lines[0]


@pytest.fixture
def world(database_url: str, engine, make_source) -> None:
    """One tenant and source exist, so a lookup is not refused merely for an empty table."""
    make_source(tenant="acme", name="billing")


def test_the_walk_finds_every_command():
    paths = {c.path for c in ALL}
    assert {"events list", "replay", "endpoints create", "deliveries replay"} <= paths
    assert len(paths) >= 30


@pytest.mark.parametrize("cmd", ALL, ids=[c.path for c in ALL])
def test_every_parameter_refuses_hostile_values_in_one_line(cmd: Cmd, world):
    attacked = 0
    for param in cmd.command.params:
        if not attackable(param):
            continue
        for value in hostile(param):
            args = argv(cmd, param, value)
            line = assert_one_line_error(run(args), args)
            # Refused for this value (not for a lookup that failed first): the line names it.
            assert any(h and h in line for h in hint(param)), f"{args}: {line}"
            attacked += 1
    unknown = [*argv(cmd), "--no-such-option"]
    assert "No such option" in assert_one_line_error(run(unknown), unknown)
    assert attacked or not [p for p in cmd.command.params if attackable(p)]


@pytest.mark.parametrize("cmd", ALL, ids=[c.path for c in ALL])
def test_unknown_names_and_ids_are_errors(cmd: Cmd, world):
    """Every tenant, source, event, delivery, endpoint, job or token named that does not
    exist is an error (a maker's new names are the exception)."""
    if cmd.path in MAKERS:
        pytest.skip("makes what it names")
    texts = [p for p in cmd.command.params if isinstance(p.type, Text) and p.required]
    if not texts:
        pytest.skip("names nothing it requires")
    args = argv(cmd)
    assert_one_line_error(run(args), args)


@pytest.mark.parametrize(
    "args, says",
    [
        (["events", "list", "--tenant", "acmee"], "No tenant 'acmee'"),
        (["events", "list", "--tenant", "acme", "--source", "bilING"], "No source 'bilING'"),
        (["events", "list", "--source", "nosuch"], "No source 'nosuch'"),
        (["sources", "list", "--tenant", "acmee"], "No tenant 'acmee'"),
        (["endpoints", "list", "--tenant", "acmee"], "No tenant 'acmee'"),
        (["deliveries", "list", "--tenant", "acmee"], "No tenant 'acmee'"),
        (["replay", "evt_doesnotexist"], "No event evt_doesnotexist"),
        (["replay", "--quarantined", "--tenant", "acmee"], "No tenant 'acmee'"),
        (["replay", "--rate", "0", "evt_x"], "'--rate': 0.0 is not in the range"),
        (["replay", "--approve", "rpl_nosuch"], "No bulk replay rpl_nosuch"),
        (["events", "show", "evt_doesnotexist"], "No event evt_doesnotexist"),
        (["deliveries", "show", "dlv_nosuch"], "No delivery dlv_nosuch"),
        (["deliveries", "replay", "dlv_nosuch"], "No delivery dlv_nosuch"),
        (["endpoints", "show", "ep_nosuch"], "No endpoint ep_nosuch"),
        (["sources", "show", "acme/nosuch"], "No source 'nosuch' for tenant 'acme'"),
        (["sources", "show", "acme"], "expected TENANT/SOURCE"),
        (["tokens", "revoke", "nosuch"], "no live token named nosuch"),
        (
            ["endpoints", "create", "--tenant", "acme", "--url", "https://x.example/h",
             "--retry-schedule", "5,abc"],
            "'--retry-schedule': 'abc' is not a whole number of seconds",
        ),
        (
            ["endpoints", "create", "--tenant", "acme", "--url", "https://x.example/h",
             "--event-types", "a,,b"],
            "--event-types: 'a,,b': an empty type",
        ),
    ],
)  # fmt: skip
def test_each_mistake_named_in_the_issue_is_one_line(args, says, world, engine):
    line = assert_one_line_error(run(args), args)
    assert says in line, line
    from sqlalchemy import text

    with engine.connect() as conn:  # a refused create made nothing
        assert conn.execute(text("SELECT count(*) FROM endpoints")).scalar() == 0


def test_an_event_that_is_not_quarantined_is_not_replayed_and_says_so(world, client, make_source):
    from tests.helpers import body_of, hmac_headers

    src = make_source()
    body = body_of({"n": 1})
    public_id = client.post(src.path, data=body, headers=hmac_headers("s3cret", body, "k")).json[
        "id"
    ]
    result = run(["replay", public_id])
    line = assert_one_line_error(result, ["replay", public_id])
    assert "1 of the events named were not quarantined" in line
    assert "replayed 0 of 1" in result.stdout


def test_an_unexpected_error_is_one_line_and_traceback_shows_it(world, monkeypatch):
    from inbox.store.reads import sources

    def broken(*_a, **_k):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(sources, "tenant_settings", broken)
    result = run(["tenants", "list"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert "unexpected error (RuntimeError: a bug over two lines): this is a bug" in line
    shown = run(["--traceback", "tenants", "list"])
    assert isinstance(shown.exception, RuntimeError)


def _process(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inbox.cli", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args, status",
    [
        (["events", "list", "--tenant", "acmee"], 1),
        (["replay", "evt_doesnotexist"], 1),
        (["replay", "--rate", "0", "evt_x"], 2),
        (["endpoints", "create", "--tenant", "acme", "--url", "https://x.example/h",
          "--retry-schedule", "5,abc"], 2),
    ],
)  # fmt: skip
def test_the_real_command_exits_non_zero_with_one_line(args, status, world):
    proc = _process(args)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_mistyped_scheme_is_answered_with_the_closest_names_not_all():
    args = ["sources", "create", "--tenant", "acme", "--name", "b", "--scheme", "strpe"]
    line = assert_one_line_error(run(args), args)
    assert "'strpe' is not a scheme; did you mean 'stripe'?" in line, line
    assert "inbox sources schemes lists them" in line
    assert "zoom" not in line and "bitbucket" not in line  # not the 37 names
    unlike = ["sources", "create", "--tenant", "acme", "--name", "b", "--scheme", "qqqqqq"]
    line = assert_one_line_error(run(unlike), unlike)
    assert "did you mean" not in line and "inbox sources schemes lists them" in line, line
