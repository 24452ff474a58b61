"""The stored notebook outputs must reproduce on every CPU, with no environment pins.

The output policy (README, "For contributors"): an output is either exact, or printed far above
float noise, or its cell is tagged ``nbval-ignore-output`` with a one-line comment saying why.
``make execute`` stores the outputs with the SIMD kernels the CPU picks; ``make test`` runs strict
nbval with each lesson's kernel started on the scalar kernels (``--scalar-kernels``, conftest.py),
whose sums run in another order. These tests check that set-up and the policy's static rules.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _lessons import LESSONS, ROOT, code_cells

CPU_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
IGNORE_TAG = "nbval-ignore-output"
MAX_IGNORED_SHARE = 0.25
# A fixed-point number with 5 or more decimals: float32 carries about 7 significant digits, so
# such a digit of a loss near 10 is float noise that moves with the order of a sum.
TOO_PRECISE = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?![\de])")


def _code_cells() -> list[tuple[str, int, dict]]:
    return [(path.name, i, cell) for path in LESSONS for i, cell in enumerate(code_cells(path))]


def _ignored(cell: dict) -> bool:
    return IGNORE_TAG in cell["metadata"].get("tags", [])


def _text(cell: dict) -> str:
    parts = []
    for output in cell.get("outputs", []):
        text = output.get("text") or output.get("data", {}).get("text/plain", "")
        parts.append("".join(text))
    return "".join(parts)


@pytest.mark.parametrize("name", ["Makefile", "tests/conftest.py", "environment.yml", "README.md"])
def test_no_cpu_pins_on_the_learners_route(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    for variable in CPU_VARIABLES:
        for line in text.splitlines():
            assert not re.search(rf"\b{variable}\s*[:=]\s*['\"]?avx", line, re.I), (
                f"{name} pins {variable}: {line}"
            )
            assert not re.match(rf"\s*export {variable}\b", line), f"{name} exports {variable}"


def _nbval_runs(target: str) -> list[str]:
    out = subprocess.run(
        ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if "-m pytest" in line and "--nbval" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_checks_every_lesson_once_with_the_scalar_kernels() -> None:
    (run,) = _nbval_runs("test")
    assert " notebooks " in run and "--scalar-kernels" in run, run
    # only the lessons' kernels: the tests' own process keeps the kernels its CPU picks
    assert not any(variable in run for variable in CPU_VARIABLES), run
    (portable,) = _nbval_runs("test-portable")
    assert "--scalar-kernels=all" in portable, portable
    (simd,) = _nbval_runs("test-notebooks")
    assert "--scalar-kernels" not in simd, simd


def _capability(env: dict[str, str]) -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def _has_avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def _printing_notebook(path: Path, printed: str) -> Path:
    """A one-cell notebook that prints the CPU capability torch picked and the MKL and oneDNN
    variables, with ``printed`` stored as its output."""
    import nbformat

    source = (
        "import os, torch\n"
        "print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR', '-'),"
        " os.environ.get('ONEDNN_MAX_CPU_ISA', '-'))"
    )
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed + "\n")]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(notebook, path)
    return path


@pytest.mark.skipif(
    not _has_avx2(), reason="needs an x86-64 CPU with AVX2 (and Linux /proc/cpuinfo)"
)
@pytest.mark.slow
def test_scalar_kernels_reach_the_lessons_kernel_and_only_it(tmp_path: Path) -> None:
    """A renamed or misspelt variable, or a hook that never ran, would silently do nothing, and
    the check would prove nothing: a notebook whose stored output is what torch, MKL and oneDNN
    read in a scalar kernel passes strict nbval with ``--scalar-kernels`` and fails without;
    ``=all`` adds MKL's compatible path; the test process itself keeps a SIMD kernel."""
    scalar = _printing_notebook(tmp_path / "scalar.ipynb", "DEFAULT - SSE41")
    everything = _printing_notebook(tmp_path / "all.ipynb", "DEFAULT COMPATIBLE SSE41")
    plain = {k: v for k, v in os.environ.items() if k not in CPU_VARIABLES}
    runs = [
        (scalar, ["--scalar-kernels"], 0),
        (scalar, [], 1),
        (everything, ["--scalar-kernels=all"], 0),
        (everything, ["--scalar-kernels"], 1),
    ]
    for path, flag, expected in runs:
        command = [sys.executable, "-m", "pytest", str(path), "--nbval", "-q"]
        # the repo's conftest.py (where the option lives) as a plugin: the notebook is outside it
        result = subprocess.run(
            [*command, "-p", "no:cacheprovider", "-p", "conftest", *flag],
            cwd=ROOT,
            env=plain,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == expected, (path.name, flag, result.stdout[-2000:])
    assert _capability(plain) != "DEFAULT"


def test_every_ignored_cell_says_why_on_its_first_line() -> None:
    for name, index, cell in _code_cells():
        if _ignored(cell):
            first = "".join(cell["source"]).splitlines()[0]
            assert first.startswith("# ") and len(first) > 20, (
                f"{name} code cell {index}: say why its output is not compared"
            )


def test_ignored_cells_stay_few_and_the_readme_counts_them() -> None:
    cells = _code_cells()
    ignored = sum(_ignored(cell) for _, _, cell in cells)
    assert ignored / len(cells) < MAX_IGNORED_SHARE
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stated = re.search(
        r"(\d+)\s+of\s+the\s+(\d+)\s+code\s+cells\s+are\s+compared\s+exactly;\s+(\d+)\s+are", readme
    )
    assert stated, "the README states how many code cells are strict and how many ignored"
    assert tuple(map(int, stated.groups())) == (len(cells) - ignored, len(cells), ignored)


def test_strict_outputs_print_no_digit_at_float_noise() -> None:
    for name, index, cell in _code_cells():
        if not _ignored(cell):
            found = TOO_PRECISE.findall(_text(cell))
            assert not found, (
                f"{name} code cell {index} prints {found}: round to at most 4 decimals"
            )


def test_the_precision_rule_catches_noise_digits() -> None:
    assert TOO_PRECISE.findall("loss 7.883035 and 0.26429") == ["7.883035", "0.26429"]
    assert not TOO_PRECISE.findall("loss 7.8830, 6.65e-02, 1.00005e-01, id 1234567, v0.12345.6")


# --------------------------------------------------------------------------------------------
# Widget pictures: strict nbval re-renders each one from the same code and state and compares it
# --------------------------------------------------------------------------------------------

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
EMBEDDED_PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


def test_every_widget_picture_is_compared_when_the_lesson_runs() -> None:
    """A widget cell is strict: nbval executes it (the widget is rebuilt from the same code, so
    in the same state) and compares its stored ``text/html`` picture and ``text/plain`` with the
    new ones. Only the embedded PNG bytes are sanitized (tests/sanitize.cfg)."""
    for name, index, cell in _code_cells():
        kinds = {key for output in cell.get("outputs", []) for key in output.get("data", {})}
        if WIDGET_VIEW in kinds:
            assert "text/html" in kinds, f"{name} code cell {index}: a widget without a picture"
            assert not _ignored(cell), (
                f"{name} code cell {index}: a widget picture must be compared, not ignored"
            )


def test_the_sanitizer_blanks_only_the_png_bytes() -> None:
    config = (ROOT / "tests" / "sanitize.cfg").read_text(encoding="utf-8")
    assert EMBEDDED_PNG.pattern in config
    page = '<b>p 0.15</b><img src="data:image/png;base64,iVBORw0KGgo+/=" alt="top: ball 0.494">'
    assert EMBEDDED_PNG.sub("data:image/png;base64,PNG", page) == (
        '<b>p 0.15</b><img src="data:image/png;base64,PNG" alt="top: ball 0.494">'
    )


@pytest.mark.slow
def test_nbval_fails_a_widget_cell_whose_picture_changed(tmp_path: Path) -> None:
    """The mechanism itself: a stored picture that the re-executed cell does not reproduce fails
    strict nbval (text/html is compared, the live widget view is not)."""
    import nbformat

    source = (
        "import ipywidgets as w\n"
        "class Box(w.VBox):\n"
        "    def _repr_mimebundle_(self, **kw):\n"
        "        return {**super()._repr_mimebundle_(**kw), 'text/html': '<b>p=0.15</b>',"
        " 'text/plain': 'p=0.15'}\n"
        "Box([w.IntSlider()])"
    )
    for stored, expected in (("<b>p=0.15</b>", 0), ("<b>p=0.20</b>", 1)):
        cell = nbformat.v4.new_code_cell(source, execution_count=1)
        cell.outputs = [
            nbformat.v4.new_output(
                "execute_result",
                {WIDGET_VIEW: {"model_id": "x"}, "text/html": stored, "text/plain": "p=0.15"},
                execution_count=1,
            )
        ]
        path = tmp_path / f"widget_{expected}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
        result = subprocess.run(
            [sys.executable, "-m", "pytest", str(path), "--nbval", "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == expected, result.stdout[-2000:]
