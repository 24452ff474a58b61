"""Binder's configuration (binder/) and every launch badge's target, without a network.

repo2docker reads ``binder/`` before the top level: ``runtime.txt`` picks the Python, and
``pip install --no-cache-dir -r binder/requirements.txt`` runs from the repository's root once the
whole repository is copied (a local reference makes it wait for that). ``make test-binder`` runs
that install for real in a fresh venv and a lesson in it; these tests check what can be checked
offline: the file installs the course lock and the course, and every Colab and Binder badge of
the README opens a file that exists.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from _lessons import ROOT

BINDER = ROOT / "binder"
BADGE = re.compile(r"\]\((https://(?:mybinder\.org|colab\.research\.google\.com)/[^)\s]+)\)")


def _lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def test_binder_installs_the_course_lock_and_the_course_on_the_cpu_wheels() -> None:
    lines = _lines(BINDER / "requirements.txt")
    nested = [line.split(None, 1)[1] for line in lines if line.startswith("-r ")]
    # pip reads a nested -r relative to the file that names it
    assert [(BINDER / n).resolve() for n in nested] == [ROOT / "requirements.txt"], lines
    assert "-e ." in lines, lines  # relative to pip's working folder, the repository's root
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines, lines


def test_binder_runs_the_python_the_course_is_locked_for() -> None:
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.\d+", runtime), runtime
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    minimum = project["requires-python"].removeprefix(">=")
    lock_header = (ROOT / "requirements.txt").read_text().splitlines()[1]
    assert runtime == f"python-{minimum}" and f"Python {minimum}" in lock_header, lock_header


def _target(url: str) -> str:
    """The repository path a Colab or Binder launch URL opens."""
    parts = urlsplit(url)
    if parts.netloc == "mybinder.org":
        (labpath,) = parse_qs(parts.query)["labpath"]
        return unquote(labpath)
    # https://colab.research.google.com/github/OWNER/NAME/blob/BRANCH/PATH
    return unquote(parts.path).split("/blob/", 1)[1].split("/", 1)[1]


def test_every_badge_opens_a_file_that_exists() -> None:
    urls = BADGE.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    kinds = {urlsplit(u).netloc for u in urls}
    assert kinds == {"mybinder.org", "colab.research.google.com"}, kinds
    missing = sorted({_target(u) for u in urls if not (ROOT / _target(u)).is_file()})
    assert not missing, f"badges that open no file: {missing}"
    assert len({_target(u) for u in urls}) >= len(list((ROOT / "student").glob("*.ipynb")))


def test_the_target_rule_reads_both_kinds_of_badge() -> None:
    binder = "https://mybinder.org/v2/gh/o/n/main?labpath=student%2F01_x.ipynb"
    colab = "https://colab.research.google.com/github/o/n/blob/main/student/01_x.ipynb"
    assert _target(binder) == _target(colab) == "student/01_x.ipynb"
