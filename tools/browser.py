"""Drive the course the way a learner sees it: JupyterLab 4 in Chromium.

Shared by ``tests/test_browser.py`` (the end-to-end browser test) and ``tools.screenshots``
(``make screenshots``). Three parts:

- :class:`JupyterLab` starts ``jupyter lab`` on a free 127.0.0.1 port with its own temporary
  config, data, runtime, IPython and workspace dirs and a *temporary copy* of the notebooks folder
  as its root, so running the lessons never writes into the repo. The "Jupyter news" prompt is
  switched off in that config dir (``labconfig/page_config.json``). It is stopped by its own PID.
- :func:`launch_chromium` starts Debian's Chromium through the ``playwright`` package
  (``executable_path``; ``playwright install`` is never needed).
- :func:`lab_page` starts JupyterLab's front end in one page; :func:`open_document`,
  :func:`run_all_cells`, :func:`wait_for_marker` and :func:`close_document` drive one lesson
  after another in it (:func:`check_lesson`: the whole check of one lesson). Lesson widgets put
  their state ``key=value ...`` into their output as a hidden element ``<div
  class="lmlessons-state" data-state="key=value ..." hidden>`` (nothing a learner sees); the test
  waits for the exact state the new widget value implies.

The per-lesson table (which widget to move and what it must print) is
``tools/browser_lessons.py``.

ipywidgets 7's front end (Google Colab's runtime): :class:`ClassicNotebook` starts classic
Notebook 6.5 the same way, with widgetsnbextension 3.6 from a ``pip install --target`` folder, and
:func:`check_lesson_classic` runs one lesson in its page (``tests/test_browser_classic.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import nbformat

from tools.widget_slice import widget_slice

if TYPE_CHECKING:  # playwright is a test/dev dependency, imported lazily
    from playwright.sync_api import (
        Browser,
        BrowserContext,
        ConsoleMessage,
        Locator,
        Page,
        Playwright,
    )

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"

#: The JupyterLab plugin that asks "Would you like to receive official Jupyter news?".
ANNOUNCEMENTS_PLUGIN = "@jupyterlab/apputils-extension:announcements"

#: Chromium flags: no sandbox (root in containers), no GPU, and nothing that phones home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

#: Where to look for a Chromium binary, in order (``LMLESSONS_CHROMIUM`` overrides).
CHROMIUM_CANDIDATES = ["/usr/bin/chromium", "chromium", "chromium-browser"]

#: The class of the hidden element whose ``data-state`` holds a widget's state (the marker).
STATE_CLASS = "lmlessons-state"


def find_chromium() -> str | None:
    """Return the path of a Chromium executable, or None when there is none."""
    override = os.environ.get("LMLESSONS_CHROMIUM")
    candidates = [override] if override else CHROMIUM_CANDIDATES
    for name in candidates:
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def git_status(repo: Path = REPO_ROOT) -> str | None:
    """``git status --porcelain`` of ``repo`` (read-only: no index refresh), or None without git."""
    if shutil.which("git") is None or not (repo / ".git").exists():
        return None
    result = subprocess.run(
        ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------
class JupyterLab:
    """A throw-away JupyterLab server over a temporary copy of ``notebooks_dir``.

    With ``slices=True`` each lesson in the copy is cut to its widget slice: the widget cells and
    the cells they need (strict nbval runs the whole lessons; the browser proves the widgets).

    Use as a context manager. ``base_url``, ``token`` and ``root_dir`` (the copy) are set once it
    runs. Everything the server, the kernels and IPython write goes under one temp dir that is
    removed on exit.
    """

    #: The server's name in error messages.
    name: ClassVar[str] = "jupyter lab"

    def __init__(
        self,
        notebooks_dir: Path = NOTEBOOKS_DIR,
        *,
        python: str = sys.executable,
        startup_timeout: float = 90.0,
        slices: bool = False,
    ) -> None:
        self.notebooks_dir = Path(notebooks_dir)
        self.slices = slices
        if not self.notebooks_dir.is_dir():
            raise ValueError(f"notebooks_dir must be an existing directory, got {notebooks_dir!r}")
        self.python = python
        self.startup_timeout = startup_timeout
        self.token = secrets.token_hex(16)
        self.port = 0
        self.tmp: Path | None = None
        self.root_dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "jupyterlab.log"

    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="lmlessons-lab-"))
        dirs = {
            name: self.tmp / name for name in ("config", "data", "runtime", "ipython", "workspaces")
        }
        for d in dirs.values():
            d.mkdir()
        # The server's root: a copy of the notebooks, so nothing the browser does reaches the repo.
        self.root_dir = self.tmp / "notebooks"
        shutil.copytree(
            self.notebooks_dir,
            self.root_dir,
            ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
        )
        if self.slices:  # each lesson as the cells its widgets need (tools/widget_slice.py)
            for path in lesson_files(self.root_dir):
                nbformat.write(widget_slice(nbformat.read(path, as_version=4)), path)
        # "Jupyter news" prompt off by configuration: user-level page config in our own config dir
        # (what `jupyter labextension disable <plugin>` writes at --level=user).
        labconfig = dirs["config"] / "labconfig"
        labconfig.mkdir()
        (labconfig / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {ANNOUNCEMENTS_PLUGIN: True}}, indent=2)
        )

        env = self._environment(dirs)
        for _ in range(3):  # the free port can be taken between probe and bind: retry
            self.port = free_port()
            if self._launch(env, dirs["workspaces"]):
                return
        raise RuntimeError(f"{self.name} could not bind a free port:\n{self.log_tail()}")

    def _environment(self, dirs: dict[str, Path]) -> dict[str, str]:
        """The server's environment: its own config, data, runtime and IPython dirs."""
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            # Our own data dir replaces ~/.local/share/jupyter; the venv's share/jupyter
            # (kernelspec, the ipywidgets labextension) stays on the path through sys.prefix.
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            IPYTHONDIR=str(dirs["ipython"]),
            PYTHONDONTWRITEBYTECODE="1",  # the kernels import lmlessons from the repo
            # Kernels import this checkout's lmlessons, whatever else is installed.
            PYTHONPATH=os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
        )
        env.pop("JUPYTER_PATH", None)
        env.pop("JUPYTER_CONFIG_PATH", None)
        return env

    def _command(self, workspaces: Path) -> list[str]:
        """The command line that starts the server on ``self.port``."""
        return [
            self.python,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            f"--LabApp.workspaces_dir={workspaces}",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp
            "--LabApp.news_url=None",  # belt and braces: no news fetched even if the plugin were on
            "--ServerApp.open_browser=False",
        ]

    def _launch(self, env: dict[str, str], workspaces: Path) -> bool:
        """Start the server on ``self.port``; True once it answers, False if the port was taken."""
        cmd = self._command(workspaces)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        with open(self.log_path, "ab") as log:  # the server keeps its own copy of the handle
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                if "already in use" in self.log_tail():
                    return False
                raise RuntimeError(
                    f"{self.name} exited with code {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                self.api("GET", "/api/status")
                return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name} did not answer on {self.base_url} within "
                    f"{self.startup_timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def stop(self) -> None:
        """Stop the server by its own PID: SIGTERM, wait, then SIGKILL; remove the temp dir."""
        if self.proc is not None and self.proc.poll() is None:
            try:  # let the server shut its kernels down cleanly first
                for session in self.api("GET", "/api/sessions"):
                    self.api("DELETE", f"/api/sessions/{session['id']}")
            except Exception:
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    # -- REST API ----------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = resp.read()
        return json.loads(payload) if payload else None

    def running_kernels(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/api/kernels"))

    def shutdown_sessions(self, notebook: str | None = None) -> int:
        """Shut down the kernel sessions of ``notebook`` (all when None); return how many."""
        count = 0
        for session in self.api("GET", "/api/sessions"):
            if notebook is None or session.get("path") == notebook:
                self.api("DELETE", f"/api/sessions/{session['id']}")
                count += 1
        return count


class ClassicNotebook(JupyterLab):
    """A throw-away classic Notebook 6.5 server (the page whose widget front end is ipywidgets 7's
    widgetsnbextension, as on Google Colab) over a temporary copy of ``notebooks_dir``.

    ``site`` is a ``pip install --target`` folder with notebook 6.5, widgetsnbextension 3.6,
    ipywidgets 7 and the kernel they need: it goes first on the server's and the kernels'
    ``PYTHONPATH`` (over ``python``'s own packages), and its ``share/jupyter`` (the nbextension)
    and ``etc/jupyter`` (the config that switches it on) first on ``JUPYTER_PATH`` and
    ``JUPYTER_CONFIG_PATH``. Temp dirs, copy, ``slices`` and clean-up as :class:`JupyterLab`.
    """

    name: ClassVar[str] = "jupyter notebook (classic)"

    def __init__(self, notebooks_dir: Path = NOTEBOOKS_DIR, *, site: Path, **kwargs: Any) -> None:
        super().__init__(notebooks_dir, **kwargs)
        self.site = Path(site).resolve()  # the server runs in its temp dir
        if not (self.site / "notebook" / "notebookapp.py").is_file():
            raise ValueError(f"site must hold classic notebook (notebook/notebookapp.py): {site!r}")

    def _environment(self, dirs: dict[str, Path]) -> dict[str, str]:
        env = super()._environment(dirs)
        env.update(
            PYTHONPATH=os.pathsep.join([str(self.site), env["PYTHONPATH"]]),
            JUPYTER_PATH=str(self.site / "share" / "jupyter"),
            JUPYTER_CONFIG_PATH=str(self.site / "etc" / "jupyter"),
        )
        return env

    def _command(self, workspaces: Path) -> list[str]:
        return [
            self.python,
            "-m",
            "notebook",
            "--no-browser",
            "--NotebookApp.ip=127.0.0.1",
            f"--NotebookApp.port={self.port}",
            "--NotebookApp.port_retries=0",
            f"--NotebookApp.token={self.token}",
            f"--NotebookApp.notebook_dir={self.root_dir}",
            "--NotebookApp.open_browser=False",
            # The venv's JupyterLab 4 enables itself as a server extension of classic Notebook
            # (etc/jupyter/jupyter_notebook_config.d/jupyterlab.json) and would take the page over.
            '--NotebookApp.nbserver_extensions={"jupyterlab": False}',
        ]

    def notebook_url(self, notebook: str) -> str:
        """URL of classic Notebook's page for ``notebook`` (relative to the server root)."""
        return f"{self.base_url}/notebooks/{notebook}?token={self.token}"


# --------------------------------------------------------------------------------------------
# The browser
# --------------------------------------------------------------------------------------------
def launch_chromium(pw: Playwright, executable: str | None = None) -> Browser:
    executable = executable or find_chromium()
    if executable is None:
        raise RuntimeError("no Chromium found (looked for " + ", ".join(CHROMIUM_CANDIDATES) + ")")
    return pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)


