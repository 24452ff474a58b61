"""The maintainer targets make test-pythons and make test-colab, checked without a chroot.

tools/pythons.py and tools/colab.py need root, debootstrap and the network; what they decide
from text (the archive's Packages files, pip's errors, pip freeze, the install cells, the
allow-list, the Colab lock) and the command lines they run are checked here, in well under 1 s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools import colab, pythons

ROOT = Path(__file__).resolve().parents[1]
#: Google Colab's published stack, August 2026 (googlecolab/backend-info): what the lock copies.
COLAB_STACK = {
    "torch": "2.11.0",
    "transformers": "5.15.0",
    "tokenizers": "0.22.2",
    "ipywidgets": "7.7.1",
    "notebook": "6.5.7",
    "ipykernel": "6.17.1",
    "matplotlib": "3.10.0",
    "numpy": "2.1.3",
    "datasets": "4.0.0",
}


def makefile_recipe(target: str) -> str:
    """The recipe lines of a Makefile target, joined."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert found is not None, f"Makefile has no target {target}"
    return found.group(1)


def makefile_variable(name: str) -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{name} := (.*)$", text, re.M)
    assert found is not None, f"Makefile has no variable {name}"
    return found.group(1).strip()


def test_targets_run_the_tools() -> None:
    assert makefile_recipe("test-pythons").strip() == "$(PY) -m tools.pythons"
    assert makefile_recipe("test-colab").strip() == "$(PY) -m tools.colab"
    assert "test-pythons" not in makefile_recipe("test")
    assert "test-colab" not in makefile_recipe("test")


def test_tool_command_lines_are_the_makefiles() -> None:
    fast = makefile_recipe("test-fast")
    assert f'$(PYTEST) {pythons.FAST_TESTS[0]} -m "{pythons.FAST_TESTS[2]}"' in fast
    assert " ".join(pythons.XDIST) == makefile_variable("XDIST")
    assert "$(XDIST)" in fast
    assert " ".join(pythons.NBVAL_01[1:4]) == makefile_variable("NBVAL")
    assert colab.XDIST == pythons.XDIST


def test_colab_lock_has_the_published_versions() -> None:
    text = colab.LOCK.read_text(encoding="utf-8")
    pins = colab.parse_freeze(text)
    assert {name: pins.get(name) for name in COLAB_STACK} == COLAB_STACK
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "August 2026" in header and "googlecolab/backend-info" in header
    assert "Python 3.13" in header and colab.VERSION == "3.13"
    assert not any(colab.CUDA_BUILD.match(name) for name in pins)
    assert all(not v.startswith("@") for v in pins.values())


def test_allow_list_parses_and_every_entry_has_a_reason() -> None:
    allowed = colab.load_allowed(colab.ALLOWED.read_text(encoding="utf-8"))
    assert "lmlessons" in allowed
    lessons = {p.stem for p in (ROOT / "student").glob("*.ipynb")}
    for name, entry in allowed.items():
        assert entry.reason and "\n" not in entry.reason, name
        assert set(entry.lessons) <= lessons, f"{name}: unknown lessons {entry.lessons}"


@pytest.mark.parametrize(
    "text",
    ['[x]\nlessons = ["a"]\n', '[x]\nreason = ""\n', 'x = "1.0"\n', '[x]\nreason = "r"\nwhy = 1\n'],
)
def test_allow_list_rejects_an_entry_without_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match="allowed"):
        colab.load_allowed(text)


def test_disallowed_honours_lessons() -> None:
    text = '[Py_Arrow]\nreason = "r"\nlessons = ["11_x"]\n[a]\nreason = "r"\n'
    allowed = colab.load_allowed(text)
    moved = {"py-arrow": "18.1.0 -> 26.0.1", "a": "- -> 1", "b": "1 -> 2"}
    assert colab.disallowed(moved, allowed, "11_x") == ["b 1 -> 2"]
    assert colab.disallowed(moved, allowed, "01_y") == ["py-arrow 18.1.0 -> 26.0.1", "b 1 -> 2"]


