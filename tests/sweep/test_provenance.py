"""tsflash.sweep.provenance: the git commit comes from the project's own checkout, never from a
repository that happens to contain a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tsflash.sweep.provenance import PROJECT_ROOT, git_commit, package_versions

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(autouse=True)
def no_stated_commit(monkeypatch):
    monkeypatch.delenv("TSFLASH_GIT_COMMIT", raising=False)


def copied_project(parent: Path) -> Path:
    """pyproject.toml and the tsflash package copied into `parent`/project."""
    project = parent / "project"
    shutil.copytree(REPO / "tsflash", project / "tsflash", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", project / "pyproject.toml")
    return project


def commit_of_copy(project: Path, env_commit: str | None = None) -> str:
    """git_commit() as the copied package itself reports it (imported from the copy)."""
    env = {k: v for k, v in os.environ.items() if k != "TSFLASH_GIT_COMMIT"}
    env["PYTHONPATH"] = str(project)
    if env_commit:
        env["TSFLASH_GIT_COMMIT"] = env_commit
    code = "import tsflash.sweep.provenance as p; print(p.PROJECT_ROOT, p.git_commit())"
    out = subprocess.run([sys.executable, "-c", code], cwd=project.parent, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    root, commit = out.stdout.split()
    assert Path(root) == project  # the copy, not this checkout
    return commit


def test_a_copy_inside_another_repository_reports_unknown(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    project = copied_project(outer)
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "someone else's repository")
    outer_head = git(outer, "rev-parse", "HEAD")
    assert git_commit(project) == "unknown"  # not the outer repository's commit
    assert outer_head != "unknown" and commit_of_copy(project) == "unknown"
    assert commit_of_copy(project, env_commit="abc123") == "abc123"  # a copy without .git says where it came from


def test_the_project_checkout_reports_its_own_commit(tmp_path):
    project = copied_project(tmp_path)
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "the project")
    head = git(project, "rev-parse", "HEAD")
    assert git_commit(project) == head
    (project / "pyproject.toml").write_text("# edited\n")
    assert git_commit(project) == f"{head}-dirty"
    assert git_commit(tmp_path / "nowhere") == "unknown"


def test_a_stated_commit_wins_over_a_stale_git_directory(tmp_path, monkeypatch):
    """A lent machine's copy may carry an old .git: the commit the copier states is the truth."""
    project = copied_project(tmp_path)
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "stale")
    monkeypatch.setenv("TSFLASH_GIT_COMMIT", "021e2af")
    assert git_commit(project) == "021e2af"
    monkeypatch.delenv("TSFLASH_GIT_COMMIT")
    assert git_commit(project) == git(project, "rev-parse", "HEAD")


def test_this_checkout_and_package_versions():
    assert PROJECT_ROOT == REPO
    assert git_commit() not in ("", None)
    versions = package_versions()
    assert versions["python"] == sys.version.split()[0] and "torch" in versions
