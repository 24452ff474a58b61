"""The class hub (``make hub``: hub/jupyterhub_config.py, tools/hub.py): its small pass, in
``make test-hub`` (marked ``hub_only``; ``make test`` keeps the hub's venv and configuration tests,
tests/test_hub_venv.py and tests/test_hub_config.py).

A real JupyterHub, proxy and nbgrader exchange on 127.0.0.1, with two simulated learners
(tools/hub_class.py) who log in with the class password, each in an account of their own, run
lesson 01 up to its checked exercise in a kernel, fetch lesson 01 from the exchange and submit it;
the teacher collects and autogrades both submissions. The hub uses the tests' own installed
packages (``tools.hub.link_venv``) instead of installing them again; ``make test-hub`` also runs
the load test and the faults on a hub installed as ``make hub`` installs it.

Needs root (the hub makes system accounts), Debian's ``/usr/bin/python3`` and npm; the accounts
and cgroups the tests make are removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from tools import hub as hubtool
from tools import leftovers
from tools.browser import (
    find_chromium,
    launch_chromium,
    new_context,
    run_all_cells,
    wait_for_notebook,
)
from tools.classroom import COURSE_ID
from tools.hub_class import (
    Learner,
    as_account,
    as_teacher,
    in_parallel,
    lesson_cells,
    missing,
    remove_accounts,
    running_class,
    teacher_course,
)

pytestmark = [pytest.mark.hub, pytest.mark.hub_only, pytest.mark.slow]  # make test-hub
ROOT = Path(__file__).resolve().parents[1]
TEACHER = "lmlt-teacher"
LEARNERS = ["lmlt-ada", "lmlt-bo"]
ASSIGNMENT = "01_mlm_masking"
# A teacher's own setting in local_config.py: here, the browser test's handle on JupyterLab.
LOCAL_CONFIG = (
    'c = get_config()  # noqa: F821\nc.Spawner.args = ["--LabApp.expose_app_in_browser=True"]\n'
)
EXERCISE_CELLS = lesson_cells("01", through='check("mask_tokens"')


@pytest.fixture(scope="module")
def hub() -> Iterator[hubtool.Hub]:
    if missing():
        pytest.skip(missing())
    with running_class(
        LEARNERS, TEACHER, link=Path(sys.prefix), assignment=ASSIGNMENT, local_config=LOCAL_CONFIG
    ) as running:
        yield running


@pytest.fixture(scope="module")
def learners(hub: hubtool.Hub) -> list[Learner]:
    """Both learners logged in, their servers ready and a kernel each."""
    people = [Learner(hub, name) for name in LEARNERS]

    def arrive(learner: Learner) -> Learner:
        assert learner.login().status_code == 302, f"{learner.name} could not log in"
        learner.start_server()
        learner.start_kernel()
        return learner

    return in_parallel(arrive, people)


def test_learners_run_lesson_01_each_in_their_own_account(learners: list[Learner]) -> None:
    results = in_parallel(lambda learner: learner.run_cells(EXERCISE_CELLS), learners)
    for learner, result in zip(learners, results, strict=True):
        assert result.status == "ok", result.output[-2000:]
        assert "✓ mask_tokens" in result.output
        whoami = learner.execute("import getpass; print(getpass.getuser())")
        assert whoami.output.strip() == learner.name
    home = hubtool.home(LEARNERS[0])
    assert (home / "lessons" / "01_mlm_masking.ipynb").exists()  # the student copies
    assert home.stat().st_mode & 0o077 == 0  # the home is its owner's alone


def test_a_submission_is_collected_and_autograded(
    hub: hubtool.Hub, learners: list[Learner]
) -> None:
    ada, bo = learners
    for learner in learners:
        assert learner.fetch(ASSIGNMENT), f"{learner.name}'s fetch brought no notebook"
    ada.answer(ASSIGNMENT)  # bo submits the release untouched
    for learner in learners:
        assert learner.assignment("submit", ASSIGNMENT).json()["success"]
    collected = as_teacher(hub, ["nbgrader", "collect", ASSIGNMENT])
    assert collected.returncode == 0, collected.stderr
    graded = in_parallel(
        lambda name: as_teacher(hub, ["nbgrader", "autograde", ASSIGNMENT, "--student", name]),
        LEARNERS,
    )
    assert all(done.returncode == 0 for done in graded), [d.stderr[-2000:] for d in graded]
    db = teacher_course(TEACHER) / "gradebook.db"
    from nbgrader.api import Gradebook  # here: only make test-hub needs it

    with Gradebook(f"sqlite:///{db}") as gradebook:
        scores = {n: gradebook.find_submission(ASSIGNMENT, n).score for n in LEARNERS}
        full = gradebook.find_assignment(ASSIGNMENT).max_score
    assert scores == {ada.name: full, bo.name: 0.0} and full > 0


def test_a_learner_cannot_read_another_learners_work(
    hub: hubtool.Hub, learners: list[Learner]
) -> None:
    ada, bo = learners
    mine = hubtool.home(ada.name) / "lessons" / "01_mlm_masking.ipynb"
    tried = as_account(bo.name, f"open({str(mine)!r}).read()")
    assert tried.returncode != 0 and "PermissionError" in tried.stderr
    assert as_account(ada.name, f"open({str(mine)!r}).read()").returncode == 0  # the owner can
    # nor through ada's server with bo's own token
    reply = bo.session.get(f"{ada.base}/api/contents/lessons", timeout=60, allow_redirects=False)
    assert reply.status_code in (302, 403), reply.status_code


def test_no_one_logs_in_as_an_existing_account_or_without_the_password(hub: hubtool.Hub) -> None:
    assert Learner(hub, "root").login().status_code != 302  # the class password is not root's
    assert Learner(hub, "daemon").login().status_code != 302
    assert Learner(hub, "lmlt-eve").login("not the password").status_code != 302


def test_the_teachers_formgrader_lists_the_submissions(
    hub: hubtool.Hub, learners: list[Learner]
) -> None:
    """Runs after the submission test: the formgrader is the teacher's, not the learners'."""
    teacher = Learner(hub, TEACHER)
    assert teacher.login(hub.admin_password).status_code == 302
    teacher.start_server()
    listed = teacher.server("GET", f"/formgrader/api/submissions/{ASSIGNMENT}").json()
    assert {s["student"] for s in listed if s["submitted"]} == set(LEARNERS)
    assert learners[0].server("GET", "/formgrader/api/status").status_code == 404
    assert learners[0].server("GET", f"/assignments?course_id={COURSE_ID}").status_code == 200


def printed_until(proc: subprocess.Popen[str], last: str, timeout: float = 120.0) -> str:
    """What ``proc`` printed, up to the line containing ``last`` (or its end, or ``timeout``)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True
    ).start()
    text, deadline = "", time.monotonic() + timeout
    while last not in text and time.monotonic() < deadline:
        try:
            text += lines.get(timeout=1.0)
        except queue.Empty:
            if proc.poll() is not None:
                break
    return text


