"""What a test run leaves behind: the hubs, proxies, idle cullers, learners' servers, kernels and
browsers it started, the accounts it made and the hub folders it wrote.

``begin()`` at the start of a run (conftest.py does it for every pytest session, ``tools.hub_load``
for the load test) makes the run's process a child subreaper, so that every process the run
starts stays its descendant even when its parent ends (a hub's idle culler, a kernel whose server
was killed), and opens a registry where ``register`` (called by ``tools.hub_class.running_class``
and the tests that make accounts of their own) writes the accounts and folders the run makes.
``leftovers()`` at its end names what is still there; ``clean(left)`` stops those processes by their
PIDs and removes those accounts and folders. Only the run's own processes, accounts and folders
count, so two runs on one machine (a developer's ``make test-fast`` beside ``make test-hub``) never
take each other's for leftovers.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REGISTRY = "LMLESSONS_LEFTOVERS"  # the registry file's path, inherited by every worker
PR_SET_CHILD_SUBREAPER = 36  # prctl(2), Linux 3.4 and later
GRACE_S = 15.0  # kernels and servers that were told to stop have this long to end


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


def begin() -> Path:
    """Make this process the reaper of every orphan it leaves (Linux; elsewhere orphans go to
    init and only the processes still below it count) and open the run's registry; its path."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    fd, path = tempfile.mkstemp(prefix="lmlessons-leftovers-", suffix=".txt")
    os.close(fd)
    os.environ[REGISTRY] = path
    return Path(path)


def register(accounts: Iterable[str] = (), folders: Iterable[Path | str] = ()) -> None:
    """Note ``accounts`` and ``folders`` as made by this run (nothing outside a run)."""
    path = os.environ.get(REGISTRY)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.writelines([f"account {name}\n" for name in accounts])
            out.writelines([f"folder {folder}\n" for folder in folders])


#: Helpers that Python's multiprocessing keeps for the life of the process that started them
#: (a DataLoader whose workers are spawned or start from a fork server starts both); they end
#: with it.
PROCESS_LIFETIME_HELPERS = (
    "from multiprocessing.forkserver import main",
    "from multiprocessing.resource_tracker import main",
)


def descendants() -> dict[int, str]:
    """Every living process below this one (PID -> command line), but for this process's own
    multiprocessing helpers."""
    found = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            argv = proc.cmdline()
            if proc.ppid() == os.getpid() and any(
                a.startswith(PROCESS_LIFETIME_HELPERS) for a in argv
            ):
                continue
            found[proc.pid] = " ".join(argv)
        except psutil.NoSuchProcess:
            continue
    return found


def registered() -> tuple[list[str], list[str]]:
    """The registered accounts and folders that still exist."""
    path = os.environ.get(REGISTRY)
    lines = Path(path).read_text(encoding="utf-8").splitlines() if path else []
    accounts = {line.split(" ", 1)[1] for line in lines if line.startswith("account ")}
    folders = {line.split(" ", 1)[1] for line in lines if line.startswith("folder ")}
    return sorted(a for a in accounts if exists(a)), sorted(f for f in folders if Path(f).exists())


def exists(account: str) -> bool:
    try:
        import pwd

        pwd.getpwnam(account)
    except KeyError:
        return False
    return True


def leftovers(grace_s: float = GRACE_S) -> Leftovers:
    """What the run made and is still there after up to ``grace_s`` seconds."""
    deadline = time.monotonic() + grace_s
    while True:
        left = Leftovers(descendants(), *registered())
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


def end() -> None:
    """Close the run's registry."""
    path = os.environ.pop(REGISTRY, None)
    if path:
        Path(path).unlink(missing_ok=True)
