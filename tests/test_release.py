"""One version number: ``lmlessons.__version__``, read by pyproject.toml, stated by CITATION.cff
and by the newest heading of CHANGELOG.md."""

from __future__ import annotations

import re
import tomllib

import lmlessons
from tests._lessons import ROOT


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "lmlessons.__version__"
    assert re.fullmatch(r"\d+\.\d+\.\d+", lmlessons.__version__)


def test_citation_states_the_version() -> None:
    citation = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    (stated,) = re.findall(r"^version: (\S+)$", citation, re.M)
    assert stated == lmlessons.__version__


def test_the_changelog_starts_with_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\S+)", changelog, re.M)
    assert headings and headings[0] == lmlessons.__version__
