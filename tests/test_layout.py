"""The package's layers (docs/ARCHITECTURE.md) hold, and the wheel is the course alone.

- each layer imports only the layers before it: core (``lmlessons/*.py``) -> ``course`` ->
  ``bugzoo`` -> ``exercises`` -> ``widgets`` -> ``tools``; nothing in the package imports
  ``tools``, playwright or nbformat;
- every function is at most 60 lines; ``-100`` is written in code only where it is defined;
- every name the package exported before the layout change still imports from ``lmlessons``;
- ``pip wheel .`` holds the package and its data, no maintainer tool, and imports on its own.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lmlessons"
MAX_FUNCTION_LINES = 60
# Where code may write -100 itself: its one definition, and the reference solutions, which show
# the learner the idiom of transformers' own code.
IGNORE_INDEX_HOMES = {"lmlessons/_checks.py", "lmlessons/exercises/solutions.py"}
PUBLIC_API = [
    "mask_tokens",
    "shift_labels",
    "make_nsp_pairs",
    "truncate_seq_pair",
    "bert_pretraining_loss",
    "clm_loss",
    "mlm_loss",
    "nsp_loss",
    "MLMCollator",
    "linear_cross_entropy",
    "Corpus",
    "load_corpus",
    "split_sentences",
    "load_tokenizer",
    "train_tokenizer",
    "count_parameters",
    "tiny_bert_config",
    "tiny_bert_lm_head",
    "tiny_bert_mlm",
    "tiny_bert_pretraining",
    "tiny_gpt2",
    "tiny_gpt2_config",
    "clm_batches",
    "mlm_batches",
    "nsp_batches",
    "pack_sequences",
    "tokenize_documents",
    "History",
    "evaluate",
    "train",
    "checkpoint_metrics",
    "heldout_metrics",
    "load_checkpoint",
    "make_sop_pairs",
    "sop_batches",
]


LAYERS = ("core", "course", "bugzoo", "exercises", "widgets", "tools")  # each imports earlier ones


def _layer(module: str) -> str:
    """The layer (one of :data:`LAYERS`) of a dotted module name."""
    parts = module.split(".")
    if parts[0] == "tools":
        return "tools"
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "core"


FORBIDDEN = {layer: set(LAYERS[i + 1 :]) for i, layer in enumerate(LAYERS)}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found |= {f"{name}.{alias.name}" for alias in node.names}
    return found


def _package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _trees(paths: list[Path]) -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in paths]


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_layer_imports_only_the_layers_below(path: Path) -> None:
    module = _module_name(path)
    imports = _imports(
        ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py"
    )
    if module == "lmlessons":  # the public API re-exports the course layer
        imports = {name for name in imports if _layer(name) != "course"}
    layer = _layer(module)
    for name in imports:
        top = name.split(".")[0]
        assert top not in ("playwright", "nbformat", "nbclient"), f"{module} imports {name}"
        if top in ("lmlessons", "tools"):
            assert _layer(name) not in FORBIDDEN[layer], f"{module} ({layer}) imports {name}"


def test_the_layer_rule_catches_a_wrong_import() -> None:
    tree = ast.parse(
        "from lmlessons.course.corpus import load_corpus\nfrom ..widgets import display\n"
    )
    imports = _imports(tree, "lmlessons.exercises.check", is_package=False)
    assert {"lmlessons.course.corpus", "lmlessons.widgets"} <= imports
    assert _layer("lmlessons.course.corpus") in FORBIDDEN["core"]
    assert _layer("lmlessons.widgets") in FORBIDDEN["exercises"]
    assert FORBIDDEN["tools"] == set() and "core" not in set().union(*FORBIDDEN.values())


def test_the_layer_rule_places_the_bug_zoo_between_course_and_exercises() -> None:
    tree = ast.parse("from ..bugzoo.cases import CASES\nfrom lmlessons.bugzoo import bugs\n")
    imports = _imports(tree, "lmlessons.course.chat", is_package=False)
    assert {"lmlessons.bugzoo.cases", "lmlessons.bugzoo"} <= imports
    assert _layer("lmlessons.bugzoo.cases") == _layer("lmlessons.bugzoo") == "bugzoo"
    assert "bugzoo" in FORBIDDEN["course"] and "bugzoo" in FORBIDDEN["core"]
    assert "course" not in FORBIDDEN["bugzoo"] and "bugzoo" not in FORBIDDEN["exercises"]
    assert {"exercises", "widgets"} <= FORBIDDEN["bugzoo"]


def test_functions_are_at_most_60_lines() -> None:
    long = []
    for path, tree in _trees(_package_files() + sorted((ROOT / "tools").glob("*.py"))):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)"
                    )
    assert not long, "split these functions:\n" + "\n".join(long)


def _is_minus_100(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 100
    )


def test_ignore_index_is_written_in_one_place() -> None:
    bare = []
    for path, tree in _trees(_package_files()):
        name = str(path.relative_to(ROOT))
        if name not in IGNORE_INDEX_HOMES:
            bare += [f"{name}:{node.lineno}" for node in ast.walk(tree) if _is_minus_100(node)]
    assert not bare, "use lmlessons._checks.IGNORE_INDEX: " + ", ".join(bare)


def test_the_public_api_still_imports_from_lmlessons() -> None:
    import lmlessons

    missing = [name for name in PUBLIC_API if not hasattr(lmlessons, name)]
    assert not missing
    assert set(PUBLIC_API) <= set(lmlessons.__all__)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip wheel`` of a copy of the sources (setuptools writes build/ and *.egg-info there)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "lmlessons", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*cmd, "-w", str(out), str(source)], check=True, capture_output=True, cwd=source)
    (path,) = out.glob("lmlessons-*.whl")
    return path


@pytest.mark.slow
def test_the_wheel_holds_the_course_and_no_tool(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = {
            name: archive.read(name).decode("utf-8") for name in names if name.endswith(".py")
        }
    assert not [n for n in names if n.startswith("tools/")], "maintainer tools are not installed"
    tracked = subprocess.run(
        ["git", "ls-files", "lmlessons/data", "lmlessons/py.typed"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert tracked, "git lists the package's data"
    missing = sorted(set(tracked) - set(names))
    assert not missing, f"package data left out of the wheel (pyproject.toml): {missing}"
    for name, text in sources.items():
        assert "playwright" not in text, name
        depth = name.count("/") - 1  # folders below lmlessons/
        for level in re.findall(r"parents\[(\d+)\]", text):
            assert int(level) <= depth, f"{name} reaches above the package (parents[{level}])"
        assert "../" not in text, f"{name} names a path outside the package"


@pytest.mark.slow
def test_the_wheel_imports_and_loads_its_data_on_its_own(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path)
    code = (
        "import lmlessons, pathlib\n"
        "assert pathlib.Path(lmlessons.__file__).is_relative_to(pathlib.Path.cwd())\n"
        "tok, corpus = lmlessons.load_tokenizer(), lmlessons.load_corpus('course')\n"
        "model = lmlessons.load_checkpoint('gpt2')\n"
        "print(len(tok), len(corpus.train), type(model).__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "GPT2LMHeadModel"