VIEWPORT = {"width": 1280, "height": 900}


def new_context(browser: Browser) -> BrowserContext:
    """One context for all lessons: pages share the HTTP cache (JupyterLab's bundles load once)."""
    return browser.new_context(viewport=VIEWPORT, device_scale_factor=1)  # type: ignore[arg-type]


#: Console errors that are harmless, each with the reason. Matched with re.search on the text.
HARMLESS_CONSOLE_ERRORS: list[tuple[str, str]] = []


@dataclass
class ConsoleLog:
    """Collects a page's console errors and uncaught exceptions."""

    errors: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> ConsoleLog:
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        return self

    def _on_console(self, msg: ConsoleMessage) -> None:
        if msg.type != "error":
            return
        loc = msg.location or {}
        text = f"{msg.text} ({loc.get('url', '?')}:{loc.get('lineNumber', '?')})"
        if any(re.search(pattern, text) for pattern, _why in HARMLESS_CONSOLE_ERRORS):
            self.ignored.append(text)
        else:
            self.errors.append(text)


# --------------------------------------------------------------------------------------------
# One lesson in one page
# --------------------------------------------------------------------------------------------
# JupyterLab's front end started: the app and its main area are there.
_JS_APP_READY = (
    "() => window.jupyterapp && window.jupyterapp.shell"
    " && document.querySelector('#jp-main-dock-panel')"
)

