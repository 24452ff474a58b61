"""Simulated learners and a teacher on the class hub (tools/hub.py): what the hub tests and the
load test (``python -m tools.hub_load``) drive.

A learner logs in with the class password (the hub's login form, which makes their account),
starts their server through the hub's REST API, runs code in a kernel through the Jupyter server's
kernel API (a websocket), edits files through its contents API, and fetches and submits an
assignment through nbgrader's Assignments API, all as a browser would, on 127.0.0.1. The teacher
releases, collects and autogrades with nbgrader's commands in their own account.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nbformat
import requests
import websocket

from tools import leftovers
from tools.classroom import COURSE_ID
from tools.hub import ROOT, SYSTEM_PYTHON, Hub, free_port, home, install, shared_temp_dir
from tools.markers import has_solution_region, is_solution_cell

T = TypeVar("T")
R = TypeVar("R")
READY_TIMEOUT_S = 300.0  # a whole class starting at once on 2 cores
POLL_S = 5.0  # how often a waiting learner looks at the clock
# A websocket handshake to a kernel goes through the proxy and the learner's server, which on 2
# cores shared by 20 fine-tuning kernels answer in tens of seconds: a learner waits this long for
# each try, and tries again until the cell's own time is up.
CONNECT_TIMEOUT_S = 60.0
# Why websocket-client and a hand-written loop, not a kernel client: jupyter_client and nbclient
# speak ZMQ to a kernel's connection file, which sits in the learner's own 0700 runtime folder
# behind their server (a browser reaches the kernel only through the server's websocket, as this
# does); jupyter-kernel-client 1.0 speaks that websocket, but reads neither the server's
# ``dead``/``restarting`` status nor a closed socket as an end, so a killed kernel would show as a
# cell that timed out. The load test and the faults tests need both as results.


@dataclass
class CellResult:
    """What one cell did: its status (``ok``, ``error``, ``dead``), text output and seconds."""

    status: str
    output: str
    seconds: float


def lesson_cells(lesson: str, *, through: str) -> list[str]:
    """The code cells of instructor lesson ``lesson`` (a name prefix), from the first through the
    first one that contains ``through``: what a learner runs, answers included."""
    path = next((ROOT / "notebooks").glob(f"{lesson}*.ipynb"))
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    end = next(i for i, source in enumerate(cells) if through in source)
    return cells[: end + 1]


@dataclass
class Learner:
    """One simulated learner of ``hub``."""

    hub: Hub
    name: str
    session: requests.Session = field(default_factory=requests.Session)
    token: str = ""
    kernel: str = ""
    times: dict[str, float] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"{self.hub.url}/user/{self.name}"

    def login(self, password: str | None = None) -> requests.Response:
        """The hub's login form with the class password; then a token of this learner's own,
        made as the hub's Token page makes it (the session's cookie and its XSRF token)."""
        form = self.session.get(f"{self.hub.url}/hub/login", timeout=60)
        form.raise_for_status()
        data = {"username": self.name, "password": password or self.hub.password}
        data["_xsrf"] = self.session.cookies.get("_xsrf") or ""
        url = f"{self.hub.url}/hub/login?next="
        reply = self.session.post(url, data=data, timeout=120, allow_redirects=False)
        if reply.status_code == 302:
            xsrf = {"X-XSRFToken": self.session.cookies.get("_xsrf") or ""}
            made = self.session.post(
                f"{self.hub.url}/hub/api/users/{self.name}/tokens",
                json={"note": "simulated learner"}, headers=xsrf, timeout=60,
            )  # fmt: skip
            made.raise_for_status()
            self.token = made.json()["token"]
            self.session.headers["Authorization"] = f"token {self.token}"
        return reply

    def start_server(self) -> float:
        """Ask the hub for this learner's server and wait until it answers; the seconds it took."""
        start = time.monotonic()
        self.session.post(
            f"{self.hub.url}/hub/api/users/{self.name}/server", timeout=READY_TIMEOUT_S
        )
        while time.monotonic() - start < READY_TIMEOUT_S:
            user = self.session.get(f"{self.hub.url}/hub/api/users/{self.name}", timeout=60).json()
            if user.get("servers", {}).get("", {}).get("ready"):
                self.times["ready"] = time.monotonic() - start
                return self.times["ready"]
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}'s server was not ready in {READY_TIMEOUT_S:.0f} s")

    def server(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A call to this learner's Jupyter server (through the proxy)."""
        return self.session.request(method, f"{self.base}{path}", timeout=READY_TIMEOUT_S, **kwargs)

    def start_kernel(self) -> str:
        reply = self.server("POST", "/api/kernels", json={"name": "python3"})
        reply.raise_for_status()
        self.kernel = reply.json()["id"]
        return self.kernel

    def execute(self, code: str, timeout: float = READY_TIMEOUT_S) -> CellResult:
        """Run ``code`` in this learner's kernel, as JupyterLab does (one execute request).

        Never raises for the hub's or the machine's sake: a kernel that dies is ``dead``, a server
        that goes away ``closed``, a socket that could not be opened before ``timeout``
        ``unreachable``, a cell that outlasts it ``timeout``."""
        start = time.monotonic()
        ws = self.connect(start + timeout)
        if ws is None:
            return CellResult("unreachable", "", time.monotonic() - start)
        try:
            msg_id = uuid.uuid4().hex
            ws.send(json.dumps(execute_request(msg_id, code, self.name)))
            return collect_reply(ws, msg_id, start, timeout)
        except (websocket.WebSocketException, OSError):  # the server itself went away
            return CellResult("closed", "", time.monotonic() - start)
        finally:
            ws.close()

    def connect(self, deadline: float) -> websocket.WebSocket | None:
        """The kernel's websocket, tried until ``deadline`` (None if it never opened); it then
        reads with a ``POLL_S`` timeout, so that a waiting learner looks at the clock."""
        url = f"{self.base.replace('http', 'ws', 1)}/api/kernels/{self.kernel}/channels"
        auth = [f"Authorization: token {self.token}"]
        while time.monotonic() < deadline:
            wait = min(CONNECT_TIMEOUT_S, max(deadline - time.monotonic(), 1.0))
            try:
                ws = websocket.create_connection(url, header=auth, timeout=wait)
            except (websocket.WebSocketException, OSError):  # a handshake that took too long
                time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
                continue
            ws.settimeout(POLL_S)
            return ws
        return None

    def run_cells(self, cells: Sequence[str]) -> CellResult:
        """Run ``cells`` one after another, stopping at the first that fails; their total."""
        start, outputs = time.monotonic(), []
        for code in cells:
            result = self.execute(code)
            outputs.append(result.output)
            if result.status != "ok":
                return CellResult(result.status, "".join(outputs), time.monotonic() - start)
        return CellResult("ok", "".join(outputs), time.monotonic() - start)

    def assignment(self, action: str, assignment: str) -> requests.Response:
        """nbgrader's Assignments tab: ``fetch`` or ``submit`` ``assignment``."""
        data = {"assignment_id": assignment, "course_id": COURSE_ID}
        return self.server("POST", f"/assignments/{action}", data=data)

    def fetch(self, assignment: str) -> bool:
        """Fetch ``assignment``; whether its notebook arrived (the tab says ``success`` whatever
        the fetch did: it fetches nothing over a copy fetched before)."""
        self.assignment("fetch", assignment)
        return self.server("GET", f"/api/contents/{assignment}/{assignment}.ipynb").ok

    def answer(self, assignment: str) -> None:
        """Write the instructor's answers into the fetched ``assignment`` (the contents API)."""
        path = f"/api/contents/{assignment}/{assignment}.ipynb"
        model = self.server("GET", path).json()
        solved = answered(nbformat.from_dict(model["content"]), assignment)
        reply = self.server("PUT", path, json={"type": "notebook", "content": solved})
        reply.raise_for_status()


def execute_request(msg_id: str, code: str, username: str) -> dict:
    """A Jupyter ``execute_request`` on the shell channel (the kernel websocket's JSON form)."""
    header = {
        "msg_id": msg_id,
        "username": username,
        "session": msg_id,
        "msg_type": "execute_request",
        "version": "5.3",
    }
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}  # fmt: skip
    return {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
    }


