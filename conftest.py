"""Order the test files longest first, so that two xdist workers finish together.

``make test`` runs with ``-n 2 --dist loadscope --no-loadscope-reorder``: each test file (and each
lesson's notebook) goes whole to one worker, in the order collected. Started last, a long file
(the browser test, the classroom build, lesson 10 under nbval) keeps one worker busy while the
other idles; started first, it overlaps everything else. The costs are the seconds measured with
``pytest --durations`` (files) and ``make execute`` (lessons, ``docs/lesson_times.json``, plus a
kernel's start-up); only their order matters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
#: Seconds of the longest test files on 2 cores (``pytest tests -m "slow or browser or
#: classroom" -n 2 --durations=45``); every other file costs less than the shortest lesson.
FILE_SECONDS = {
    "tests/test_browser.py": 300.0,
    "tests/test_classroom.py": 130.0,
    "tests/test_bugzoo.py": 100.0,
    "tests/test_hub.py": 70.0,
    "tests/test_install.py": 20.0,
}
KERNEL_START_SECONDS = 8.0


def _lesson_seconds() -> dict[str, float]:
    path = ROOT / "docs" / "lesson_times.json"
    seconds = json.loads(path.read_text(encoding="utf-8"))["seconds"]
    return {f"notebooks/{name}.ipynb": s + KERNEL_START_SECONDS for name, s in seconds.items()}


def cost(nodeid: str, costs: dict[str, float]) -> float:
    """The expected seconds of the file ``nodeid`` belongs to (0 when not measured)."""
    return costs.get(nodeid.split("::", 1)[0], 0.0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    costs = {**FILE_SECONDS, **_lesson_seconds()}
    items.sort(key=lambda item: -cost(item.nodeid, costs))  # stable: files keep their order
