"""The locks install on the oldest Python that README.md and pyproject.toml allow.

requirements.txt, requirements-hub.txt and requirements-test.txt pin exact versions, and one pin
whose Requires-Python is above the claimed minimum breaks the install there (Soup Sieve 3 needs
Python 3.11.5; Debian 12's Python is 3.11.2). The three locks are resolved together, as
`make setup` installs them (one resolve, so a package they share keeps its one pin), for Debian's
own interpreter: a throwaway venv made with it, and the running pip pointed at it (`pip --python`;
`make setup` also upgrades pip before it installs). `make lab` (requirements.txt) and `make hub`
(with requirements-hub.txt) install subsets of the same exact pins, so the one resolve covers
them (each lock's own pins are checked to be in its report). A dry run installs nothing; the pip
cache is the user's. pip's report gives every locked package's Requires-Python, checked against
the minimum that pyproject.toml and the README state.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from tools.pythons import LOCKS  # the three locks make setup installs

ROOT = Path(__file__).resolve().parents[1]
#: Debian 12's interpreter (3.11.2), older than the one the course's venv is usually made with.
DEBIAN_PYTHON = Path("/usr/bin/python3.11")


@dataclass(frozen=True)
class DryRun:
    """The locks' `pip install --dry-run`: exit code, stderr and report (None if it failed)."""

    returncode: int
    stderr: str
    report: dict[str, Any] | None


def claimed_minimum() -> Version:
    """The lower bound of pyproject.toml's requires-python (">=3.11" gives 3.11)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bounds = [
        Version(s.version) for s in SpecifierSet(project["requires-python"]) if s.operator == ">="
    ]
    if len(bounds) != 1:
        raise ValueError(
            f"requires-python needs exactly one '>=' bound, got {project['requires-python']!r}"
        )
    return bounds[0]


def packages_excluding(report: dict[str, Any], version: Version) -> list[str]:
    """The packages of a pip report whose Requires-Python excludes `version`."""
    excluded = []
    for item in report["install"]:
        meta = item["metadata"]
        try:
            spec = SpecifierSet(meta.get("requires_python") or "")
        except InvalidSpecifier:  # pip ignores an invalid Requires-Python too
            continue
        if not spec.contains(version, prereleases=True):
            excluded.append(f"{meta['name']}=={meta['version']} (Requires-Python {spec})")
    return excluded


@pytest.fixture(scope="module")
def debian_venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a throwaway venv (no pip of its own) made with Debian's Python."""
    if not DEBIAN_PYTHON.exists():
        pytest.skip(f"{DEBIAN_PYTHON} (Debian's Python 3.11) is not on this machine")
    venv = tmp_path_factory.mktemp("debian-venv")
    cmd = [str(DEBIAN_PYTHON), "-m", "venv", "--without-pip", str(venv)]
    made = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, f"{DEBIAN_PYTHON} -m venv failed:\n{made.stderr}"
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def dry_run(debian_venv_python: Path, tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    """The three locks' dry run for Debian's interpreter, resolved together as make setup does."""
    report = tmp_path_factory.mktemp("pip-report") / "report.json"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    cmd = [sys.executable, "-m", "pip", "--python", str(debian_venv_python)]
    cmd += ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    cmd += [arg for lock in LOCKS for arg in ("-r", str(ROOT / lock))]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    data = json.loads(report.read_text()) if done.returncode == 0 else None
    return DryRun(done.returncode, done.stderr, data)


def pins(lock: str) -> dict[str, str]:
    """A lock's exact pins, {normalised name: version}."""
    found = {}
    for line in (ROOT / lock).read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;]+)", line):
            found[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return found


@pytest.mark.slow
def test_the_locks_install_on_debians_python(dry_run: DryRun) -> None:
    lines = dry_run.stderr.splitlines()
    errors = "\n".join([line for line in lines if line.startswith("ERROR")] or lines[-25:])
    assert dry_run.returncode == 0, f"the locks do not install on {DEBIAN_PYTHON}:\n{errors}"
    # A yanked release installs when pinned exactly (Soup Sieve 3.0.1 was yanked for 3.11 < 3.11.5).
    yanked = [line for line in lines if "is a yanked version" in line]
    assert not yanked, f"a lock pins a yanked release: {yanked}"


@pytest.mark.slow
@pytest.mark.parametrize("lock", LOCKS)
def test_every_pin_of_each_lock_is_in_the_resolve(lock: str, dry_run: DryRun) -> None:
    assert dry_run.report is not None, "no pip report: the dry run failed"
    resolved = {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in dry_run.report["install"]
    }
    wanted = pins(lock)
    assert wanted, f"no exact pins read from {lock}"
    differ = {  # a pin ==2.13.0 admits the local build 2.13.0+cpu, as pip reads it
        name: (v, resolved.get(name))
        for name, v in wanted.items()
        if name not in resolved or not SpecifierSet(f"=={v}").contains(resolved[name])
    }
    assert not differ, f"{lock}: pinned vs resolved {differ}"


@pytest.mark.slow
def test_no_locked_package_needs_more_than_the_claimed_python(dry_run: DryRun) -> None:
    assert dry_run.report is not None, "no pip report: the dry run failed"
    excluded = packages_excluding(dry_run.report, claimed_minimum())
    assert not excluded, f"Python {claimed_minimum()} is claimed, but these need more: {excluded}"


def test_readme_states_the_minimum_of_pyproject() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stated = re.findall(r"`python3` \((\d+(?:\.\d+)+) or later\)", readme)
    assert stated == [str(claimed_minimum())], stated


def test_the_check_sees_a_package_above_the_minimum() -> None:
    report = {
        "install": [
            {"metadata": {"name": "soupsieve", "version": "4.1.3", "requires_python": ">=3.11.5"}}
        ]
    }
    assert packages_excluding(report, Version("3.11")) == [
        "soupsieve==4.1.3 (Requires-Python >=3.11.5)"
    ]
    assert packages_excluding(report, Version("3.11.5")) == []


def make_plan(target: str) -> str:
    """The commands `make TARGET` runs from scratch (`make -n -B` prints them, runs nothing).

    `-o LOCK` takes each lock as there even where it is not (a partial copy of the repository, as
    mutation testing makes): the plan is the Makefile's, whatever files lie beside it.
    """
    cmd = ["make", "-n", "-B", *(f"--assume-old={lock}" for lock in LOCKS), target]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_installs_the_course_lock_only() -> None:
    plan = make_plan("lab")
    assert "-r requirements.txt" in plan, plan
    assert "requirements-test.txt" not in plan, plan
    assert "requirements-hub.txt" not in plan, plan
    assert "-e ." in plan, plan


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_setup_installs_every_lock() -> None:
    plan = make_plan("setup")
    missing = [lock for lock in LOCKS if f"-r {lock}" not in plan]
    assert not missing, plan
