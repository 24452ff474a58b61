"""The student copies in Google Colab's runtime: its install cells' changes, then every copy.

Run it as root from the repository's root (``make test-colab`` does), with network access to
Debian's archive and to PyPI (pip's configured index)::

    .venv/bin/python -m tools.colab

In a Debian 13 chroot (Python 3.13, Colab's; made and cached by tools/pythons.py):

1. a venv gets requirements-colab.txt (Colab's versions, its header says where they come from
   and which cannot be copied), and its ``pip freeze`` is checked against that lock;
2. each student copy's install cell runs in IPython, in lesson order, with the local checkout in
   place of the course's GitHub URL (the course is not reachable on GitHub from the test
   machine) and without ``--extra-index-url https://download.pytorch.org/whl/cpu`` (not
   reachable either; Colab's torch already satisfies the course's range, so pip has no torch to
   fetch there). ``pip freeze`` is recorded before and after each cell, and every package a cell
   changes must be in tools/colab_allowed.toml, with its reason, for that lesson;
3. every student copy runs top to bottom (``pytest --nbval-lax student/``) in a kernel of that
   venv, driven by a second venv that holds pytest and nbval (so the test tools change nothing
   in the Colab venv). No cell may fail.

The freezes are written to ``~/.cache/lmlessons/colab/``. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import pythons

ROOT = pythons.ROOT
LOCK = ROOT / "requirements-colab.txt"
ALLOWED = ROOT / "tools" / "colab_allowed.toml"
RECORDS = pythons.CACHE / "colab"
SUITE, VERSION = "trixie", "3.13"
#: The course's address in the install cells, and the index the test machine cannot reach.
GIT_URL = re.compile(r"git\+https://github\.com/[^\s\"']+")
TORCH_INDEX = re.compile(r"\s*--extra-index-url\s+https://download\.pytorch\.org/\S+")
#: What the driving venv needs (pins from the course's locks): the runner and the conftest.
RUNNER = ("pytest", "nbval", "pytest-xdist", "psutil")
#: The student copies under nbval-lax, as one command line (run in the copied checkout).
NBVAL_LAX = ("student/", "--nbval-lax", "-p", "no:randomly")
XDIST = pythons.XDIST
#: Packages of torch's CUDA build that Colab's CPU build does not have (requirements-colab.txt).
CUDA_BUILD = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


@dataclass(frozen=True)
class Allowed:
    """A package an install cell may change: why, and in which lessons (empty: any lesson)."""

    reason: str
    lessons: tuple[str, ...]


def load_allowed(text: str) -> dict[str, Allowed]:
    """The allow-list's TOML: one table per package, each with a one-line reason."""
    allowed = {}
    for name, entry in tomllib.loads(text).items():
        if not isinstance(entry, dict):
            raise ValueError(f"allowed: {name!r} must be a table with a reason")
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
            raise ValueError(f"allowed: {name!r} needs a one-line reason")
        lessons = entry.get("lessons", [])
        if not isinstance(lessons, list) or not all(isinstance(x, str) for x in lessons):
            raise ValueError(f"allowed: {name!r} lessons must be a list of lesson names")
        unknown = set(entry) - {"reason", "lessons"}
        if unknown:
            raise ValueError(f"allowed: {name!r} has unknown keys {sorted(unknown)}")
        allowed[pythons.normalise(name)] = Allowed(reason.strip(), tuple(lessons))
    return allowed


def parse_freeze(text: str) -> dict[str, str]:
    """``pip freeze`` (or a lock) -> normalised name: version (``@ URL`` for a direct URL)."""
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        pinned = re.match(r"([A-Za-z0-9._-]+)\s*(==\s*(\S+)|@\s*(\S+))", line)
        if pinned is not None:
            version = pinned.group(3) or f"@ {pinned.group(4)}"
            found[pythons.normalise(pinned.group(1))] = version
    return found


