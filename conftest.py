"""Order the test files longest first, so that two xdist workers finish together; start the
notebooks' kernels with the scalar kernels when asked (``--scalar-kernels``); and fail a session
that leaves a hub, a server, a kernel, an account or a hub folder behind.

``make test`` runs with ``-n 2 --dist loadscope --no-loadscope-reorder``: each test file (and each
lesson's notebook) goes whole to one worker, in the order collected. Started last, a long file
(the browser test, the classroom build, lesson 10 under nbval) keeps one worker busy while the
other idles; started first, it overlaps everything else. The costs are the seconds measured with
``pytest --durations`` (files) and ``make execute`` (lessons, ``docs/lesson_times.json``, plus a
kernel's start-up); only their order matters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import leftovers

ROOT = Path(__file__).resolve().parent
#: Seconds of the longest test files in make test's session (``--durations=0``, summed per file;
#: the hub_only tests are make test-hub's); every other file costs less than the shortest lesson.
FILE_SECONDS = {
    "tests/test_browser.py": 245.0,
    "tests/test_site.py": 116.0,
    "tests/test_classroom.py": 85.0,
    "tests/test_bugzoo.py": 48.0,
    "tests/test_browser_classic.py": 27.0,
    "tests/test_portability.py": 27.0,
    "tests/test_claims_12.py": 24.0,
    "tests/test_install.py": 21.0,
    "tests/test_grpo_learn.py": 18.0,
}
#: The scalar kernels: torch's default (no SIMD) ATen kernels and oneDNN held to SSE4.1. Their
#: float sums, matrix products included, run in another order than the SIMD kernels that
#: ``make execute`` stored the outputs with, so strict nbval under them proves that no stored
#: output depends on that order. Read by torch and oneDNN when a kernel starts.
SCALAR_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}
#: ``--scalar-kernels=all`` (``make test-portable``) adds MKL's compatible code path, which
#: changes MKL's own matrix products too but nearly doubles the time of the lessons that train:
#: 40 steps of lesson 10's fine-tuning took 8.0 s with the SIMD kernels, 9.0 s with
#: SCALAR_KERNELS, 15.3 s with MKL's compatible path added (``python -m tools.bench_kernels``).
MKL_COMPATIBLE = {"MKL_CBWR": "COMPATIBLE"}
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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--scalar-kernels",
        nargs="?",
        const="torch",
        default=None,
        choices=["torch", "all"],
        help="start the notebooks' kernels (nbval) with the scalar kernels (SCALAR_KERNELS; "
        "=all adds MKL_COMPATIBLE); the tests' own process keeps the kernels its CPU picks",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """nbval starts a notebook's kernel in the setup of its first cell: with ``--scalar-kernels``
    that kernel inherits SCALAR_KERNELS, set for that setup only."""
    which = item.config.getoption("scalar_kernels")
    if which is None or not type(item).__module__.startswith("nbval"):
        yield
        return
    variables = {**SCALAR_KERNELS, **(MKL_COMPATIBLE if which == "all" else {})}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# Nothing left behind: the processes a session started, and the accounts and hub folders it made,
# must be gone when it ends, whether its tests passed or failed (tools/leftovers.py). Checked
# once, by the process that ran the session (xdist's controller, after its workers ended); what is
# left is named, stopped by its PIDs, and fails the session.
def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if not _is_worker(session.config):
        leftovers.begin()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _is_worker(session.config) or leftovers.REGISTRY not in os.environ:
        return
    left = leftovers.leftovers()
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"the tests left behind (now stopped and removed):\n{left.describe()}"
        if reporter is not None:
            reporter.write_line(message, red=True)
        leftovers.clean(left)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    leftovers.end()
