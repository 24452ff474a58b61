"""The check that a run leaves nothing behind (tools/leftovers.py, conftest.py), in a child
process that plays the run: it finds the processes the run started, even orphaned, and the
accounts and folders it registered, and nothing of another run's."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tools import leftovers

ROOT = Path(__file__).resolve().parents[1]

# A run: it starts an idle culler that outlives its parent (an orphan), Python's fork server (its
# own helpers, which end with it) and a process one level down named like that helper, registers a
# folder and an account that does not exist (so it is not reported), prints what the check finds,
# cleans it and prints what is left then.
RUN = """
import json, multiprocessing.forkserver, subprocess, sys, tempfile, time
from pathlib import Path
from tools import leftovers
leftovers.begin()
multiprocessing.forkserver.ensure_running()
named = "exec -a 'from multiprocessing.forkserver import main' sleep 60 & wait"
subprocess.Popen(["bash", "-c", named])
subprocess.Popen(["bash", "-c", "(exec -a jupyterhub_idle_culler sleep 60) & exit 0"]).wait()
for _ in range(200):  # the orphan's subshell takes a moment to exec under its new name
    if subprocess.run(["pgrep", "-f", "^jupyterhub_idle_culler 60"], capture_output=True).stdout:
        break
    time.sleep(0.05)
folder = Path(tempfile.mkdtemp(prefix="lmlessons-hub-"))
leftovers.register(["lmlt-no-such-account"], [folder])
left = leftovers.leftovers(grace_s=0)
print(json.dumps({"processes": list(left.processes.values()), "folders": left.folders,
                  "accounts": left.accounts}))
leftovers.clean(left)
print(json.dumps({"after": bool(leftovers.leftovers(grace_s=0)), "folder": folder.exists()}))
leftovers.end()
"""


def play() -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-c", RUN], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_an_orphaned_process_and_a_registered_folder_are_left_over_and_cleaned() -> None:
    found, after = play()
    assert any("jupyterhub_idle_culler" in cmd for cmd in found["processes"])
    helpers = {cmd for cmd in found["processes"] if "multiprocessing" in cmd}
    fake = "from multiprocessing.forkserver import main"
    assert helpers == {f"{fake} 60", f"bash -c exec -a '{fake}' sleep 60 & wait"}  # not the run's
    assert len(found["folders"]) == 1 and found["accounts"] == []  # no such account: not there
    assert after == {"after": False, "folder": False}


def test_another_runs_processes_and_folders_are_not_this_runs() -> None:
    other = subprocess.Popen(["bash", "-c", "exec -a configurable-http-proxy sleep 60"])
    folder = Path(tempfile.mkdtemp(prefix="lmlessons-hub-"))
    try:
        found, _ = play()
        assert not any("configurable-http-proxy" in cmd for cmd in found["processes"])
        assert str(folder) not in found["folders"]
    finally:
        other.kill()
        other.wait()
        folder.rmdir()


def test_outside_a_run_registering_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(leftovers.REGISTRY, raising=False)
    leftovers.register(["lmlt-ada"], ["/nowhere"])
    assert leftovers.registered() == ([], [])


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="makes an account: needs root and useradd",
)
def test_removing_an_account_removes_what_it_left_in_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A learner's kernel leaves torch's ``torchinductor_<name>`` cache in the temp folder; the
    account's removal takes it, and nothing that another account owns."""
    from tools.hub_class import owned_by, remove_accounts

    name = "lmlt-leftover"
    remove_accounts([name])
    subprocess.run(["useradd", "--no-create-home", name], check=True, capture_output=True)
    leftovers.register([name], [])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # gettempdir() answers tmp_path
    uid = pwd.getpwnam(name).pw_uid
    cache, note, other = tmp_path / f"torchinductor_{name}", tmp_path / "note", tmp_path / "root's"
    cache.mkdir()
    (cache / "kernel.py").write_text("pass")
    note.write_text("x")
    other.mkdir()
    for path in (cache, cache / "kernel.py", note):
        os.chown(path, uid, uid)
    assert sorted(owned_by(uid, tmp_path)) == [note, cache]
    remove_accounts([name])
    assert sorted(tmp_path.iterdir()) == [other]
    with pytest.raises(KeyError):
        pwd.getpwnam(name)
