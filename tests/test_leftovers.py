"""The check that a test session leaves nothing behind (tools/leftovers.py, conftest.py): it
finds a process, an account and a hub folder that appeared during the run, and leaves alone what
was there before."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import psutil

from tools import leftovers

ROOT = Path(__file__).resolve().parents[1]


def test_a_process_started_during_the_run_is_left_over_and_stopped_by_its_pid() -> None:
    there_before = subprocess.Popen(["bash", "-c", "exec -a configurable-http-proxy sleep 60"])
    try:
        before = leftovers.snapshot()
        made = subprocess.Popen(["bash", "-c", "exec -a jupyterhub_idle_culler sleep 60"])
        left = leftovers.leftovers(before, grace_s=0)
        assert made.pid in left.processes and there_before.pid not in left.processes
        assert "jupyterhub_idle_culler" in left.describe()
        leftovers.clean(leftovers.Leftovers({made.pid: left.processes[made.pid]}))
        made.wait(timeout=10)  # ended (psutil reaped it, so its return code is lost)
        assert not leftovers.leftovers(before, grace_s=0).processes
    finally:
        for proc in (there_before, locals().get("made")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_hub_folder_made_during_the_run_is_left_over_and_removed() -> None:
    before = leftovers.snapshot()
    folder = Path(tempfile.mkdtemp(prefix=leftovers.FOLDER_PREFIX))
    left = leftovers.leftovers(before, grace_s=0)
    assert left.folders == [str(folder)] and bool(left)
    leftovers.clean(leftovers.Leftovers(folders=left.folders))
    assert not folder.exists()


def test_the_accounts_the_tests_make_are_the_ones_it_looks_for() -> None:
    assert leftovers.made_accounts(["root", "lmlt-ada", "lmload-007", "teacher"]) == {
        "lmlt-ada",
        "lmload-007",
    }
    names = set()
    for path in (ROOT / "tests" / "test_hub.py", ROOT / "tests" / "test_hub_faults.py"):
        names |= set(re.findall(r'"(lml(?!essons)[a-z]*-[a-z0-9-]+)"', path.read_text()))
    from tools import hub_load

    names |= {hub_load.TEACHER, f"{hub_load.PREFIX}000"}
    assert len(names) > 10 and leftovers.made_accounts(names) == names


def test_the_checker_itself_is_not_a_leftover() -> None:
    assert psutil.Process().pid not in leftovers.hub_processes()