_JS_NOTEBOOK_READY = """(name) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return false;
  const w = app.shell.currentWidget;
  if (!w || !w.context || w.context.path !== name || !w.context.isReady) return false;
  const kernel = w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
}"""

# Cells tagged "raises-exception" (nbval's and JupyterLab's tag for an intended error) may show one.
_JS_RUN_STATUS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = [];
  const errors = [];
  const models = w.content.model.cells;
  for (let i = 0; i < models.length; i++) {
    const m = models.get(i);
    if (m.type !== 'code') continue;
    const src = m.sharedModel.getSource();
    if (!src.trim()) continue;
    cells.push(m.executionCount);
    const tags = m.getMetadata('tags') || [];
    if (tags.includes('raises-exception')) continue;
    for (const out of m.outputs.toJSON()) {
      const text = Array.isArray(out.text) ? out.text.join('') : (out.text || '');
      const stderr = out.output_type === 'stream' && out.name === 'stderr';
      if (out.output_type === 'error') {
        const trace = (out.traceback || []).join('\\n');
        errors.push(`cell ${i}: ${out.ename}: ${out.evalue}\\n` + trace);
      } else if (stderr && text.includes('Traceback')) {
        errors.push(`cell ${i} (stderr): ${text}`);
      }
    }
  }
  return {
    kernel: kernel ? kernel.status : 'none',
    done: cells.filter(c => c !== null && c !== undefined).length,
    total: cells.length,
    counts: cells,
    errors: errors,
  };
}"""

# What the learner sees: tracebacks (error outputs render as stderr) and widgets that failed to
# render, in every cell, including the outputs of Output widgets written by callbacks.
_JS_DOM_ERRORS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const found = [];
  w.content.widgets.forEach((cell, i) => {
    const tags = cell.model.getMetadata('tags') || [];
    if (tags.includes('raises-exception')) return;
    for (const el of cell.node.querySelectorAll('.jp-OutputArea-output')) {
      const text = el.textContent || '';
      const mime = el.getAttribute('data-mime-type') || '';
      if (mime === 'application/vnd.jupyter.stderr' && text.includes('Traceback')) {
        found.push(`cell ${i}: ${text.slice(0, 2000)}`);
      } else if (text.includes('Error displaying widget')) {
        found.push(`cell ${i}: ${text.slice(0, 2000)}`);
      }
    }
  });
  return found;
}"""

#: Where the outputs are: JupyterLab's output areas (classic Notebook's: :data:`CLASSIC_OUTPUTS`).
LAB_OUTPUTS = ".jp-Notebook .jp-OutputArea-output"

_JS_MARKERS = """(cls, outputs) => {
  const states = [];
  for (const el of document.querySelectorAll(`${outputs} .${cls}`)) {
    const state = el.getAttribute('data-state');
    if (state !== null) states.push(state.trim());
  }
  return states;
}"""


