"""A plain (not editable) install works without the checkout: --version and migrate.

The checkout's tracked files are copied to a clean folder (what a fresh clone holds), built
into a wheel there, and the wheel installed into a new virtual environment. The dependencies
are not downloaded again: the new environment sees this one's site-packages through a ``.pth``
line, which does not run this environment's editable-install hook, so ``inbox`` can come only
from the wheel. Every command runs from a folder outside the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from inbox.store.schema import migrate

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a new environment with the wheel built from a clean copy."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the checkout's files")
    base = tmp_path_factory.mktemp("packaging")
    src = base / "src"
    files = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    pip = (sys.executable, "-m", "pip")
    run(
        *pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", base / "dist", src, cwd=base
    )
    [wheel] = (base / "dist").glob("webhook_inbox-*.whl")
    venv = base / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=base)
    python = venv / "bin" / "python"
    run(*pip, "--python", python, "install", "-q", "--no-deps", wheel, cwd=base)
    purelib = run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=base
    )
    Path(purelib.strip(), "_inbox_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    return venv / "bin"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_installed_package_comes_from_the_wheel(installed: Path, elsewhere: Path) -> None:
    where = run(
        installed / "python", "-c", "import inbox; print(inbox.__file__)", cwd=elsewhere
    ).strip()
    assert Path(where).is_relative_to(installed.parent), where
    missing = subprocess.run(
        [installed / "python", "-c", "import dev"], cwd=elsewhere, env=clean_env()
    )
    assert missing.returncode != 0  # dev tooling is not installed


def test_inbox_version_names_the_package_version(installed: Path, elsewhere: Path) -> None:
    from importlib.metadata import version

    out = run(installed / "inbox", "--version", cwd=elsewhere, env=clean_env())
    assert out.strip() == f"inbox, version {version('webhook-inbox')}"


@pytest.fixture
def empty_database(pg_server_url: str) -> Iterator[str]:
    name = f"inbox_pkg_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_server_url.partition("?")
    yield base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_inbox_migrate_runs_the_packaged_migrations(
    installed: Path, elsewhere: Path, empty_database: str
) -> None:
    out = run(
        installed / "inbox", "migrate", cwd=elsewhere, env=clean_env(DATABASE_URL=empty_database)
    )
    assert "migrated to head" in out
    with psycopg.connect(empty_database) as conn:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert row is not None and row[0] == migrate.head_revision()
