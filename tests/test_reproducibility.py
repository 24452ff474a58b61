"""The stored notebook outputs reproduce on every x86-64 CPU only if torch, MKL and oneDNN run
their AVX2 code paths: the Makefile, tests/conftest.py and environment.yml pin them alike."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_the_three_places_pin_the_same_values() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    environment = (ROOT / "environment.yml").read_text(encoding="utf-8")
    for name, value in PINS.items():
        assert re.search(rf"^export {name} := {value}$", makefile, re.M), f"Makefile must export {name} := {value}"
        assert re.search(rf"^  {name}: {value}$", environment, re.M), f"environment.yml must set {name}: {value}"
        assert os.environ.get(name) == value, f"tests/conftest.py (or make) must set {name}={value}"


def _has_avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx2(), reason="needs an x86-64 CPU with AVX2 (and Linux /proc/cpuinfo)")
def test_a_kernel_started_with_the_pins_runs_avx2() -> None:
    """What a notebook kernel inherits really changes torch's kernels (a renamed variable would
    silently do nothing, and strict nbval would fail on the next CPU with AVX-512)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = dict(os.environ, **PINS)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "AVX2"
