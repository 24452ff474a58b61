"""`make lab` must start on a machine where the learner is root (containers): JupyterLab refuses
to run as root without --allow-root, so the Makefile adds it then, and only then."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    shutil.which("make") is None or not hasattr(os, "geteuid"),
    reason="needs make on a POSIX system",
)
def test_make_lab_allows_root_only_as_root() -> None:
    out = subprocess.run(
        ["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    lab = [line for line in out.splitlines() if "jupyter lab" in line]
    assert lab, f"make -n lab runs no `jupyter lab`:\n{out}"
    assert ("--allow-root" in lab[-1]) == (os.geteuid() == 0), lab[-1]
