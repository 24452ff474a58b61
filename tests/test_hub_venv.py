"""The hub's venv for the tests (``tools.hub.link_venv``) from a venv that other accounts cannot
read (a checkout in root's home, a home folder on Debian 12 and later, any ``mktemp -d``) and from
one they can: every account finds the packages, the course, and the data JupyterHub and
JupyterLab read beside their install (JupyterHub's templates: without them its login page answers
500, ``TemplateNotFound: error.html``). The tests' own venv, hard-linked into such a folder, stands
for the clone: no second install."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import hub as hubtool
from tools.hub_class import missing

pytestmark = [pytest.mark.hub, pytest.mark.slow]

# What a learner's server and the hub read, run as an account that owns none of it.
READS = """
import os, jupyterhub._data, lmlessons
from jupyterlab.commands import get_app_dir
templates = os.path.join(jupyterhub._data.DATA_FILES_PATH, "templates")
for page in ("error.html", "login.html"):
    open(os.path.join(templates, page)).read()
assert os.path.isdir(os.path.join(get_app_dir(), "static")), get_app_dir()
labext = os.path.join(get_app_dir(), "..", "labextensions", "@jupyter", "nbgrader")
assert os.path.isdir(labext), labext
print(templates)
"""


@pytest.fixture
def folder(request: pytest.FixtureRequest) -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="lmlessons-venv-test-"))
    made.chmod(request.param)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def hub_dir() -> Iterator[Path]:
    """The hub's folder, as ``tools.hub.install`` leaves it: every account may enter it."""
    made = hubtool.shared_temp_dir("lmlessons-venv-test-hub-")
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("folder", [0o700, 0o755], indirect=True, ids=["closed", "open"])
def test_every_account_runs_the_hubs_venv_from_a_venv_in_a_closed_or_open_folder(
    folder: Path, hub_dir: Path
) -> None:
    if missing():
        pytest.skip(missing())
    env = folder / "env"
    if subprocess.run(["cp", "-al", sys.prefix, env], capture_output=True).returncode:
        pytest.skip("a hard-linked copy of the venv needs it on the temp folder's file system")
    closed = not hubtool.readable_by_all(env / "lib")
    assert closed == (folder.stat().st_mode & 0o777 == 0o700)
    venv_bin = hubtool.link_venv(hub_dir, env, hubtool.SYSTEM_PYTHON)
    run = ["runuser", "-u", "nobody", "--", str(venv_bin / "python"), "-c", READS]
    done = subprocess.run(run, capture_output=True, text=True, cwd="/", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # from the copy in the hub's folder where the venv is closed to others, from it where it is not
    assert done.stdout.strip().startswith(str(hub_dir if closed else env)), done.stdout
    version = subprocess.run(
        ["runuser", "-u", "nobody", "--", str(venv_bin / "jupyterhub"), "--version"],
        capture_output=True, text=True, cwd="/", timeout=120,
    )  # fmt: skip
    assert version.returncode == 0, version.stderr[-3000:]