@dataclass
class RunReport:
    seconds: float
    cells: int
    kernel: str


@dataclass
class LabPage:
    """One JupyterLab page that opens lesson after lesson (:func:`lab_page`), with its console
    log: booting JupyterLab's front end costs a few seconds of Chromium each time, so the
    lessons share it, each opened as a document and closed before the next."""

    page: Page
    console: ConsoleLog


def lab_page(context: BrowserContext, lab: JupyterLab, *, timeout: float = 90.0) -> LabPage:
    """A new page with JupyterLab started in an empty workspace of its own."""
    page = context.new_page()
    console = ConsoleLog().attach(page)
    page.goto(
        f"{lab.base_url}/lab/workspaces/lessons?reset&token={lab.token}",
        wait_until="domcontentloaded",
        timeout=timeout * 1000,
    )
    page.wait_for_function(_JS_APP_READY, timeout=timeout * 1000, polling=250)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # more room for wide outputs
    return LabPage(page, console)


def open_document(page: Page, notebook: str, *, timeout: float = 90.0) -> None:
    """Open ``notebook`` in the running JupyterLab and wait until its kernel is idle."""
    page.evaluate(
        "(p) => { window.jupyterapp.commands.execute('docmanager:open', {path: p}); }", notebook
    )
    wait_for_notebook(page, notebook, timeout=timeout)


def close_document(page: Page, *, timeout: float = 30.0) -> None:
    """Close the current notebook as its tab's close does, without saving (the lesson's run is
    not kept), and wait until it has left the page and its last callbacks have run: the next
    lesson's markers and console errors are its own."""
    page.evaluate(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " if (w && w.context) { w.context.model.dirty = false; w.close(); } }"
    )
    page.wait_for_function(
        "() => !document.querySelector('.jp-Notebook')", timeout=timeout * 1000, polling=100
    )
    page.wait_for_timeout(300)


def wait_for_notebook(page: Page, notebook: str, *, timeout: float = 90.0) -> None:
    """Wait until JupyterLab shows ``notebook`` (its path from the server root) with an idle
    kernel; AssertionError after ``timeout`` seconds."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            _JS_NOTEBOOK_READY, arg=notebook, timeout=timeout * 1000, polling=250
        )
    except PlaywrightTimeout as exc:
        raise AssertionError(
            f"{notebook} did not open with an idle kernel within {timeout} s"
        ) from exc


def run_all_cells(page: Page, *, timeout: float = 120.0) -> RunReport:
    """Clear all outputs, run all cells, and wait until every non-empty code cell has an
    execution count and the kernel is idle. Raises AssertionError on the first error output."""
    start = time.monotonic()
    # Clearing first resets the stored execution counts, so "all counted" means "all ran now".
    # Neither command is awaited: in JupyterLab 4 the promise of run-all may never resolve.
    page.evaluate(
        "() => { window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs'); }"
    )
    page.wait_for_function(
        "() => { const s = (" + _JS_RUN_STATUS + ")(); return s.done === 0; }", timeout=10_000
    )
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    return _wait_for_run(page, _JS_RUN_STATUS, start, timeout)


def _wait_for_run(page: Page, status_js: str, start: float, timeout: float) -> RunReport:
    """Poll ``status_js`` (a run status: kernel, done, total, counts, errors) until every code
    cell ran and the kernel is idle; AssertionError on an error output or after ``timeout``."""
    status: dict[str, Any] = {}
    while True:
        status = page.evaluate(status_js)
        if status["errors"]:
            raise AssertionError(
                "error output while running the notebook:\n" + "\n".join(status["errors"])
            )
        if status["total"] and status["done"] == status["total"] and status["kernel"] == "idle":
            break
        if time.monotonic() - start > timeout:
            raise AssertionError(
                f"run-all did not finish within {timeout} s: {status['done']}/{status['total']} "
                f"cells ran, kernel {status['kernel']}"
            )
        page.wait_for_timeout(250)
    counts = status["counts"]
    if counts != list(range(1, len(counts) + 1)):
        raise AssertionError(
            f"cells did not run once each, top to bottom, in a fresh kernel: {counts}"
        )
    return RunReport(seconds=time.monotonic() - start, cells=len(counts), kernel=status["kernel"])


def error_outputs(page: Page) -> list[str]:
    """Tracebacks (stderr) and broken widgets visible in the notebook's outputs."""
    return list(page.evaluate(_JS_DOM_ERRORS))


def markers(page: Page, *, outputs: str = LAB_OUTPUTS) -> list[str]:
    """Every widget state (``data-state`` of a hidden ``.lmlessons-state``) in the outputs
    (``outputs``: the CSS selector of the output areas)."""
    return list(page.evaluate("(a) => (" + _JS_MARKERS + ")(a[0], a[1])", [STATE_CLASS, outputs]))


