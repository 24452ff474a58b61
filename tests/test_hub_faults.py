"""The class hub under faults (``make test-hub``): what goes wrong in a class, on a real hub.

A real JupyterHub, proxy and nbgrader exchange on 127.0.0.1 (hub/jupyterhub_config.py, installed
by tools/hub.py with the tests' own packages), a memory limit of 1 GiB per learner, and simulated
learners (tools/hub_class.py) in accounts of their own:

- a learner's kernel killed mid-cell: that cell reports a dead kernel, their server still answers,
  a new kernel runs code, and another learner's cell running at the same time is not disturbed;
- the hub restarted while learners run cells: the cells finish over their open connections, the
  servers keep running, fetch and submit still work;
- a learner who submits twice: nbgrader collects and grades the later submission;
- autograding an endless loop and a huge output, two submissions at a time: the loop is timed out
  and scores 0 on its exercise, the others are graded, no submission is lost;
- a kernel that eats memory beyond the limit dies alone; another learner's cell completes;
- learners kept apart: another learner's files, submissions, server, token and process, the
  teacher's course and the hub's database are out of reach.

Needs root, Debian's ``/usr/bin/python3`` and npm (like tests/test_hub.py); every account, cgroup
and folder the tests make is removed at the end.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import nbformat
import pytest

from tools import classroom
from tools import hub as hubtool
from tools.hub_class import (
    CellResult,
    Learner,
    answered,
    as_account,
    as_teacher,
    in_parallel,
    missing,
    remove_accounts,
    running_class,
    teacher_course,
)

pytestmark = [pytest.mark.hub_only, pytest.mark.slow]
TEACHER = "lmlf-teacher"
ADA, BO = "lmlf-ada", "lmlf-bo"  # the pair most tests use
TWICE = "lmlf-cy"  # submits twice
GRADED = {"lmlf-dee": "correct", "lmlf-eve": "endless loop", "lmlf-fay": "huge output"}
GONE = "lmlf-gus"  # whose account is deleted behind the hub's back
NAMES = [TEACHER, ADA, BO, TWICE, *GRADED, GONE]
ASSIGNMENT = "01_mlm_masking"
MEM_LIMIT = 1 << 30
CELL_TIMEOUT_S = 120.0  # a cell of ~10 s, on 2 cores shared with other kernels
TEACHER_TIMEOUT_S = 300  # one nbgrader command
DENIED = (401, 403, 404)  # no token, no permission, or hidden


@pytest.fixture(scope="module")
def hub() -> Iterator[hubtool.Hub]:
    if missing():
        pytest.skip(missing())
    settings = {"LMLESSONS_HUB_MEM_LIMIT": "1G"}
    learners = [name for name in NAMES if name != TEACHER]
    with running_class(learners, TEACHER, link=Path(sys.prefix), settings=settings) as running:
        yield running


def arrive(hub: hubtool.Hub, name: str, kernel: bool = True) -> Learner:
    """Learner ``name`` logged in, their server ready (and a kernel started)."""
    learner = Learner(hub, name)
    assert learner.login().status_code == 302, f"{name} could not log in"
    learner.start_server()
    if kernel:
        learner.start_kernel()
    return learner


@pytest.fixture(scope="module")
def pair(hub: hubtool.Hub) -> list[Learner]:
    """Ada and Bo, each with a server and a kernel."""
    return in_parallel(lambda name: arrive(hub, name), [ADA, BO])


def teacher(hub: hubtool.Hub, *args: str) -> subprocess.CompletedProcess[str]:
    """An nbgrader command in the teacher's account, bounded in time."""
    return as_teacher(hub, args, timeout=TEACHER_TIMEOUT_S)


# --- running cells and finding processes -------------------------------------------------------


def counting_cell(seconds: float, nap: float = 0.0) -> str:
    """A cell of small torch matmuls (with a ``nap`` after each) for ``seconds``; it prints its
    step count and a check of it."""
    return (
        "import time, torch\n"
        "x, s, n = torch.eye(32), 1, 0\n"
        f"end = time.monotonic() + {seconds}\n"
        "while time.monotonic() < end:\n"
        "    x = torch.tanh(x @ x + 1e-3)\n"
        "    s, n = (s * 31 + 7) % 1000003, n + 1\n"
        f"    time.sleep({nap})\n"
        "print('steps', n, s)\n"
    )


def counted_right(output: str) -> bool:
    """Whether ``counting_cell``'s output is complete and its check matches its step count."""
    words = output.split()
    if len(words) != 3 or words[0] != "steps":
        return False
    s = 1
    for _ in range(int(words[1])):
        s = (s * 31 + 7) % 1000003
    return int(words[1]) > 0 and s == int(words[2])