def test_the_command_prints_the_passwords_serves_and_stops_quietly_on_ctrl_c_and_sigterm(
    hub: hubtool.Hub, tmp_path: Path
) -> None:
    """``python -m tools.hub run`` (what make hub runs) with the teacher's settings, beside the
    module's hub, started twice: a learner logs in with the printed class password; Ctrl-C (SIGINT
    to the command's process group, as a terminal sends it), then SIGTERM to the group (as
    ``timeout`` sends it; ``systemctl stop`` sends it to the command) stops it all, with no
    traceback."""
    teacher, learner_name = "lmlt-prof", "lmlt-cy"
    remove_accounts([teacher, learner_name])
    hub_dir = hubtool.shared_temp_dir("lmlessons-hub-cli-")
    leftovers.register([teacher, learner_name], [hub_dir])
    settings = {"LMLESSONS_HUB_TEACHER": teacher, "LMLESSONS_HUB_PASSWORD": "a class password"}
    try:
        hubtool.install(hub_dir, link=Path(sys.prefix), teacher=teacher)
        for stop in (signal.SIGINT, signal.SIGTERM):
            port = hubtool.free_port()
            command = [sys.executable, "-m", "tools.hub", "run", "--dir", str(hub_dir),
                       "--port", str(port)]  # fmt: skip
            with open(tmp_path / f"stderr-{stop.name}", "w+") as err:
                proc = subprocess.Popen(
                    command, cwd=ROOT, env={**os.environ, **settings}, stdout=subprocess.PIPE,
                    stderr=err, text=True, start_new_session=True,
                )  # fmt: skip
                try:
                    printed = printed_until(proc, "Ctrl-C stops")
                    assert "password a class password" in printed, printed
                    assert f"teacher:  {teacher}," in printed, printed
                    cy = Learner(hubtool.Hub(hub_dir, port=port, password="a class password"),
                                 learner_name)  # fmt: skip
                    assert cy.login().status_code == 302
                    cy.start_server()
                    os.killpg(proc.pid, stop)
                    assert proc.wait(timeout=60) == 0
                finally:
                    kill_tree(proc)
                err.seek(0)
                assert "Traceback" not in err.read(), f"{stop.name}: {err.read()}"
            left = subprocess.run(["pgrep", "-u", learner_name], capture_output=True, text=True)
            assert left.stdout == "", f"{learner_name}'s server outlived the hub: {left.stdout}"
            with pytest.raises(requests.ConnectionError):  # the proxy is gone too
                requests.get(f"http://127.0.0.1:{port}/hub/login", timeout=10)
    finally:
        remove_accounts([teacher, learner_name])
        shutil.rmtree(hub_dir, ignore_errors=True)


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """``proc`` and every process it started (the hub and the proxy run in sessions of their own,
    out of reach of its process group), where a failed test left them running."""
    if proc.poll() is not None:
        return
    family = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


HAS_COMMAND = "(id) => window.jupyterapp.commands.hasCommand(id)"


def log_in_with_chromium(page: Any, hub: hubtool.Hub, name: str, password: str) -> None:
    """The hub's login page, as a person fills it; then JupyterLab opens lesson 00."""
    page.goto(f"{hub.url}/hub/login", wait_until="domcontentloaded")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    wait_for_notebook(page, "lessons/00_start_here.ipynb", timeout=180)


@pytest.mark.browser
def test_in_chromium_a_learner_runs_lesson_00_with_assignments_and_no_formgrader(
    hub: hubtool.Hub, learners: list[Learner]
) -> None:
    if find_chromium() is None:
        pytest.skip("no Chromium: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    name = "lmlt-dot"
    leftovers.register([name])
    try:
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            learner, teacher = new_context(browser).new_page(), new_context(browser).new_page()
            log_in_with_chromium(learner, hub, name, hub.password)
            run_all_cells(learner, timeout=180)  # the student copy: every check "not attempted yet"
            assert learner.evaluate(HAS_COMMAND, "nbgrader:open-assignment-list")
            assert not learner.evaluate(HAS_COMMAND, "nbgrader:open-formgrader")
            log_in_with_chromium(teacher, hub, TEACHER, hub.admin_password)
            assert teacher.evaluate(HAS_COMMAND, "nbgrader:open-formgrader")
            browser.close()
    finally:
        remove_accounts([name])
