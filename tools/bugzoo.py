"""Record the bug zoo's training runs: ``python -m tools.bugzoo --out DIR [RUN ...]``.

Trains every run of :data:`lmlessons.bugzoo.runs.RUNS` (or the ``RUN``s named), healthy
references included, with one thread, and writes their histories and symptoms to
``DIR/runs.json`` (rounded; see :mod:`lmlessons.bugzoo.records`), and nothing else:
``--out`` is required. Naming runs replaces only those in an existing file and adds new ones
(every other run, and its seconds, kept as stored). About 14 minutes on one core for every run
(the recorded seconds of each are in the file's ``about``). The shipped file was made with::

    python -m tools.bugzoo --out lmlessons/data/bugzoo

Float sums differ in their last digits from one CPU to another, so a new recording matches the
shipped one to a tolerance, not exactly (``tests/test_bugzoo.py`` re-runs the first steps of
every run against it).
"""

from __future__ import annotations

import argparse
import platform
import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lmlessons.bugzoo.records import RECORDING, save_records
from lmlessons.bugzoo.runs import RUNS, record_runs


def _existing(out: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """The runs already recorded in ``out/runs.json`` (as stored: NaN as ``null``) and the
    seconds each took."""
    if not (out / RECORDING.file).is_file():
        return {}, {}
    stored = RECORDING.load(out)
    return stored["runs"], stored["about"].get("seconds", {})


def record(run_ids: list[str], out: Path, threads: int) -> Path:
    """Train ``run_ids`` with ``threads`` torch threads and write ``out/runs.json``."""
    from transformers import logging as hf_logging

    hf_logging.set_verbosity_error()  # config notes, and the leaky decoder's warning on purpose
    torch.set_num_threads(threads)
    recorded, seconds = _existing(out) if set(run_ids) != set(RUNS) else ({}, {})
    log = partial(print, flush=True)
    records, seconds = record_runs(run_ids, recorded=recorded, seconds=seconds, log=log)
    return save_records(
        records,
        out,
        command=RECORDING.command,
        torch_threads=threads,
        torch_version=torch.__version__,
        python=platform.python_version(),
        machine=platform.machine(),
        seconds=seconds,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help=f"default: every run ({', '.join(RUNS)})")
    parser.add_argument(
        "--out", type=Path, required=True, help="folder to write runs.json into (required)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(RUNS)}")
    path = record(list(args.runs) or list(RUNS), args.out, args.threads)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