def in_background(fn: Callable[[], CellResult]) -> tuple[threading.Thread, list[CellResult]]:
    """``fn()`` in a thread; its result (or the exception it raised) lands in the list."""
    results: list[CellResult] = []

    def work() -> None:
        try:
            results.append(fn())
        except Exception as error:  # the test's own assert shows it
            results.append(CellResult("raised", repr(error), 0.0))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, results


def wait_busy(learner: Learner, timeout: float = 60.0) -> None:
    """Wait until the learner's kernel is running a cell (the server's view of it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kernel = learner.server("GET", f"/api/kernels/{learner.kernel}").json()
        if kernel.get("execution_state") == "busy":
            return
        time.sleep(0.2)
    raise TimeoutError(f"{learner.name}'s kernel was not busy in {timeout:.0f} s")


def pids(name: str, *markers: str) -> list[int]:
    """The processes of account ``name`` whose command line contains every one of ``markers``."""
    uid, found = pwd.getpwnam(name).pw_uid, []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == uid:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
                if all(marker in cmdline for marker in markers):
                    found.append(int(proc.name))
        except OSError:  # it ended meanwhile
            continue
    return found


def server_pid(name: str) -> int:
    found = pids(name, "jupyterhub-singleuser")
    assert len(found) == 1, f"{name} has {len(found)} servers running: {found}"
    return found[0]


# --- the exchange ------------------------------------------------------------------------------


def inbound(hub: hubtool.Hub, name: str) -> list[Path]:
    """The learner's submissions of the assignment in the exchange (read as root)."""
    return sorted(hub.inbound.glob(f"{name}+{ASSIGNMENT}+*"))


def fetch_fresh(learner: Learner) -> None:
    """Fetch the release of the assignment, after deleting a copy fetched before (nbgrader does
    not overwrite one). The Assignments tab's reply says ``success`` whatever the fetch did, so
    the notebook is looked for."""
    notebook = f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    for path in (notebook, f"/api/contents/{ASSIGNMENT}"):  # the server deletes empty folders
        gone = learner.server("DELETE", path)
        assert gone.status_code in (204, 404), f"{learner.name} could not delete: {gone.text}"
    assert learner.fetch(ASSIGNMENT), f"{learner.name}'s fetch brought no notebook"


def submit(learner: Learner) -> None:
    reply = learner.assignment("submit", ASSIGNMENT).json()
    assert reply["success"], f"{learner.name} could not submit: {reply}"


def answer_with(learner: Learner, edit: Callable[[str], str]) -> None:
    """Write the instructor's answers into the fetched assignment, with ``edit`` applied to the
    ``mask_tokens`` answer cell (the contents API)."""
    path = f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    nb = answered(nbformat.from_dict(learner.server("GET", path).json()["content"]), ASSIGNMENT)
    cells = [c for c in nb.cells if "def my_mask_tokens(" in c.source]
    assert len(cells) == 1, "lesson 01 has one mask_tokens answer cell"
    cells[0].source = edit(cells[0].source)
    reply = learner.server("PUT", path, json={"type": "notebook", "content": nb})
    reply.raise_for_status()


def grades(names: list[str]) -> dict[str, dict[str, float]]:
    """Each learner's score per check cell and in total, from the teacher's gradebook."""
    db = teacher_course(TEACHER) / "gradebook.db"
    found: dict[str, dict[str, float]] = {}
    from nbgrader.api import Gradebook  # here: only make test-hub needs it

    with Gradebook(f"sqlite:///{db}") as gradebook:
        for name in names:
            scores = {
                cell: gradebook.find_grade(cell, ASSIGNMENT, ASSIGNMENT, name).score
                for cell in ("check-select_whole_words", "check-mask_tokens")
            }
            found[name] = {**scores, "total": gradebook.find_submission(ASSIGNMENT, name).score}
        found["max"] = {"total": gradebook.find_assignment(ASSIGNMENT).max_score}
    return found


def memory_cgroup() -> tuple[Path, str] | None:
    """Where root can make a memory cgroup with a limit here (its root and limit file, cgroup v1
    then v2, as the hub tries), or None."""
    v1, v2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")
    for root, limit in ((v1, "memory.limit_in_bytes"), (v2, "memory.max")):
        if root == v2 and not (v2 / "cgroup.controllers").exists():
            continue
        probe = root / f"lmlf-probe-{os.getpid()}"
        try:
            probe.mkdir()
            try:
                (probe / limit).write_text(str(MEM_LIMIT))
                return root, limit
            finally:
                probe.rmdir()
        except OSError:
            continue
    return None


