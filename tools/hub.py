"""A JupyterHub for one class on this machine: ``make hub`` (docs/teaching.md, "On JupyterHub").

``python -m tools.hub install [--dir D]`` builds the hub's folder (default ``/srv/lmlessons-hub``):

- ``venv/``: a venv from a Python every account can run (Debian's ``/usr/bin/python3``, not one in
  root's home), with the course (``requirements.txt``) and the hub (``requirements-hub.txt``)
  installed once for every learner, and no test, lint or website tools;
- ``student/``: the student copies, copied into each learner's ``~/lessons`` at their first start;
- ``exchange/``: nbgrader's exchange (release, fetch, submit, collect), writable by all, sticky;
- ``jupyterhub_config.py`` (from ``hub/``), ``learner-config/`` (no formgrader for learners), the
  proxy (``configurable-http-proxy`` from npm, in ``node/``), ``state/`` (the hub's database, root's
  only); the teacher's account, with the nbgrader course in ``~teacher/course``.

``python -m tools.hub run [--dir D] [--port P]`` starts the proxy and the hub on 127.0.0.1, prints
the address and the passwords (made at each start unless ``LMLESSONS_HUB_PASSWORD`` and
``LMLESSONS_HUB_ADMIN_PASSWORD`` are set), and on Ctrl-C stops every server, the hub and the
proxy. Needs root: the hub makes an account per learner and starts servers as them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tools import classroom
from tools.browser import free_port
from tools.classroom import COURSE_ID

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = Path("/srv/lmlessons-hub")
GROUP = "lmlessons"
TEACHER = "teacher"
PROXY = "configurable-http-proxy@5.3.0"
SYSTEM_PYTHON = Path("/usr/bin/python3")
# nbgrader's server extensions and JupyterLab plugins that are the teacher's, not a learner's.
TEACHER_ONLY_EXTENSIONS = [
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
]
TEACHER_ONLY_PLUGINS = [
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:create-assignment",
]
READY_TIMEOUT_S = 60.0
# The parts of a venv that its packages find relative to their own install: the packages, then
# the data JupyterHub (its templates and static files, found by walking up from the package),
# JupyterLab and the Jupyter server read.
VENV_PARTS = ("lib", "share/jupyter", "share/jupyterhub", "etc/jupyter")


def run(cmd: Sequence[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, raising with its output if it fails."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done


def make_venv(hub_dir: Path, python: Path) -> Path:
    """``hub_dir/venv`` with the course and the hub installed (from the locks); its ``bin``."""
    venv = hub_dir / "venv"
    if not (venv / "bin" / "python").exists():
        run([python, "-m", "venv", venv])
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "install", "--quiet"]
    locks = [ROOT / "requirements.txt", ROOT / "requirements-hub.txt"]
    stamp = venv / ".lmlessons-locks"  # the locks it was installed from
    digest = hashlib.sha256(b"".join(lock.read_bytes() for lock in locks)).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        run([*pip, "-r", locks[0], "-r", locks[1]])
        stamp.write_text(digest)
    with tempfile.TemporaryDirectory() as tmp:  # a copy of the tracked files: pip builds there
        files = run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
        for name in filter(None, files):
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, Path(tmp) / name)
        run([*pip, "--no-deps", tmp])
    return venv / "bin"


def readable_by_all(path: Path) -> bool:
    """Whether every account can read ``path``: it is world-readable, each folder above it open."""
    path = path.resolve()
    return bool(path.stat().st_mode & 0o004) and all(p.stat().st_mode & 0o001 for p in path.parents)


def shared_temp_dir(prefix: str) -> Path:
    """A new temp folder that every account can enter (0755, each folder above it open to all):
    in the temp directory, or in ``/tmp`` or ``/var/tmp`` where ``TMPDIR`` is a folder of the
    caller's own (a 0700 ``TMPDIR``, systemd's ``PrivateTmp``), which learners could not reach."""
    for parent in (Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp")):
        parent = parent.resolve()
        if parent.is_dir() and all(p.stat().st_mode & 0o001 for p in (parent, *parent.parents)):
            made = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            made.chmod(0o755)
            return made
    raise RuntimeError("no temp folder that every account can enter: set TMPDIR to one")


def link_venv(hub_dir: Path, env: Path, python: Path) -> Path:
    """A venv of ``python`` that imports the packages of the installed venv ``env`` (the tests' own)
    instead of installing them anew, with a copy of the course; its ``bin``.

    Where ``env`` is not readable by every account (a home folder), its packages are copied first
    (hard links where the file system allows). The console scripts the hub runs are copied from
    ``env/bin`` with this venv's interpreter.
    """
    venv = hub_dir / "venv"
    run([python, "-m", "venv", "--without-pip", venv])
    scripts = env / "bin"
    if not readable_by_all(env / "lib"):
        for part in VENV_PARTS:
            (hub_dir / "env" / part).parent.mkdir(parents=True, exist_ok=True)
            if subprocess.run(["cp", "-al", env / part, hub_dir / "env" / part]).returncode:
                run(["cp", "-a", env / part, hub_dir / "env" / part])
        env = hub_dir / "env"
    inner = next((venv / "lib").glob("python3*/site-packages"))
    outer = next((env / "lib").glob("python3*/site-packages"))
    (inner / "lmlessons_link.pth").write_text(f"import site; site.addsitedir({str(outer)!r})\n")
    shutil.copytree(
        ROOT / "lmlessons", inner / "lmlessons", ignore=shutil.ignore_patterns("__pycache__")
    )
    (venv / "share").mkdir(exist_ok=True)
    (venv / "share" / "jupyter").symlink_to(env / "share" / "jupyter")  # JupyterLab, its extensions
    for name in ("jupyter_server_config.d", "jupyter_notebook_config.d", "nbconfig"):
        (venv / "etc" / "jupyter").mkdir(parents=True, exist_ok=True)
        (venv / "etc" / "jupyter" / name).symlink_to(env / "etc" / "jupyter" / name)
    for name in ("jupyterhub", "jupyterhub-singleuser", "nbgrader", "alembic", "jupyter"):
        body = (scripts / name).read_text().split("\n", 1)[1]
        (venv / "bin" / name).write_text(f"#!{venv / 'bin' / 'python'}\n{body}")
        (venv / "bin" / name).chmod(0o755)
    return venv / "bin"


def nbgrader_config(exchange: Path) -> str:
    """nbgrader's settings for every account of the hub (the venv's ``etc/jupyter``)."""
    return (
        "# Written by tools/hub.py for every account of the class hub.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
    )


def write_course_files(hub_dir: Path, venv_bin: Path) -> None:
    """Student copies, exchange, hub config, nbgrader's settings and the learners' extensions."""
    shutil.rmtree(hub_dir / "student", ignore_errors=True)
    shutil.copytree(ROOT / "student", hub_dir / "student")
    (hub_dir / "exchange").mkdir(exist_ok=True)
    (hub_dir / "exchange").chmod(0o1777)  # everyone writes, no one deletes another's files
    (hub_dir / "state").mkdir(mode=0o700, exist_ok=True)
    shutil.copy2(ROOT / "hub" / "jupyterhub_config.py", hub_dir / "jupyterhub_config.py")
    etc = venv_bin.parent / "etc" / "jupyter"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "nbgrader_config.py").write_text(nbgrader_config(hub_dir / "exchange"))
    learner = hub_dir / "learner-config"
    (learner / "labconfig").mkdir(parents=True, exist_ok=True)
    off = {"ServerApp": {"jpserver_extensions": dict.fromkeys(TEACHER_ONLY_EXTENSIONS, False)}}
    (learner / "jupyter_server_config.json").write_text(json.dumps(off, indent=1))
    plugins = {"disabledExtensions": dict.fromkeys(TEACHER_ONLY_PLUGINS, True)}
    (learner / "labconfig" / "page_config.json").write_text(json.dumps(plugins, indent=1))


def add_account(name: str) -> Path:
    """The system account ``name`` in the class group, its home readable by it alone; its home."""
    run(["groupadd", "-f", GROUP])
    if subprocess.run(["id", "-u", name], capture_output=True).returncode:
        run(["useradd", "-m", "-K", "HOME_MODE=0700", "-g", GROUP, "-s", "/bin/bash", name])
    return home(name)


def home(name: str) -> Path:
    """The home folder of account ``name``."""
    return Path(os.path.expanduser(f"~{name}"))


def chown_tree(path: Path, user: str) -> None:
    run(["chown", "-R", f"{user}:{GROUP}", path])


def setup_teacher(teacher: str = TEACHER) -> Path:
    """The teacher's account and nbgrader course (``~/course``, rebuilt from the lessons)."""
    home = add_account(teacher)
    classroom.build(ROOT / "notebooks", home / "course")
    jupyter = home / ".jupyter"
    jupyter.mkdir(exist_ok=True)
    (jupyter / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.CourseDirectory.root = {str(home / 'course')!r}\n"
    )
    chown_tree(home, teacher)
    return home / "course"


