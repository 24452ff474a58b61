"""What a test run leaves behind: the hubs, proxies, idle cullers, learners' servers and kernels it
started, the accounts it made and the hub folders it wrote in the temp directory.

``snapshot()`` at the start of a run and ``leftovers(before)`` at its end name what the run made
and did not stop (conftest.py does it for every pytest session, ``tools.hub_load`` for the load
test); ``clean(left)`` stops those processes by their PIDs and removes those accounts and folders.
A process or folder counts when it appeared after the snapshot, so whatever else runs on the
machine at the time (a teacher's own hub, ``make lab``) is left alone, unless it starts during the
run.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# What the class hub and the lessons start, as it appears in a process's command line.
PROCESSES = (
    "jupyterhub",  # the hub, jupyterhub-singleuser (a learner's server), jupyterhub_idle_culler
    "configurable-http-proxy",
    "ipykernel_launcher",  # a kernel: nbval's, a browser test's JupyterLab's, a learner's
    "jupyter-lab",
    "jupyter_lab",
)
# The accounts the tests and the load test make: tests/test_hub.py, tests/test_hub_faults.py and
# tools/hub_load.py (tests/test_leftovers.py checks that their names start so).
ACCOUNT_PREFIXES = ("lmlt-", "lmlf-", "lmload-")
FOLDER_PREFIX = "lmlessons-hub-"  # tools.hub_class.running_class's and the command test's
GRACE_S = 15.0  # kernels and servers that were told to stop have this long to end


@dataclass
class Snapshot:
    """The processes, accounts and hub folders there were at the start of a run."""

    pids: set[int] = field(default_factory=set)
    accounts: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)


@dataclass
class Leftovers:
    """What a run made and left: processes (PID: command line), accounts and folders."""

    processes: dict[int, str] = field(default_factory=dict)
    accounts: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.accounts or self.folders)

    def describe(self) -> str:
        lines = [f"process {pid}: {cmd[:200]}" for pid, cmd in sorted(self.processes.items())]
        lines += [f"account {name}" for name in self.accounts]
        lines += [f"folder {path}" for path in self.folders]
        return "\n".join(lines)


def hub_processes() -> dict[int, str]:
    """Every running process of ``PROCESSES``: PID -> command line."""
    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] != os.getpid() and any(name in cmd for name in PROCESSES):
            found[proc.info["pid"]] = cmd
    return found


def made_accounts(names: Iterable[str] | None = None) -> set[str]:
    """The accounts among ``names`` (default: the system's) that the tests make."""
    names = [p.pw_name for p in pwd.getpwall()] if names is None else names
    return {name for name in names if name.startswith(ACCOUNT_PREFIXES)}


def hub_folders(tmp: Path | None = None) -> set[str]:
    """The hub folders in the temp directory."""
    return {str(p) for p in Path(tmp or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*")}


def snapshot() -> Snapshot:
    return Snapshot(set(hub_processes()), made_accounts(), hub_folders())


def leftovers(before: Snapshot, grace_s: float = GRACE_S) -> Leftovers:
    """What appeared since ``before`` and is still there after up to ``grace_s`` seconds."""
    deadline = time.monotonic() + grace_s
    while True:
        left = Leftovers(
            {pid: cmd for pid, cmd in hub_processes().items() if pid not in before.pids},
            sorted(made_accounts() - before.accounts),
            sorted(hub_folders() - before.folders),
        )
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def clean(left: Leftovers) -> None:
    """Stop ``left``'s processes (SIGTERM, then SIGKILL), remove its accounts and folders."""
    from tools.hub_class import remove_accounts  # only when something is left

    procs = []
    for pid in left.processes:
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            procs.append(proc)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=10)
    remove_accounts(left.accounts)
    for path in left.folders:
        shutil.rmtree(path, ignore_errors=True)