def refused(name: str, path: Path) -> str:
    """Try to read ``path`` (a folder's listing, a file's bytes) as account ``name``: the error
    it met, '' if it read it."""
    call = "os.listdir(p)" if path.is_dir() else "open(p, 'rb').read()"
    done = as_account(name, f"import os; p = {str(path)!r}; {call}")
    return (done.stderr.strip().splitlines() or ["failed"])[-1] if done.returncode else ""


# --- the tests ---------------------------------------------------------------------------------


def test_a_killed_kernel_is_reported_and_the_others_go_on(pair: list[Learner]) -> None:
    ada, bo = pair
    ada_thread, ada_result = in_background(lambda: ada.execute(counting_cell(10)))
    bo_thread, bo_result = in_background(lambda: bo.execute(counting_cell(10)))
    wait_busy(ada)
    wait_busy(bo)
    victims = pids(ada.name, "ipykernel_launcher", ada.kernel)
    assert len(victims) == 1, f"{ada.name}'s kernel {ada.kernel}: processes {victims}"
    os.kill(victims[0], signal.SIGKILL)
    for thread in (ada_thread, bo_thread):
        thread.join(CELL_TIMEOUT_S + 30)
    assert ada_result[0].status == "dead", f"the killed cell reported {ada_result[0]}"
    assert "steps" not in ada_result[0].output, "the killed cell finished"
    assert bo_result[0].status == "ok", f"the other learner's cell: {bo_result[0]}"
    assert counted_right(bo_result[0].output), f"a wrong result: {bo_result[0].output!r}"
    assert ada.server("GET", "/api/status").status_code == 200, "the server no longer answers"
    old = ada.kernel
    ada.start_kernel()
    fresh = ada.execute("print(6 * 7)")
    assert (fresh.status, fresh.output) == ("ok", "42\n"), f"a new kernel: {fresh}"
    ada.server("DELETE", f"/api/kernels/{old}")  # the restarted one: its memory back


def test_a_hub_restart_leaves_the_learners_working(hub: hubtool.Hub, pair: list[Learner]) -> None:
    before = {learner.name: server_pid(learner.name) for learner in pair}
    slow = counting_cell(15, nap=0.02)  # mostly asleep, so that the hub's restart has the cores
    cells = [in_background(partial(learner.execute, slow, CELL_TIMEOUT_S)) for learner in pair]
    for learner in pair:
        wait_busy(learner)
    hub.stop_process("hub")
    hub.start_hub()
    during = {  # the cells still running once the hub is back, else nothing was tested
        learner.name: learner.server("GET", f"/api/kernels/{learner.kernel}") for learner in pair
    }
    for thread, _ in cells:
        thread.join(CELL_TIMEOUT_S + 30)
    for learner, (_, result) in zip(pair, cells, strict=True):
        assert result[0].status == "ok", f"{learner.name}'s cell across the restart: {result[0]}"
        assert counted_right(result[0].output), f"a wrong result: {result[0].output!r}"
        state = during[learner.name].json() if during[learner.name].ok else {}
        assert state.get("execution_state") == "busy", f"after the restart: {state}"
        server = hub.api("GET", f"/users/{learner.name}").json()["servers"].get("", {})
        assert server.get("ready"), f"the hub lists {learner.name}'s server as {server}"
        assert server_pid(learner.name) == before[learner.name], "the server was restarted"
        me = learner.session.get(f"{hub.url}/hub/api/user", timeout=60)
        assert me.ok, f"the restarted hub refuses {learner.name}'s token: {me}"
        fetch_fresh(learner)
        submit(learner)
        assert inbound(hub, learner.name), f"{learner.name}'s submission is not in the exchange"


def test_a_second_submission_is_the_one_collected_and_graded(hub: hubtool.Hub) -> None:
    cy = arrive(hub, TWICE, kernel=False)
    fetch_fresh(cy)
    submit(cy)  # the release untouched: 0 points
    cy.answer(ASSIGNMENT)
    submit(cy)  # the answers: full marks
    entries = inbound(hub, TWICE)
    assert len(entries) == 2, f"the exchange holds {[e.name for e in entries]}"
    first, last = sorted((entry / "timestamp.txt").read_text() for entry in entries)
    assert first != last, "two submissions with one timestamp"
    collected = teacher(hub, "nbgrader", "collect", f"--student={TWICE}", ASSIGNMENT)
    assert collected.returncode == 0, collected.stderr[-2000:]
    kept = teacher_course(TEACHER) / "submitted" / TWICE / ASSIGNMENT / "timestamp.txt"
    assert kept.read_text() == last, f"collect kept {kept.read_text()!r}, not {last!r}"
    graded = teacher(hub, "nbgrader", "autograde", ASSIGNMENT, f"--student={TWICE}")
    assert graded.returncode == 0, graded.stderr[-2000:]
    scores = grades([TWICE])
    assert scores[TWICE]["total"] == scores["max"]["total"] > 0, scores


