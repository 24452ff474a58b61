"""JupyterHub for one lmlessons class on one machine (``make hub``; docs/teaching.md).

``python -m tools.hub run`` starts the proxy and this hub with the settings below in its
environment; ``python -m tools.hub install`` made what they name. Everything else a teacher may
change goes in ``<hub dir>/local_config.py``, loaded last (another authenticator, a roster, limits).

- Learners log in with the class password and get a system account of their own, made on first
  login (home readable by its owner only) in the group ``lmlessons``; only such accounts can log
  in, so no one logs in as an existing account of the machine (root included).
- Each server runs as its learner (``LocalProcessSpawner``), with the course installed once in the
  hub's venv, the student copies copied into ``~/lessons`` at the first start, and a memory
  limit (a cgroup per learner, where the machine lets the hub make one): a kernel that eats the
  memory is killed alone.
- The teacher (an admin, the admin password) has the nbgrader course in ``~/course`` and the
  formgrader; learners have nbgrader's Assignments tab (fetch, submit), not the formgrader.
- The proxy runs outside the hub, and servers outlive it: a hub restarted while learners work
  does not interrupt them. Servers idle for ``LMLESSONS_HUB_IDLE_TIMEOUT`` seconds are stopped.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import sys
from pathlib import Path

from jupyterhub.auth import LocalAuthenticator
from jupyterhub.authenticators.shared import SharedPasswordAuthenticator
from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (JupyterHub defines it)

HUB_DIR = Path(os.environ["LMLESSONS_HUB_DIR"])
VENV_BIN = HUB_DIR / "venv" / "bin"
GROUP = "lmlessons"  # every account the hub made, the teacher's included
TEACHER = os.environ.get("LMLESSONS_HUB_TEACHER", "teacher")
MEM_LIMIT = os.environ.get("LMLESSONS_HUB_MEM_LIMIT", "2G")
IDLE_TIMEOUT_S = int(os.environ.get("LMLESSONS_HUB_IDLE_TIMEOUT", "3600"))
CGROUP_ROOTS = (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup"))  # cgroup v1, then v2


def course_account(name: str) -> bool:
    """Whether ``name`` may log in: an account the hub made, or one it is about to make."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        return True
    try:
        group = grp.getgrnam(GROUP)
    except KeyError:  # no class group yet: no existing account is the hub's
        return False
    return account.pw_gid == group.gr_gid or name in group.gr_mem


class ClassAuthenticator(LocalAuthenticator, SharedPasswordAuthenticator):
    """The class password for learners, the admin password for the teacher; new accounts made."""

    # Checked at every login, whatever the allow settings (allow_all skips check_allowed): an
    # account of the machine that the hub did not make (root, a service) never logs in.
    def check_blocked_users(self, username, authentication=None):  # type: ignore[no-untyped-def]
        return course_account(username) and super().check_blocked_users(username, authentication)


# Hand-written because no maintained spawner sets a learner's limits on a machine without systemd
# or a container runtime: JupyterHub's LocalProcessSpawner reads mem_limit and cpu_limit but does
# not enforce them (its own docstrings in jupyterhub/spawner.py say so); jupyterhub-systemdspawner
# enforces both through systemd-run, which needs systemd as process 1 (not in a container, nor on
# the machines this course was tested on); DockerSpawner and KubeSpawner need Docker or Kubernetes.
# One cgroup file per learner is all a memory limit needs.
def memory_cgroup(name: str, limit: int) -> Path | None:
    """A memory cgroup of ``limit`` bytes for learner ``name`` (cgroup v1 or v2), or None where
    the machine lets the hub make none."""
    for root in CGROUP_ROOTS:
        v2 = (root / "cgroup.controllers").exists()
        if not root.is_dir() or not (v2 or root.name == "memory"):
            continue
        group = root / "lmlessons" / name
        try:
            group.mkdir(parents=True, exist_ok=True)
            (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit))
            return group
        except OSError:
            continue
    return None