def install_proxy(hub_dir: Path) -> Path:
    """configurable-http-proxy from npm, in ``hub_dir/node``; its command."""
    command = hub_dir / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    if not command.exists():
        run(["npm", "install", "--prefix", hub_dir / "node", "--no-save", "--no-package-lock",
             "--no-audit", "--no-fund", PROXY])  # fmt: skip
    return command


def install(
    hub_dir: Path, python: Path = SYSTEM_PYTHON, link: Path | None = None, teacher: str = TEACHER
) -> None:
    """Everything ``run`` needs, in ``hub_dir`` (see the module's docstring). ``link``: an
    installed venv whose packages the hub uses instead of its own (the tests'; ``link_venv``)."""
    hub_dir.mkdir(parents=True, exist_ok=True)
    hub_dir.chmod(0o755)
    venv_bin = make_venv(hub_dir, python) if link is None else link_venv(hub_dir, link, python)
    write_course_files(hub_dir, venv_bin)
    setup_teacher(teacher)
    install_proxy(hub_dir)


def signals_by_default() -> None:
    """In a child before it runs: SIGINT does its default again. A hub started where SIGINT is
    ignored (in the background of a shell, by nohup) would pass that on to its services, and
    JupyterHub then waits about 30 s for the idle culler to ignore it and die of SIGKILL."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Hub:
    """A running proxy and hub (``start``), stopped with ``stop`` (every server first)."""

    hub_dir: Path
    port: int = 8000
    teacher: str = TEACHER
    ip: str = "127.0.0.1"  # where the proxy listens (0.0.0.0: every address of the machine)
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    settings: dict[str, str] = field(default_factory=dict)  # more LMLESSONS_HUB_* settings
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The hub's address from this machine."""
        return f"http://{'127.0.0.1' if self.ip == '0.0.0.0' else self.ip}:{self.port}"

    @property
    def inbound(self) -> Path:
        """nbgrader's inbound folder in the exchange: every submission, one folder each."""
        return self.hub_dir / "exchange" / COURSE_ID / "inbound"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.settings,
            "LMLESSONS_HUB_DIR": str(self.hub_dir),
            "LMLESSONS_HUB_PORT": str(self.port),
            "LMLESSONS_HUB_IP": self.ip,
            "LMLESSONS_HUB_TEACHER": self.teacher,
            "LMLESSONS_HUB_PASSWORD": self.password,
            "LMLESSONS_HUB_ADMIN_PASSWORD": self.admin_password,
            "LMLESSONS_HUB_SERVICE_TOKEN": self.token,
            "CONFIGPROXY_AUTH_TOKEN": self.settings.get("CONFIGPROXY_AUTH_TOKEN", self.token[:32]),
        }

    def start(self) -> Hub:
        ports = {
            k: str(free_port()) for k in ("LMLESSONS_HUB_API_PORT", "LMLESSONS_HUB_PROXY_API_PORT")
        }
        self.settings = {**ports, **self.settings}
        log = self.hub_dir / "state"
        hub_api = f"http://127.0.0.1:{self.settings['LMLESSONS_HUB_API_PORT']}"
        proxy_api = self.settings["LMLESSONS_HUB_PROXY_API_PORT"]
        proxy: list[str | Path] = [
            install_proxy(self.hub_dir), "--ip", self.ip, "--port", str(self.port),
            "--api-ip", "127.0.0.1", "--api-port", proxy_api,
            "--default-target", hub_api, "--error-target", f"{hub_api}/hub/error",
        ]  # fmt: skip
        with open(log / "proxy.log", "ab") as out:
            self.procs["proxy"] = subprocess.Popen(
                [str(x) for x in proxy], env=self.env(), stdout=out, stderr=out,
                preexec_fn=signals_by_default, start_new_session=True,
            )  # fmt: skip
        return self.start_hub()

    def start_hub(self) -> Hub:
        """(Re)start the hub alone: the proxy and the learners' servers keep running."""
        hub: list[str | Path] = [
            self.hub_dir / "venv" / "bin" / "jupyterhub",
            "-f",
            self.hub_dir / "jupyterhub_config.py",
        ]
        with open(self.hub_dir / "state" / "hub.log", "ab") as out:
            self.procs["hub"] = subprocess.Popen(
                [str(x) for x in hub],
                cwd=self.hub_dir / "state",
                env=self.env(),
                stdout=out,
                preexec_fn=signals_by_default,
                start_new_session=True,
                stderr=out,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.procs["hub"].poll() is not None:
                raise RuntimeError(
                    f"the hub stopped at start: see {self.hub_dir / 'state' / 'hub.log'}"
                )
            try:
                if self.api("GET", "/users").ok:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"the hub did not answer in {READY_TIMEOUT_S:.0f} s")

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A call to the hub's REST API as the admin service."""
        headers = {"Authorization": f"token {self.token}"}
        return requests.request(
            method, f"{self.url}/hub/api{path}", headers=headers, timeout=60, **kwargs
        )

    def stop_servers(self) -> None:
        for user in self.api("GET", "/users").json():
            if user.get("server"):
                self.api("DELETE", f"/users/{user['name']}/server")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and any(
            u.get("server") for u in self.api("GET", "/users").json()
        ):
            time.sleep(0.25)

    def stop_process(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        """Every learner's server, then the hub, then the proxy. The hub and the proxy run in
        sessions of their own (``start``), so a signal to the command's process group (Ctrl-C in
        a terminal, ``timeout``) reaches the command alone, which stops them in this order; a hub
        that is already going (killed on its own) is stopped without asking it anything."""
        try:
            if "hub" in self.procs and self.procs["hub"].poll() is None:
                self.stop_servers()
        except requests.RequestException:
            pass  # the hub went away while asked: there is nothing left to ask it
        finally:
            self.stop_process("hub")
            self.stop_process("proxy")


def teacher_name() -> str:
    """The teacher's account: ``LMLESSONS_HUB_TEACHER``, or ``teacher``."""
    return os.environ.get("LMLESSONS_HUB_TEACHER", TEACHER)


def serve(hub_dir: Path, port: int) -> int:
    """``make hub``: start, print how to log in, wait for Ctrl-C or SIGTERM (``systemctl stop``,
    ``timeout``), stop everything quietly. The ``LMLESSONS_HUB_*`` settings of the environment
    (docs/teaching.md) reach the hub."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even if started ignored
    signal.signal(signal.SIGTERM, stop_quietly)
    hub = Hub(
        hub_dir, port, teacher=teacher_name(), ip=os.environ.get("LMLESSONS_HUB_IP", "127.0.0.1")
    )
    hub.password = os.environ.get("LMLESSONS_HUB_PASSWORD", hub.password)
    hub.admin_password = os.environ.get("LMLESSONS_HUB_ADMIN_PASSWORD", hub.admin_password)
    try:
        hub.start()
        print(f"The class hub is at {hub.url}/  (log files in {hub_dir / 'state'})")
        print(f"  learners: any name (letters, digits, - and _), password {hub.password}")
        print(f"  teacher:  {hub.teacher}, password {hub.admin_password}")
        print("  (the teacher's formgrader: Nbgrader > Formgrader in JupyterLab)")
        print("Ctrl-C stops every server, the hub and the proxy.", flush=True)
        while all(p.poll() is None for p in hub.procs.values()):
            time.sleep(1)
        print("the hub or the proxy stopped: see the logs", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM while stopping
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        hub.stop()


def stop_quietly(signum: int, frame: object) -> None:
    """SIGTERM (``systemctl stop``, ``timeout``) stops the hub as Ctrl-C does."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.hub", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["install", "run"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the hub's folder")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--python", type=Path, default=SYSTEM_PYTHON, help="a Python every account can run"
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run as root: the hub makes an account per learner and starts servers as them")
    if args.command == "install":
        install(args.dir.resolve(), args.python, teacher=teacher_name())
        return 0
    return serve(args.dir.resolve(), args.port)


if __name__ == "__main__":
    sys.exit(main())
