"""The core imports on its own: each ``lmlessons/*.py`` module, imported in a fresh interpreter,
loads neither ``tokenizers`` nor ``safetensors`` nor any module of the layers after it (torch
and transformers are allowed). ``lmlessons/__init__.py`` re-exports the course layer lazily
(PEP 562), and its ``TYPE_CHECKING`` imports are the names it exports."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lmlessons"
CORE = [
    "lmlessons" if p.stem == "__init__" else f"lmlessons.{p.stem}" for p in PACKAGE.glob("*.py")
]

# One interpreter: torch and transformers first (allowed, and the slow part), then each module
# with every lmlessons module dropped before it, so each one's own imports run again. Prints
# {module: [forbidden modules loaded after importing it]}; a third-party module, once loaded,
# stays, so the first module listed with it is the one that loaded it.
PROBE = """
import json, sys
import torch, transformers
LATER = ("lmlessons.course", "lmlessons.bugzoo", "lmlessons.exercises", "lmlessons.widgets")
def forbidden():
    return {n for n in sys.modules if n.split(".")[0] in ("tokenizers", "safetensors")
            or n in LATER or n.startswith(tuple(f"{p}." for p in LATER))}
report = {}
for module in sys.argv[1:]:
    for name in [n for n in sys.modules if n == "lmlessons" or n.startswith("lmlessons.")]:
        del sys.modules[name]
    __import__(module)
    report[module] = sorted(forbidden())
print(json.dumps(report))
"""


def _probe(modules: list[str], path: Path) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(path), "OMP_NUM_THREADS": "1"},
    )
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow
def test_every_core_module_imports_without_the_later_layers() -> None:
    assert {"lmlessons", "lmlessons.packing", "lmlessons.losses", "lmlessons._checks"} <= set(CORE)
    report = _probe(CORE, ROOT)
    assert report == {module: [] for module in CORE}


@pytest.mark.slow
def test_the_probe_flags_an_eager_re_export(tmp_path: Path) -> None:
    """The previous ``__init__``, importing every exported name at once, fails the probe."""
    import lmlessons

    copy = tmp_path / "lmlessons"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    eager = "".join(f"from {module} import {name}\n" for name, module in lmlessons._HOMES.items())
    (copy / "__init__.py").write_text(eager, encoding="utf-8")
    report = _probe(["lmlessons.packing"], tmp_path)["lmlessons.packing"]
    assert {"tokenizers", "lmlessons.course.tokenizer"} <= set(report), report


def test_the_lazy_names_are_the_type_checking_imports() -> None:
    import lmlessons

    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    guard = next(n for n in tree.body if isinstance(n, ast.If))  # if TYPE_CHECKING:
    static = [
        (alias.name, alias.asname, node.module)
        for node in guard.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    # each one ``name as name``, the form type checkers read as a re-export
    assert len(static) >= 40 and all(name == asname for name, asname, _ in static)
    assert [(name, module) for name, _, module in static] == list(lmlessons._HOMES.items())
    assert lmlessons.__all__ == list(lmlessons._HOMES)
    for name, module in lmlessons._HOMES.items():  # each resolves to what its module defines
        assert getattr(lmlessons, name) is getattr(importlib.import_module(module), name)
    assert set(lmlessons.__all__) <= set(dir(lmlessons))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = lmlessons.no_such_name  # type: ignore[attr-defined]
