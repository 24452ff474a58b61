"""The class hub (``make hub``: hub/jupyterhub_config.py, tools/hub.py): make test's small pass.

A real JupyterHub, proxy and nbgrader exchange on 127.0.0.1, with two simulated learners
(tools/hub_class.py) who log in with the class password, each in an account of their own, run
lesson 01 up to its checked exercise in a kernel, fetch lesson 01 from the exchange and submit it;
the teacher collects and autogrades both submissions. The hub uses the tests' own installed
packages (``tools.hub.link_venv``) instead of installing them again; ``make test-hub`` runs the
load test and the faults on a hub installed as ``make hub`` installs it.

Needs root (the hub makes system accounts), Debian's ``/usr/bin/python3`` and npm; the accounts
and cgroups the tests make are removed at the end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from tools import hub as hubtool
from tools.hub_class import (
    Learner,
    as_account,
    as_teacher,
    in_parallel,
    lesson_cells,
    missing,
    running_class,
    teacher_course,
)

pytestmark = [pytest.mark.hub, pytest.mark.slow]
TEACHER = "lmlt-teacher"
LEARNERS = ["lmlt-ada", "lmlt-bo"]
ASSIGNMENT = "01_mlm_masking"
EXERCISE_CELLS = lesson_cells("01", through='check("mask_tokens"')


@pytest.fixture(scope="module")
def hub() -> Iterator[hubtool.Hub]:
    if missing():
        pytest.skip(missing())
    with running_class(LEARNERS, TEACHER, link=Path(sys.prefix), assignment=ASSIGNMENT) as running:
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
    home = Path(os.path.expanduser(f"~{LEARNERS[0]}"))
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
    with Gradebook(f"sqlite:///{db}") as gradebook:
        scores = {n: gradebook.find_submission(ASSIGNMENT, n).score for n in LEARNERS}
        full = gradebook.find_assignment(ASSIGNMENT).max_score
    assert scores == {ada.name: full, bo.name: 0.0} and full > 0


def test_a_learner_cannot_read_another_learners_work(
    hub: hubtool.Hub, learners: list[Learner]
) -> None:
    ada, bo = learners
    mine = Path(os.path.expanduser(f"~{ada.name}")) / "lessons" / "01_mlm_masking.ipynb"
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
    assert learners[0].server("GET", "/assignments?course_id=lmlessons").status_code == 200