class ClassSpawner(LocalProcessSpawner):
    """A learner's server: in their home, under their memory limit, with the course's PATH."""

    def make_preexec_fn(self, name):  # type: ignore[no-untyped-def]
        become_user = super().make_preexec_fn(name)
        group = memory_cgroup(name, self.mem_limit) if self.mem_limit else None  # bytes
        if group is None:
            self.log.warning("No memory cgroup for %s: its memory limit is not enforced", name)

        def preexec() -> None:
            if group is not None:  # as root, before becoming the learner
                (group / "cgroup.procs").write_text(str(os.getpid()))
            become_user()

        return preexec


def copy_course(spawner: ClassSpawner) -> None:
    """At each start: the learner's home is theirs alone, and holds the student copies."""
    user = pwd.getpwnam(spawner.user.name)
    home = Path(user.pw_dir)
    home.chmod(0o700)
    target = home / "lessons"
    if not target.exists():  # never overwrite a learner's work
        shutil.copytree(HUB_DIR / "student", target)
        for path in [target, *target.rglob("*")]:
            os.chown(path, user.pw_uid, user.pw_gid)
    if spawner.user.name != TEACHER:  # learners: nbgrader's Assignments tab, no formgrader
        spawner.environment["JUPYTER_CONFIG_PATH"] = str(HUB_DIR / "learner-config")


c.JupyterHub.ip = os.environ.get("LMLESSONS_HUB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("LMLESSONS_HUB_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("LMLESSONS_HUB_API_PORT", "8081"))
state = HUB_DIR / "state"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
# The proxy is started beside the hub (tools/hub.py), so a hub restart keeps every connection.
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = (
    f"http://127.0.0.1:{os.environ.get('LMLESSONS_HUB_PROXY_API_PORT', '8001')}"
)
c.JupyterHub.cleanup_servers = False  # learners' servers outlive a hub restart

c.JupyterHub.authenticator_class = ClassAuthenticator
c.Authenticator.username_pattern = r"^[a-z][a-z0-9_-]{0,31}$"
c.Authenticator.admin_users = {TEACHER}
c.Authenticator.allow_all = True  # anyone with the class password; a roster in local_config.py
c.LocalAuthenticator.create_system_users = True
c.LocalAuthenticator.add_user_cmd = [
    "useradd",
    "-m",
    "-K",
    "HOME_MODE=0700",
    "-g",
    GROUP,
    "-s",
    "/bin/bash",
]
c.SharedPasswordAuthenticator.user_password = os.environ["LMLESSONS_HUB_PASSWORD"]
c.SharedPasswordAuthenticator.admin_password = os.environ["LMLESSONS_HUB_ADMIN_PASSWORD"]

c.JupyterHub.spawner_class = ClassSpawner
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab/tree/lessons/00_start_here.ipynb"
c.Spawner.notebook_dir = "~"
c.Spawner.mem_limit = MEM_LIMIT
c.Spawner.pre_spawn_hook = copy_course
c.Spawner.environment = {
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",  # nbgrader runs alembic from the PATH
    "OMP_NUM_THREADS": "1",  # many kernels on few cores: one torch thread each
    "HF_HUB_OFFLINE": "1",  # the course downloads nothing
}
c.Spawner.http_timeout = 120  # a ready server in time, even with a class starting at once
c.Spawner.start_timeout = 120

# Stop servers idle for IDLE_TIMEOUT_S, so a class does not hold memory overnight.
c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE_TIMEOUT_S}"],
    },
]
c.JupyterHub.load_roles = [
    {
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    },
]
# tools/hub.py's own admin service (stops the servers when the class ends; the load test).
if os.environ.get("LMLESSONS_HUB_SERVICE_TOKEN"):
    c.JupyterHub.services.append(
        {"name": "lmlessons", "api_token": os.environ["LMLESSONS_HUB_SERVICE_TOKEN"]}
    )
    c.JupyterHub.load_roles.append({"name": "admin", "services": ["lmlessons"]})

local = HUB_DIR / "local_config.py"
if local.exists():
    load_subconfig(str(local))  # type: ignore[name-defined]  # noqa: F821