def loop_forever(source: str) -> str:
    """The answer, with an endless loop (asleep) at the top of the function's body."""
    loop = "    while True:  # a learner's endless loop\n        __import__('time').sleep(1)\n"
    assert "    # BEGIN SOLUTION" in source
    return source.replace("    # BEGIN SOLUTION", loop + "    # BEGIN SOLUTION", 1)


def print_lots(source: str) -> str:
    """The answer, then 200,000 lines printed."""
    return source + "\nfor i in range(200_000):\n    print('line', i)\n"


EDITS: dict[str, Callable[[str], str]] = {
    "correct": lambda source: source,
    "endless loop": loop_forever,
    "huge output": print_lots,
}
SHORT_TIMEOUT_S = 15


def test_autograding_survives_an_endless_loop_and_a_huge_output(hub: hubtool.Hub) -> None:
    names = list(GRADED)
    for learner in in_parallel(lambda name: arrive(hub, name, kernel=False), names):
        fetch_fresh(learner)
        answer_with(learner, EDITS[GRADED[learner.name]])
        submit(learner)
    collected = teacher(hub, "nbgrader", "collect", ASSIGNMENT)
    assert collected.returncode == 0, collected.stderr[-2000:]
    course = teacher_course(TEACHER)
    classroom.build(hubtool.ROOT / "notebooks", course, ["01"], timeout=SHORT_TIMEOUT_S)
    hubtool.chown_tree(course, TEACHER)
    assert f"c.Execute.timeout = {SHORT_TIMEOUT_S}\n" in (course / "nbgrader_config.py").read_text()
    try:
        graded = in_parallel(
            lambda name: teacher(hub, "nbgrader", "autograde", ASSIGNMENT, f"--student={name}"),
            names,
            workers=2,
        )
    finally:
        classroom.build(hubtool.ROOT / "notebooks", course, ["01"])  # the usual time limit
        hubtool.chown_tree(course, TEACHER)
    for name, done in zip(names, graded, strict=True):
        assert done.returncode == 0, f"autograding {GRADED[name]}: {done.stderr[-2000:]}"
    scores = grades(names)  # raises if a submission is not in the gradebook
    full, lost = scores["max"]["total"], classroom.POINTS["mask_tokens"]
    dee, eve, fay = names
    assert scores[dee]["total"] == full > 0, f"the correct submission: {scores[dee]}"
    assert scores[fay]["total"] == full, f"the huge output: {scores[fay]}"
    assert scores[eve]["check-mask_tokens"] == 0, f"the endless loop: {scores[eve]}"
    assert scores[eve]["total"] == full - lost, f"the endless loop: {scores[eve]}"
    looped = course / "autograded" / eve / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert "CellTimeoutError" in looped.read_text(), (
        "the endless loop was not stopped by the time limit"
    )


EAT_CELL = """\
chunks = []
for step in range(1, 13):  # 256 MiB a step, at most 3 GiB
    chunks.append(b'x' * (256 << 20))  # written, not only reserved
    print(step * 256, 'MiB', flush=True)
"""


def test_a_kernel_beyond_its_memory_limit_dies_alone(pair: list[Learner]) -> None:
    found = memory_cgroup()
    if found is None:
        pytest.skip("root cannot make a memory cgroup here: the hub enforces no memory limit")
    root, limit = found
    ada, bo = pair
    group = root / "lmlessons" / ada.name
    assert group.is_dir(), f"the hub made no memory cgroup for {ada.name} ({group})"
    assert int((group / limit).read_text()) == MEM_LIMIT, (group / limit).read_text()
    server = server_pid(ada.name)
    members = {int(pid) for pid in (group / "cgroup.procs").read_text().split()}
    assert server in members, f"{ada.name}'s server {server} is not in {group}: {members}"
    kernel = pids(ada.name, "ipykernel_launcher", ada.kernel)
    assert set(kernel) <= members and kernel, f"the kernel {kernel} is not in {group}"
    bo_thread, bo_result = in_background(lambda: bo.execute(counting_cell(10)))
    wait_busy(bo)
    eaten = ada.execute(EAT_CELL)
    bo_thread.join(CELL_TIMEOUT_S + 30)
    assert eaten.status == "dead", f"the kernel that ate the memory: {eaten}"
    assert "3072 MiB" not in eaten.output, "the kernel took 3 GiB under a 1 GiB limit"
    assert server_pid(ada.name) == server, "the learner's server died with the kernel"
    assert ada.server("GET", "/api/status").status_code == 200, "the server no longer answers"
    assert bo_result[0].status == "ok", f"the other learner's cell: {bo_result[0]}"
    assert counted_right(bo_result[0].output), f"a wrong result: {bo_result[0].output!r}"
    again = ada.execute("print(6 * 7)")  # the kernel, restarted by the server
    assert (again.status, again.output) == ("ok", "42\n"), f"the restarted kernel: {again}"