def changes(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Each package added, removed or moved: name -> "old -> new" (``-`` where absent)."""
    moved = {}
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, "-"), after.get(name, "-")
        if old != new:
            moved[name] = f"{old} -> {new}"
    return moved


def disallowed(moved: dict[str, str], allowed: dict[str, Allowed], lesson: str) -> list[str]:
    """The changes ``lesson``'s install cell made that the allow-list does not allow there."""
    bad = []
    for name, change in moved.items():
        entry = allowed.get(name)
        if entry is None or (entry.lessons and lesson not in entry.lessons):
            bad.append(f"{name} {change}")
    return bad


def lock_mismatches(lock: dict[str, str], installed: dict[str, str]) -> list[str]:
    """How the freeze after installing the lock differs from it (CUDA build extras aside)."""
    bad = [f"{n}: lock {v}, installed {installed.get(n, '-')}" for n, v in lock.items()]
    bad = [b for b, (n, v) in zip(bad, lock.items()) if installed.get(n) != v]
    extra = [n for n in installed if n not in lock and not CUDA_BUILD.match(n)]
    return bad + [f"{n}: installed {installed[n]}, not in the lock" for n in extra]


def install_cell(notebook: dict[str, object]) -> str:
    """The source of the notebook's first code cell that runs ``%pip install``."""
    for cell in notebook.get("cells", []):  # type: ignore[attr-defined]
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "%pip install" in source:
            return source
    raise ValueError("notebook: no code cell runs %pip install")


def local_install_cell(source: str, checkout: str) -> str:
    """The install cell with ``checkout`` (a folder) in place of the course's GitHub URL.

    The course is not reachable on GitHub from the test machine, nor download.pytorch.org: its
    --extra-index-url is dropped (Colab's torch satisfies the course's range already).
    """
    if GIT_URL.search(source) is None:
        raise ValueError("source: the install cell names no git+https://github.com URL")
    return TORCH_INDEX.sub("", GIT_URL.sub(f"file://{checkout}", source))


class Colab:
    """The chroot's command lines: the Colab venv, the driving venv, the copied checkout."""

    def __init__(self, root: Path, inside: str) -> None:
        self.root, self.inside = root, inside
        self.src, self.venv, self.runner = (f"{inside}/{d}" for d in ("src", "colab", "runner"))
        #: The install cells run here, as Colab's /content: no lmlessons folder to import.
        self.content = f"{inside}/content"

    def run(self, argv: Sequence[str], venv: str | None = None, cwd: str | None = None) -> str:
        """Run ``argv`` (in the copied checkout by default); its stdout, or RuntimeError."""
        done = pythons.in_chroot(self.root, argv, cwd=cwd or self.src, venv=venv or self.venv)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done.stdout

    def freeze(self) -> str:
        return self.run([f"{self.venv}/bin/python", "-m", "pip", "freeze", "--all"])

    def make_venvs(self) -> str:
        """The Colab venv from the lock (its freeze checked), and the driving venv."""
        python, lock = f"python{VERSION}", parse_freeze(LOCK.read_text(encoding="utf-8"))
        pip = [f"{self.venv}/bin/python", "-m", "pip", "install", "--quiet", "--no-compile"]
        self.run([python, "-m", "venv", self.venv])
        self.run([*pip, f"pip=={lock['pip']}"])
        self.run([*pip, "-r", f"{self.src}/requirements-colab.txt"])
        baseline = self.freeze()
        bad = lock_mismatches(lock, parse_freeze(baseline))
        if bad:
            raise RuntimeError("the Colab venv is not the lock:\n" + "\n".join(bad))
        self.run([python, "-m", "venv", self.runner], venv=self.runner)
        locks = [a for lk in ("requirements.txt", "requirements-test.txt") for a in ("-c", lk)]
        runner_pip = [f"{self.runner}/bin/python", "-m", "pip", "install", "--quiet"]
        self.run([*runner_pip, *locks, *RUNNER], venv=self.runner)
        kernel = [f"{self.venv}/bin/python", "-m", "ipykernel", "install", "--name", "python3"]
        self.run([*kernel, "--prefix", self.runner])
        find = "from jupyter_client.kernelspec import KernelSpecManager as K; "
        find += "print(K().get_kernel_spec('python3').argv[0])"
        used = self.run([f"{self.runner}/bin/python", "-c", find], venv=self.runner).strip()
        if used != f"{self.venv}/bin/python":
            raise RuntimeError(f"the student copies would run in {used}, not the Colab venv")
        return baseline

    def run_install_cell(self, source: str) -> str:
        """Run an install cell in IPython (as Colab's kernel would); its output."""
        cell = local_install_cell(source, self.src)
        ipython = [f"{self.venv}/bin/ipython", "--quick", "--no-banner", "-c", cell]
        out = self.run(ipython, cwd=self.content)
        if "Traceback" in out or "Error" in out:
            raise RuntimeError(f"the install cell failed:\n{out[-3000:]}")
        return out


def check_install_cells(colab: Colab, baseline: str) -> list[str]:
    """Each student copy's install cell, in lesson order; the changes no entry allows."""
    allowed = load_allowed(ALLOWED.read_text(encoding="utf-8"))
    RECORDS.mkdir(parents=True, exist_ok=True)
    (RECORDS / "freeze-colab.txt").write_text(baseline, encoding="utf-8")
    before, failures = baseline, []
    for path in sorted((ROOT / "student").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        start = time.monotonic()
        out = colab.run_install_cell(install_cell(notebook))
        after = colab.freeze()
        (RECORDS / f"freeze-after-{path.stem}.txt").write_text(after, encoding="utf-8")
        moved = changes(parse_freeze(before), parse_freeze(after))
        wanted = ["lmlessons", *(["trl"] if "lmlessons[rl]" in install_cell(notebook) else [])]
        absent = [name for name in wanted if name not in parse_freeze(after)]
        if absent:
            failures.append(f"{path.stem}: its install cell left {absent} uninstalled")
        said = " ".join(ln for ln in out.splitlines() if ln.startswith("installed:"))
        print(f"{path.stem}: {len(moved)} changed ({time.monotonic() - start:.0f} s) {said}")
        for name, change in moved.items():
            print(f"    {name} {change}")
        failures += [f"{path.stem}: {bad}" for bad in disallowed(moved, allowed, path.stem)]
        before = after
    total = changes(parse_freeze(baseline), parse_freeze(before))
    print(f"all install cells: {len(total)} changed from Colab's")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    start = time.monotonic()
    root = pythons.ensure_chroot(SUITE, VERSION)
    with pythons.mounted(root), pythons.workdir(root) as (host, inside):
        pythons.copy_checkout(host)
        (host / "content").mkdir()
        colab = Colab(root, inside)
        baseline = colab.make_venvs()
        print(
            f"Colab venv: {len(parse_freeze(baseline))} packages, the lock's versions "
            f"({time.monotonic() - start:.0f} s)"
        )
        failures = check_install_cells(colab, baseline)
        lax = [f"{colab.runner}/bin/python", "-m", "pytest", *NBVAL_LAX, *XDIST, "-q"]
        begin = time.monotonic()
        done = pythons.in_chroot(root, lax, cwd=colab.src, venv=colab.runner)
        print(
            f"nbval-lax student/: {pythons.pytest_summary(done.stdout)} "
            f"({time.monotonic() - begin:.0f} s)"
        )
        if done.returncode != 0:
            failures.append(f"nbval-lax student/ failed:\n{done.stdout[-6000:]}")
    for failure in failures:
        print("FAILED", failure)
    print(f"colab: {'FAILED' if failures else 'passed'} in {time.monotonic() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