def test_freeze_changes() -> None:
    before = colab.parse_freeze("Transformers==5.15.0\nPyYAML==6.0.3\nold==1\n")
    after = colab.parse_freeze(
        "transformers==5.23.0\npyyaml==6.0.3\nlmlessons @ file:///tmp/src\n# comment\n"
    )
    assert colab.changes(before, after) == {
        "lmlessons": "- -> @ file:///tmp/src",
        "old": "1 -> -",
        "transformers": "5.15.0 -> 5.23.0",
    }


def test_lock_mismatches_allow_only_the_cuda_builds_extras() -> None:
    lock = {"torch": "2.11.0", "numpy": "2.1.3"}
    installed = {"torch": "2.11.0", "numpy": "2.1.3", "nvidia-cublas": "13.1", "triton": "3.6"}
    assert colab.lock_mismatches(lock, installed) == []
    installed |= {"numpy": "2.4.6", "jedi": "0.20.1"}
    assert colab.lock_mismatches(lock, installed) == [
        "numpy: lock 2.1.3, installed 2.4.6",
        "jedi: installed 0.20.1, not in the lock",
    ]


@pytest.mark.parametrize("path", sorted((ROOT / "student").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_install_cell_takes_the_local_checkout(path: Path) -> None:
    cell = colab.install_cell(json.loads(path.read_text(encoding="utf-8")))
    local = colab.local_install_cell(cell, "/tmp/x/src")
    assert "github.com" not in local and "download.pytorch.org" not in local
    assert re.search(r'"lmlessons(\[rl\])? @ file:///tmp/x/src"', local), local


def test_install_cell_without_the_url_is_refused() -> None:
    with pytest.raises(ValueError, match="source"):
        colab.local_install_cell('%pip install "lmlessons"', "/tmp/x")
    with pytest.raises(ValueError, match="notebook"):
        colab.install_cell({"cells": [{"cell_type": "code", "source": ["print(1)"]}]})


def test_archive_pythons_and_versions() -> None:
    packages = {
        "bookworm": "Package: python3.11\nVersion: 3.11.2-6\n\nPackage: python3.11-venv\n",
        "trixie": "Package: python3\n\nPackage: python3.13\n",
        "sid": "Package: python3.13\n\nPackage: python3.14\nPackage: python3.140-x\n",
    }
    found = pythons.archive_pythons(packages)
    assert found == {"3.11": ["bookworm"], "3.13": ["trixie", "sid"], "3.14": ["sid"]}
    assert pythons.versions_to_test(found) == ["3.11", "3.12", "3.13", "3.14"]
    outcome = pythons.test_version("3.12", found)
    assert outcome.result == "not testable" and "python3.12" in outcome.notes[0]


def test_a_pin_pip_cannot_find_is_relaxed_to_pyprojects_range() -> None:
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement torch==2.13.0 "
        "(from versions: 2.14.1)\nERROR: No matching distribution found for torch==2.13.0\n"
    )
    assert pythons.unavailable_pins(stderr) == ["torch==2.13.0"]
    ranges = pythons.pyproject_ranges()
    assert ranges["torch"].startswith("torch>=")
    lock = "numpy==2.4.6  # via x\ntorch==2.13.0  # via -r requirements.in\n"
    relaxed = pythons.relaxed_lock(lock, {"torch": ranges["torch"]})
    assert relaxed == f"numpy==2.4.6  # via x\n{ranges['torch']}\n"


def test_each_pythons_line_is_printed_as_it_ends_and_together_only_for_several(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pythons, "fetch_packages", lambda suite: "")
    monkeypatch.setattr(pythons, "archive_pythons", lambda packages: {"3.13": ["trixie"]})
    monkeypatch.setattr(
        pythons, "test_version", lambda version, found: pythons.Outcome(version, "passed", 1.0)
    )
    assert pythons.main(["3.13"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["Debian", "3.13"]  # once, not twice
    assert pythons.main(["3.11", "3.13"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["Debian", "3.11", "3.13", "All:", "3.11", "3.13"]