def test_learners_are_kept_apart(hub: hubtool.Hub, pair: list[Learner]) -> None:
    ada, bo = pair
    own = hubtool.home(ADA) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    if not own.exists():
        fetch_fresh(ada)
    if not inbound(hub, ADA):
        submit(ada)
    assert refused(ADA, own) == "", "the positive control: ada cannot read her own file"
    assert "PermissionError" in refused(BO, hubtool.home(ADA)), "bo listed ada's home"
    assert "PermissionError" in refused(BO, own), "bo read ada's fetched assignment"
    box = hub.inbound
    assert "PermissionError" in refused(BO, box), "bo listed the exchange's submissions"
    pattern = str(box / f"{ADA}+*")
    globbed = as_account(BO, f"import glob; print(glob.glob({pattern!r}))").stdout.strip()
    assert inbound(hub, ADA) and globbed == "[]", f"bo found ada's submission: {globbed}"
    course = teacher_course(TEACHER)
    source = course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert refused(TEACHER, course / "gradebook.db") == "", "the teacher cannot read the gradebook"
    assert "PermissionError" in refused(BO, source), "bo read the notebook with the solutions"
    assert "PermissionError" in refused(BO, course / "gradebook.db"), "bo read the gradebook"
    for folder in ("autograded", "submitted"):
        assert "PermissionError" in refused(BO, course / folder), f"bo listed the {folder}/"
    state = hub.hub_dir / "state"
    assert "PermissionError" in refused(BO, state), "bo listed the hub's state"
    db = state / "jupyterhub.sqlite"
    assert "PermissionError" in refused(BO, db), "bo read the hub's database (tokens)"
    environ = Path("/proc") / str(server_pid(ADA)) / "environ"
    mine = as_account(ADA, f"print(open({str(environ)!r}, 'rb').read().count(b'API_TOKEN'))")
    assert int(mine.stdout or 0) > 0, f"ada's server holds no API token: {mine.stderr}"
    assert "PermissionError" in refused(BO, environ), "bo read ada's server's token"
    calls = [("GET", "/api/contents/"), ("GET", "/api/kernels"), ("POST", "/api/kernels")]
    for method, path in calls:
        got = bo.session.request(method, f"{ada.base}{path}", timeout=60, allow_redirects=False)
        assert got.status_code in DENIED, f"bo's token on ada's server: {method} {path}: {got}"
    assert ada.server("GET", "/api/kernels").ok, "the positive control: ada's token on her server"
    me = bo.session.get(f"{hub.url}/hub/api/user", timeout=60)
    assert me.ok and me.json()["name"] == BO, f"the positive control: bo's token: {me}"
    users = bo.session.get(f"{hub.url}/hub/api/users", timeout=60)
    assert users.status_code in DENIED, f"bo's token listed the hub's users: {users}"
    start = bo.session.post(f"{hub.url}/hub/api/users/{ADA}/server", timeout=60)
    assert start.status_code in DENIED, f"bo's token asked for ada's server: {start}"


def test_an_account_deleted_while_the_hub_lists_its_learner_is_made_again(hub: hubtool.Hub) -> None:
    """At its start the hub makes the account of every learner it lists (``add_user``): deleting
    a learner takes the hub's admin panel and ``userdel``, not ``userdel`` alone."""
    assert Learner(hub, GONE).login().status_code == 302
    remove_accounts([GONE])  # the system account only: the hub still lists the learner
    with pytest.raises(KeyError):
        pwd.getpwnam(GONE)
    hub.stop_process("hub")
    hub.start_hub()
    assert pwd.getpwnam(GONE).pw_dir  # made again, with an empty home
    assert hub.api("DELETE", f"/users/{GONE}").status_code == 204  # the admin panel's delete
    remove_accounts([GONE])
    hub.stop_process("hub")
    hub.start_hub()
    with pytest.raises(KeyError):
        pwd.getpwnam(GONE)