def wait_for_marker(
    page: Page, expected: str, *, timeout: float = 30.0, outputs: str = LAB_OUTPUTS
) -> None:
    """Wait until a widget's state is exactly ``expected`` (``key=value ...``)."""
    if not expected.strip() or expected.startswith("[widget]"):
        raise ValueError(f"expected must be a state 'key=value ...', got {expected!r}")
    js = "(args) => (" + _JS_MARKERS + ")(args[0], args[2]).includes(args[1])"
    try:
        page.wait_for_function(
            js, arg=[STATE_CLASS, expected.strip(), outputs], timeout=timeout * 1000, polling=100
        )
    except Exception as exc:
        shown = markers(page, outputs=outputs)
        raise AssertionError(
            f"marker {expected!r} did not appear within {timeout} s; markers shown: {shown}"
        ) from exc


# -- widget specs (the lesson table uses these) -----------------------------------------------
def _label_regex(label: str) -> re.Pattern[str]:
    return re.compile(r"^\s*" + re.escape(label) + r"\s*$")


@dataclass(frozen=True)
class _Labelled:
    """A widget found by its description ``label``; ``css`` is its ipywidgets class."""

    label: str
    css: ClassVar[str] = ""

    def locate(self, page: Page, root: str = ".jp-Notebook") -> Locator:
        """The widget in the notebook ``root`` (a CSS selector: JupyterLab's notebook)."""
        return page.locator(f"{root} {self.css}").filter(
            has=page.locator(".widget-label", has_text=_label_regex(self.label))
        )

    @staticmethod
    def _part(widget: Locator, css: str) -> Locator:
        """The first ``css`` element inside ``widget``, scrolled into view."""
        part = widget.locator(css).first
        part.scroll_into_view_if_needed()
        return part


@dataclass(frozen=True)
class Slider(_Labelled):
    """An ipywidgets slider (noUiSlider) found by its description ``label``; moved by focusing
    its handle and pressing ``key`` ``presses`` times (one step each)."""

    presses: int = 1
    key: str = "ArrowRight"
    css: ClassVar[str] = ".widget-slider"

    def move(self, widget: Locator) -> None:
        # noUiSlider in ipywidgets 8; jQuery UI's slider in 7 (classic Notebook's page)
        handle = self._part(widget, ".noUi-handle, .ui-slider-handle")
        handle.focus()
        for _ in range(self.presses):
            handle.press(self.key)

    def describe(self) -> str:
        return f"slider {self.label!r}: {self.key} x{self.presses}"


@dataclass(frozen=True)
class TextInput(_Labelled):
    """An ipywidgets Text found by its description ``label``; filled with ``text`` + Enter."""

    text: str
    css: ClassVar[str] = ".widget-text"

    def move(self, widget: Locator) -> None:
        box = self._part(widget, "input")
        box.fill(self.text)
        box.press("Enter")

    def describe(self) -> str:
        return f"text {self.label!r}: type {self.text!r} + Enter"


@dataclass(frozen=True)
class Dropdown(_Labelled):
    """An ipywidgets Dropdown found by its description ``label``; set to the option ``option``."""

    option: str
    css: ClassVar[str] = ".widget-dropdown"

    def move(self, widget: Locator) -> None:
        self._part(widget, "select").select_option(label=self.option)

    def describe(self) -> str:
        return f"dropdown {self.label!r}: choose {self.option!r}"


@dataclass(frozen=True)
class Toggle(_Labelled):
    """An ipywidgets ToggleButtons found by its description ``label``; the button whose text is
    ``option`` is clicked."""

    option: str
    css: ClassVar[str] = ".widget-toggle-buttons"

    def move(self, widget: Locator) -> None:
        widget.get_by_role("button", name=self.option, exact=True).first.click()

    def describe(self) -> str:
        return f"toggle buttons {self.label!r}: click {self.option!r}"


WidgetSpec = Slider | TextInput | Dropdown | Toggle


def find_widget(
    page: Page, spec: WidgetSpec, *, timeout: float = 30.0, root: str = ".jp-Notebook"
) -> Locator:
    """The one rendered widget matching ``spec`` in the notebook ``root`` (a CSS selector);
    fails with the labels present otherwise."""
    widget = spec.locate(page, root)
    try:
        widget.first.wait_for(state="attached", timeout=timeout * 1000)
    except Exception as exc:
        labels = page.locator(f"{root} .jupyter-widgets .widget-label").all_text_contents()
        views = page.locator(f"{root} .jupyter-widgets").count()
        raise AssertionError(
            f"no {spec.describe()} rendered; widget labels present: {labels}; widget views: "
            f"{views}; what the outputs show: {_outputs_text(page, root)}"
        ) from exc
    count = widget.count()
    if count != 1:
        raise AssertionError(f"{count} widgets match {spec.describe()}; make the label unique")
    return widget


def _outputs_text(page: Page, root: str, most: int = 8) -> list[str]:
    """The first ``most`` output areas under ``root`` (JupyterLab's or classic Notebook's), each
    as its first 80 characters of text: what a failed widget search saw instead."""
    areas = page.locator(f"{root} .jp-OutputArea-output, {root} .output_area")
    texts = areas.all_text_contents()[:most]
    return [" ".join(text.split())[:80] for text in texts]