def collect_reply(ws: websocket.WebSocket, msg_id: str, start: float, timeout: float) -> CellResult:
    """Read the kernel's messages for request ``msg_id`` until its reply and idle status.

    A kernel that dies is ``dead``: the server's ``restarting`` or ``dead`` status answers no
    request. The clock is read every ``POLL_S`` seconds, since the server's websocket pings (every
    30 s) would keep a socket timeout alone from ever firing."""
    outputs: list[str] = []
    status, idle = "", False
    while not (status and idle):
        if time.monotonic() - start > timeout:
            return CellResult("timeout", "".join(outputs), time.monotonic() - start)
        try:
            msg = json.loads(ws.recv())
        except websocket.WebSocketTimeoutException:
            continue  # a quiet cell: read the clock again
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content["execution_state"] in ("restarting", "dead"):
            return CellResult("dead", "".join(outputs), time.monotonic() - start)
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if kind == "stream":
            outputs.append(content["text"])
        elif kind in ("execute_result", "display_data"):
            outputs.append(content["data"].get("text/plain", "") + "\n")
        elif kind == "error":
            outputs.append(f"{content['ename']}: {content['evalue']}\n")
        elif kind == "status":
            idle = content["execution_state"] == "idle"
        elif kind == "execute_reply":
            status = content["status"]
    return CellResult(status, "".join(outputs), time.monotonic() - start)


