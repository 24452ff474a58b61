"""Re-execute the lessons and store their outputs: ``python -m tools.execute`` (``make execute``).

Each lesson runs top to bottom in a fresh kernel (nbclient, as ``jupyter nbconvert --execute``
does) with the notebook's folder as working directory, and is written back in place without
volatile metadata: no per-cell execution timestamps (``record_timing=False``), so re-running an
unchanged lesson changes only the outputs that really changed. A lesson whose cell raises is not
written. The wall times go to ``docs/lesson_times.json``, each lesson's stated time is brought
up to date (``python -m tools.reading_time --write``), and the student copies are regenerated
(``python -m tools.student``).

Hand-written rather than ``jupyter nbconvert --execute --inplace``: nbconvert always records the
per-cell timings (``ExecutePreprocessor`` has no switch for them), nbclient does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tools.reading_time import NOTEBOOKS, ROOT, TIMES_FILE

TIMEOUT_S = 600  # one cell; a lesson must finish in 60 s on 2 cores, so this only stops a hang


def execute(path: Path) -> float:
    """Execute ``path`` in a fresh kernel, write it back, and return the wall time in seconds."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "lessons", nargs="*", help="lesson file names or prefixes (default: every lesson)"
    )
    parser.add_argument(
        "--no-student", action="store_true", help="do not regenerate student/ afterwards"
    )
    args = parser.parse_args(argv)
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if args.lessons:
        paths = [p for p in paths if any(p.name.startswith(prefix) for prefix in args.lessons)]
        if not paths:
            parser.error(f"no lesson matches {args.lessons}")
    seconds = {}
    for path in paths:
        seconds[path.stem] = round(execute(path), 1)
        print(f"{path.name}: {seconds[path.stem]:.1f} s", flush=True)
    record_times(seconds)
    subprocess.check_call([sys.executable, "-m", "tools.reading_time", "--write"], cwd=ROOT)
    if not args.no_student:
        return subprocess.call([sys.executable, "-m", "tools.student"], cwd=ROOT)
    return 0


def record_times(seconds: dict[str, float]) -> None:
    """Merge the wall times into docs/lesson_times.json (lessons not run keep theirs)."""
    old = json.loads(TIMES_FILE.read_text(encoding="utf-8")) if TIMES_FILE.exists() else {}
    record = {
        "command": "make execute",
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "seconds": {**old.get("seconds", {}), **seconds},
    }
    TIMES_FILE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