def widget_cell_output(widget: Locator) -> Locator:
    """The output area of the cell showing ``widget`` (widget + its Output), for screenshots."""
    return widget.locator("xpath=ancestor::div[contains(@class,'jp-Cell-outputArea')][1]")


def lesson_files(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The lesson notebooks ``NN_*.ipynb``, sorted."""
    return sorted(p for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb") if p.is_file())


# --------------------------------------------------------------------------------------------
# Dark theme: the widget's text must stay readable (WCAG AA contrast)
# --------------------------------------------------------------------------------------------
DARK_THEME, LIGHT_THEME = "JupyterLab Dark", "JupyterLab Light"

#: Text elements under ``root`` whose contrast with their background is under WCAG AA (4.5:1,
#: 3:1 for large text). The background is the first opaque one up the tree. JupyterLab's own
#: prompts are its theme's business, not the course's.
_JS_LOW_CONTRAST = """(root) => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = (el) => {
    for (let n = el; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const bad = [];
  for (const el of root.querySelectorAll('*')) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const style = getComputedStyle(el);
    if (!own || !el.getClientRects().length || style.visibility === 'hidden') continue;
    if (el.closest('.jp-OutputPrompt, .jp-InputPrompt')) continue;  // JupyterLab's own "[2]:"
    const [a, b] = [lum(rgb(style.color)), lum(background(el))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const large = parseFloat(style.fontSize) >= 24 ||
      (parseFloat(style.fontSize) >= 18.66 && Number(style.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5))
      bad.push(`${ratio.toFixed(2)}: ${el.textContent.trim().slice(0, 40)} (${style.color})`);
  }
  return bad;
}"""


def set_theme(page: Page, theme: str, *, timeout: float = 15.0) -> None:
    """Switch JupyterLab to ``theme`` and wait until the page shows it."""
    page.evaluate(
        "(t) => { window.jupyterapp.commands.execute('apputils:change-theme', {theme: t}); }",
        theme,
    )
    page.wait_for_function(
        "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=timeout * 1000
    )


def low_contrast_text(area: Locator) -> list[str]:
    """The text in ``area`` (a cell's output) that is too faint on its background."""
    return area.evaluate(_JS_LOW_CONTRAST)


def _check_dark(page: Page, widget: Locator, notebook: str, screenshot: Path | None) -> None:
    """The widget's output in JupyterLab Dark: every text readable; back to light afterwards."""
    set_theme(page, DARK_THEME)
    try:
        area = widget_cell_output(widget)
        area.scroll_into_view_if_needed()
        faint = low_contrast_text(area)
        if screenshot is not None:
            _screenshot(page, widget, screenshot)
    finally:
        set_theme(page, LIGHT_THEME)
    assert not faint, f"{notebook}: text too faint in {DARK_THEME}:\n" + "\n".join(faint)


# --------------------------------------------------------------------------------------------
# The whole check for one lesson (used by the test and by `make screenshots`)
# --------------------------------------------------------------------------------------------
@dataclass
class LessonResult:
    notebook: str
    open_s: float
    run_s: float
    move_s: float
    total_s: float
    cells: int
    markers_before: list[str]
    markers_after: list[str]
    ignored_console: list[str]


def _assert_no_errors(page: Page, notebook: str, when: str) -> None:
    errors = error_outputs(page)
    assert not errors, f"{notebook}: error output {when}:\n" + "\n---\n".join(errors)


_JS_LAB_IDLE = (
    "() => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;"
    " return k && k.status === 'idle'; }"
)


def _move_and_wait(
    page: Page,
    notebook: str,
    spec: WidgetSpec,
    widget: Locator,
    expected: str,
    timeout: float,
    *,
    outputs: str = LAB_OUTPUTS,
    kernel_idle: str = _JS_LAB_IDLE,
) -> list[str]:
    """Move ``widget``, wait for the ``expected`` marker line in ``outputs`` and for the kernel
    to go idle (``kernel_idle``: JS that says so); return the markers shown before the move
    (``expected`` must not be one of them)."""
    before = markers(page, outputs=outputs)
    assert expected.strip() not in before, (
        f"{notebook}: the marker {expected!r} is shown before the widget moved, so the test "
        f"could not tell whether the widget works; pick a move that changes it. Shown: {before}"
    )
    spec.move(widget)
    wait_for_marker(page, expected, timeout=timeout, outputs=outputs)
    # Let the callback finish (plots after the marker) before the last checks.
    page.wait_for_function(kernel_idle, timeout=timeout * 1000, polling=100)
    page.wait_for_timeout(300)
    return before


def _screenshot(page: Page, widget: Locator, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    widget_cell_output(widget).screenshot(path=str(path), animations="disabled")


def check_lesson(
    context: BrowserContext,
    lab: JupyterLab,
    notebook: str,
    spec: WidgetSpec,
    expected: str,
    *,
    run_timeout: float = 120.0,
    marker_timeout: float = 60.0,
    widget_timeout: float = 30.0,
    screenshot: Path | None = None,
    dark_screenshot: Path | None = None,
    shared: LabPage | None = None,
) -> LessonResult:
    """Open ``notebook``, run all cells, assert no error output and no console errors, move the
    main widget and wait for the ``expected`` marker line, then check in JupyterLab Dark that
    every text of the widget's output is readable (``dark_screenshot``: where to save that view).
    In ``shared`` (:func:`lab_page`) when given, else in a page of its own. Closes the notebook
    and shuts its kernel down afterwards. Raises AssertionError when a check fails."""
    t0 = time.monotonic()
    here = shared or lab_page(context, lab)
    page = here.page
    errors_before, ignored_before = len(here.console.errors), len(here.console.ignored)
    try:
        open_document(page, notebook)
        t_open = time.monotonic()
        run = run_all_cells(page, timeout=run_timeout)
        t_run = time.monotonic()
        _assert_no_errors(page, notebook, "after run-all")
        widget = find_widget(page, spec, timeout=widget_timeout)
        before = _move_and_wait(page, notebook, spec, widget, expected, marker_timeout)
        t_move = time.monotonic()
        after = markers(page)
        _assert_no_errors(page, notebook, "after moving the widget")
        console = here.console.errors[errors_before:]
        assert not console, f"{notebook}: browser console errors:\n" + "\n".join(console)
        if screenshot is not None:
            _screenshot(page, widget, screenshot)
        _check_dark(page, widget, notebook, dark_screenshot)
        return LessonResult(
            notebook=notebook,
            open_s=t_open - t0,
            run_s=t_run - t_open,
            move_s=t_move - t_run,
            total_s=time.monotonic() - t0,
            cells=run.cells,
            markers_before=before,
            markers_after=after,
            ignored_console=here.console.ignored[ignored_before:],
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- JupyterLab server log, last lines ---\n{lab.log_tail(15)}"
        ) from None
    finally:
        close_document(page)
        if shared is None:
            page.close()
        lab.shutdown_sessions(notebook)


def lab_plugin_state(
    context: BrowserContext, lab: JupyterLab, plugin_ids: list[str], *, timeout: float = 90.0
) -> dict[str, Any]:
    """Open an empty JupyterLab page; report which of ``plugin_ids`` are registered, the toasts
    shown after start-up, and the console errors."""
    page = context.new_page()
    console = ConsoleLog().attach(page)
    try:
        page.goto(
            f"{lab.base_url}/lab/workspaces/config-check?reset&token={lab.token}",
            wait_until="domcontentloaded",
            timeout=timeout * 1000,
        )
        page.wait_for_function(_JS_APP_READY, timeout=timeout * 1000, polling=250)
        page.evaluate("() => window.jupyterapp.started")
        page.wait_for_timeout(3000)  # the news prompt, when enabled, appears shortly after start
        plugins = page.evaluate(
            "(ids) => Object.fromEntries(ids.map(id => [id, window.jupyterapp.hasPlugin(id)]))",
            plugin_ids,
        )
        toasts = page.locator(".Toastify__toast").all_text_contents()
        return {"plugins": plugins, "toasts": toasts, "console_errors": list(console.errors)}
    finally:
        page.close()


# --------------------------------------------------------------------------------------------
# Classic Notebook 6.5's page (ipywidgets 7's front end, widgetsnbextension: Google Colab's)
# --------------------------------------------------------------------------------------------
#: Classic Notebook's notebook and its output areas (``root`` and ``outputs`` above).
CLASSIC_NOTEBOOK = "#notebook-container"
CLASSIC_OUTPUTS = "#notebook-container .output_area"

# The kernel indicator in the page's header says whether the kernel is idle.
_JS_CLASSIC_IDLE = """() => {
  const icon = document.querySelector('#kernel_indicator_icon');
  return !!icon && icon.classList.contains('kernel_idle_icon');
}"""

# Ready: the notebook loaded, its kernel connected and idle, and widgetsnbextension's manager
# attached to the kernel (a cell run before that shows the static picture, not the widget).
_JS_CLASSIC_READY = """(name) => {
  const nb = window.Jupyter && window.Jupyter.notebook;
  if (!nb || !nb._fully_loaded || nb.notebook_path !== name) return false;
  const kernel = nb.kernel;
  return !!kernel && kernel.is_connected() && !!kernel.widget_manager && (IDLE)();
}""".replace("IDLE", _JS_CLASSIC_IDLE)

# As _JS_RUN_STATUS, over classic Notebook's cells (outputs are nbformat dicts there too).
_JS_CLASSIC_RUN_STATUS = """() => {
  const cells = [];
  const errors = [];
  Jupyter.notebook.get_cells().forEach((c, i) => {
    if (c.cell_type !== 'code' || !c.get_text().trim()) return;
    const n = c.input_prompt_number;
    cells.push(typeof n === 'number' ? n : null);
    if ((c.metadata.tags || []).includes('raises-exception')) return;
    for (const out of c.output_area.outputs) {
      const text = Array.isArray(out.text) ? out.text.join('') : (out.text || '');
      const stderr = out.output_type === 'stream' && out.name === 'stderr';
      if (out.output_type === 'error') {
        const trace = (out.traceback || []).join('\\n');
        errors.push(`cell ${i}: ${out.ename}: ${out.evalue}\\n` + trace);
      } else if (stderr && text.includes('Traceback')) {
        errors.push(`cell ${i} (stderr): ${text}`);
      }
    }
  });
  const idle = (IDLE)();
  return {kernel: idle ? 'idle' : 'busy', done: cells.filter(c => c !== null).length,
          total: cells.length, counts: cells, errors: errors};
}""".replace("IDLE", _JS_CLASSIC_IDLE)

# What the learner sees: tracebacks, and widgets widgetsnbextension 3.6 could not render.
_JS_CLASSIC_DOM_ERRORS = """() => {
  const found = [];
  document.querySelectorAll('#notebook-container .output_area').forEach((el) => {
    const text = el.textContent || '';
    if ((el.querySelector('.output_stderr') && text.includes('Traceback'))
        || text.includes('Error rendering Jupyter widget')) found.push(text.slice(0, 2000));
  });
  return found;
}"""


def open_classic_notebook(
    page: Page, server: ClassicNotebook, notebook: str, *, timeout: float = 90.0
) -> None:
    """Open ``notebook`` in classic Notebook's page and wait until its kernel is idle and
    widgetsnbextension's widget manager is attached to it."""
    page.goto(server.notebook_url(notebook), wait_until="domcontentloaded", timeout=timeout * 1000)
    try:
        page.wait_for_function(_JS_CLASSIC_READY, arg=notebook, timeout=timeout * 1000, polling=250)
    except Exception as exc:
        raise AssertionError(
            f"{notebook} did not open with an idle kernel and a widget manager "
            f"(widgetsnbextension) within {timeout} s"
        ) from exc


def run_all_cells_classic(page: Page, *, timeout: float = 120.0) -> RunReport:
    """Classic Notebook's :func:`run_all_cells`: clear every output and prompt number, run all
    cells, wait until each non-empty code cell has a count and the kernel is idle."""
    start = time.monotonic()
    page.evaluate(
        "() => { Jupyter.notebook.get_cells().forEach((c) => { if (c.cell_type === 'code') "
        "{ c.clear_output(); c.set_input_prompt(); } }); Jupyter.notebook.execute_all_cells(); }"
    )
    return _wait_for_run(page, _JS_CLASSIC_RUN_STATUS, start, timeout)


#: The class of a course widget's static picture (``Widget.static_html`` in
#: lmlessons/widgets/base.py): what a page shows when it cannot render the live widget.
STATIC_CLASS = "lmlessons-static"


def _assert_clean_classic(page: Page, console: ConsoleLog, notebook: str, when: str) -> None:
    errors = list(page.evaluate(_JS_CLASSIC_DOM_ERRORS))
    assert not errors, f"{notebook}: error output {when}:\n" + "\n---\n".join(errors)
    assert not console.errors, f"{notebook}: browser console errors {when}:\n" + "\n".join(
        console.errors
    )


def check_lesson_classic(
    context: BrowserContext,
    server: ClassicNotebook,
    notebook: str,
    spec: WidgetSpec,
    expected: str,
    *,
    run_timeout: float = 120.0,
    marker_timeout: float = 60.0,
    widget_timeout: float = 30.0,
) -> LessonResult:
    """:func:`check_lesson` in classic Notebook's page: open ``notebook``, run all cells, assert
    no error output and no console errors, that the widget is rendered live (no static picture
    in its place), move it and wait for the ``expected`` marker. Closes the page and shuts the
    notebook's kernel down afterwards. Raises AssertionError when a check fails."""
    t0 = time.monotonic()
    page = context.new_page()
    console = ConsoleLog().attach(page)
    try:
        open_classic_notebook(page, server, notebook)
        t_open = time.monotonic()
        run = run_all_cells_classic(page, timeout=run_timeout)
        t_run = time.monotonic()
        _assert_clean_classic(page, console, notebook, "after run-all")
        static = page.locator(f"{CLASSIC_OUTPUTS} .{STATIC_CLASS}").count()
        assert static == 0, f"{notebook}: {static} static picture(s) shown instead of widgets"
        widget = find_widget(page, spec, timeout=widget_timeout, root=CLASSIC_NOTEBOOK)
        before = _move_and_wait(
            page, notebook, spec, widget, expected, marker_timeout,
            outputs=CLASSIC_OUTPUTS, kernel_idle=_JS_CLASSIC_IDLE,
        )  # fmt: skip
        t_move = time.monotonic()
        _assert_clean_classic(page, console, notebook, "after moving the widget")
        return LessonResult(
            notebook=notebook,
            open_s=t_open - t0,
            run_s=t_run - t_open,
            move_s=t_move - t_run,
            total_s=time.monotonic() - t0,
            cells=run.cells,
            markers_before=before,
            markers_after=markers(page, outputs=CLASSIC_OUTPUTS),
            ignored_console=list(console.ignored),
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n--- classic Notebook server log, last lines ---\n{server.log_tail(15)}"
        ) from None
    finally:
        page.close()
        server.shutdown_sessions(notebook)
