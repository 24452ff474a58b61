"""The stored lessons as JSON, for the tests that read them without a kernel."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
COPIES = sorted((ROOT / "student").glob("*.ipynb"))


def cells(path: Path) -> list[dict]:
    """Every cell of the notebook at ``path``."""
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def code_cells(path: Path) -> list[dict]:
    """The code cells, in order: index i is nbval's ``Cell i``."""
    return [cell for cell in cells(path) if cell["cell_type"] == "code"]