def answered(nb: nbformat.NotebookNode, assignment: str) -> nbformat.NotebookNode:
    """The release ``nb`` with each answer cell replaced by the instructor lesson's cell."""
    lesson = nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4)
    answers = [
        c.source for c in lesson.cells if has_solution_region(c.source) and not is_solution_cell(c)
    ]
    cells = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    for cell, source in zip(cells, answers, strict=False):
        cell.source = source
    return nb


def teacher_course(teacher: str) -> Path:
    return home(teacher) / "course"


def as_teacher(
    hub: Hub, args: Sequence[str], timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``ARGS`` (an nbgrader command) in the teacher's account, in their course folder."""
    course = teacher_course(hub.teacher)
    env = {
        "HOME": str(course.parent),
        "PATH": f"{hub.hub_dir / 'venv' / 'bin'}:/usr/sbin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    cmd = ["runuser", "-u", hub.teacher, "--", *args]
    return subprocess.run(cmd, cwd=course, capture_output=True, text=True, timeout=timeout, env=env)


def owned_by(uid: int, folder: Path) -> list[Path]:
    """The entries at the top of ``folder`` that account ``uid`` owns (what a learner's kernel
    left in the temp folder: torch's ``torchinductor_<name>`` cache, ...)."""
    found = []
    for entry in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):  # another process removed it meanwhile
            if entry.lstat().st_uid == uid:
                found.append(entry)
    return found


def remove_accounts(names: Iterable[str]) -> None:
    """Delete the accounts ``names`` (processes, homes, what they left in the temp folder, memory
    cgroups), where they exist."""
    for name in names:
        try:
            uid: int | None = pwd.getpwnam(name).pw_uid
        except KeyError:
            uid = None
        for _ in range(100):  # userdel refuses an account whose processes are still ending
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            if subprocess.run(["userdel", "-r", name], capture_output=True).returncode in (0, 6):
                break  # 6: no such account
            time.sleep(0.1)
        for entry in owned_by(uid, Path(tempfile.gettempdir())) if uid is not None else []:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        for root in (Path("/sys/fs/cgroup/memory/lmlessons"), Path("/sys/fs/cgroup/lmlessons")):
            for _ in range(50):  # the killed processes leave their cgroup within moments
                try:
                    if (root / name).is_dir():
                        (root / name).rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def as_account(name: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` as account ``name`` (what a learner could do in a cell of their own)."""
    cmd = ["runuser", "-u", name, "--", str(SYSTEM_PYTHON), "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def in_parallel(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, run in threads (each a learner at their own machine)."""
    with ThreadPoolExecutor(max_workers=workers or max(1, len(items))) as pool:
        return list(pool.map(fn, items))


def missing() -> str:
    """Why a class hub cannot run here ('' when it can)."""
    if os.geteuid() != 0:
        return "needs root: the hub makes an account per learner"
    if not SYSTEM_PYTHON.exists():
        return f"needs {SYSTEM_PYTHON}, a Python every account can run"
    if not all(shutil.which(tool) for tool in ("npm", "useradd", "runuser", "pkill")):
        return "needs npm, useradd, runuser and pkill"
    return ""


@contextmanager
def running_class(
    names: Sequence[str],
    teacher: str,
    *,
    hub_dir: Path | None = None,
    link: Path | None = None,
    settings: dict[str, str] | None = None,
    assignment: str = "01_mlm_masking",
    local_config: str = "",
) -> Iterator[Hub]:
    """A hub installed in ``hub_dir`` (a temp folder, removed after, if None; ``link``: see
    ``tools.hub.install``) and started, with ``teacher``'s ``assignment`` released; the accounts
    ``names`` and the teacher's are removed before (left by an interrupted run) and after.
    ``local_config``: the hub's ``local_config.py``, where a teacher's own settings go."""
    accounts = [teacher, *names]
    remove_accounts(accounts)
    folder = hub_dir or shared_temp_dir("lmlessons-hub-")
    leftovers.register(accounts, [] if hub_dir else [folder])
    for kept in ("exchange", "state"):  # an earlier class's submissions, and its users: the hub
        shutil.rmtree(folder / kept, ignore_errors=True)  # would make their accounts again
    try:
        install(folder, link=link, teacher=teacher)
        (folder / "local_config.py").write_text(local_config)
        running = Hub(folder, port=free_port(), teacher=teacher, settings=dict(settings or {}))
        running.start()
        try:
            for step in ("generate_assignment", "release_assignment"):
                done = as_teacher(running, ["nbgrader", step, assignment, "--force"], timeout=300)
                if done.returncode:
                    raise RuntimeError(f"nbgrader {step} failed:\n{done.stderr}")
            yield running
        finally:
            running.stop()
    finally:
        remove_accounts(accounts)
        if hub_dir is None:
            shutil.rmtree(folder, ignore_errors=True)
