"""The fast tests and lesson 01's strict nbval on every Python from 3.11 to Debian's newest.

Run it as root from the repository's root (``make test-pythons`` does), with network access to
Debian's archive and to PyPI (pip's configured index)::

    .venv/bin/python -m tools.pythons              # every version
    .venv/bin/python -m tools.pythons 3.13 3.14    # some

It prints one line per Python: version, result, seconds, and how it was tested or why it could
not be. Exit status 1 when a version that could be tested failed.

- Which Debian suite ships which Python is read from the archive's own Packages files (bookworm,
  trixie, forky, sid); a version in none of them is reported as not testable, with that evidence.
- 3.11 runs on this machine's own ``.venv`` (``make setup`` installs it from the locks; the
  host is Debian 12, bookworm): a bookworm chroot would install the same wheels on the same
  system and cost minutes, and tests/test_install.py already resolves the locks with Debian 12's
  own Python 3.11.2. The line names the venv's exact Python.
- Each other version gets a chroot of the first suite that ships it (debootstrap, cached in
  ``~/.cache/lmlessons/chroots``; pip's cache, where the index lets pip cache, in
  ``~/.cache/lmlessons/pip``), with /proc, /dev, /sys, this machine's /opt (local wheels,
  read-only) and the pip cache mounted while it runs. Run one of these tools at a time.
- The checkout (git's tracked and unignored files) is copied into a temporary folder inside the
  chroot, where a venv gets the course's locks: requirements.txt, requirements-hub.txt and
  requirements-test.txt, as ``make setup`` installs them. A pin with no installable distribution
  for that Python is replaced by pyproject.toml's range (or left unpinned), and the line says so.
- Then ``pytest tests -m "not slow and not browser and not classroom" -n 2`` (as ``make
  test-fast``) and ``pytest notebooks/01_mlm_masking.ipynb --nbval`` with tests/sanitize.cfg.
  The temporary folder is removed and every mount undone, whatever happens.
"""

from __future__ import annotations

import argparse
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lmlessons"
CHROOTS = CACHE / "chroots"
PIP_CACHE = CACHE / "pip"
MIRROR = "http://deb.debian.org/debian"
#: Debian's suites, oldest first: a version is tested in the first that ships it.
SUITES = ("bookworm", "trixie", "forky", "sid")
#: The Python that runs on the host (its .venv) instead of in a chroot.
HOST_VERSION = "3.11"
#: The locks `make setup` installs, in its order (tests/test_install.py checks the Makefile).
LOCKS = ("requirements.txt", "requirements-hub.txt", "requirements-test.txt")
#: The fast tests, as `make test-fast` selects them.
FAST_TESTS = ("tests", "-m", "not slow and not browser and not classroom")
XDIST = ("-n", "2", "--dist", "loadscope", "--no-loadscope-reorder")
#: One lesson's strict nbval, as `make test` checks every lesson.
NBVAL_01 = (
    "notebooks/01_mlm_masking.ipynb",
    "--nbval",
    "--nbval-sanitize-with",
    "tests/sanitize.cfg",
    "-p",
    "no:randomly",
)
#: Host settings pip needs inside a chroot (its certificate bundle, local wheels, constraints).
PIP_FILES = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "/etc/xdg/pip/constraints.txt")
CERTS = "/etc/ssl/certs/ca-certificates.crt"


@dataclass
class Outcome:
    """One Python's line: its version, result (passed, FAILED, not testable), seconds and notes."""

    version: str
    result: str
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.version:<5} {self.result:<13} {self.seconds:6.0f} s  {'; '.join(self.notes)}"


def minimum_python() -> tuple[int, int]:
    """pyproject.toml's lower bound of requires-python (">=3.11" gives (3, 11))."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = re.fullmatch(r">=\s*3\.(\d+)", project["requires-python"].strip())
    if found is None:
        raise ValueError(f"requires-python must read '>=3.N', got {project['requires-python']!r}")
    return 3, int(found.group(1))


def archive_pythons(packages: dict[str, str]) -> dict[str, list[str]]:
    """Python versions (``3.13``) -> the suites whose Packages file lists ``python3.13``.

    ``packages`` maps a suite to the text of its main/binary-amd64/Packages file.
    """
    found: dict[str, list[str]] = {}
    for suite, text in packages.items():
        for version in sorted(set(re.findall(r"^Package: python(3\.\d+)$", text, re.M))):
            found.setdefault(version, []).append(suite)
    return found


def fetch_packages(suite: str) -> str:
    """The text of a suite's main/binary-amd64/Packages file from Debian's archive."""
    url = f"{MIRROR}/dists/{suite}/main/binary-amd64/Packages.xz"
    with urllib.request.urlopen(url, timeout=120) as response:
        return lzma.decompress(response.read()).decode("utf-8", errors="replace")


def versions_to_test(found: dict[str, list[str]]) -> list[str]:
    """Every 3.N from requires-python's minimum to the newest that Debian ships, in order."""
    newest = max(int(v.split(".")[1]) for v in found)
    low = minimum_python()[1]
    return [f"3.{minor}" for minor in range(low, newest + 1)]


def chroot_env(venv: str | None = None) -> list[str]:
    """The environment of a command in a chroot: pip's settings from ours, one torch thread."""
    path = "/usr/local/bin:/usr/bin:/bin" if venv is None else f"{venv}/bin:/usr/bin:/bin"
    keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    env = {
        **keep,
        "PATH": path,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HYPOTHESIS_STORAGE_DIRECTORY": "/tmp/lmlessons-hypothesis",
        "DEBIAN_FRONTEND": "noninteractive",
    }
    return [f"{k}={v}" for k, v in env.items()]


def in_chroot(
    root: Path, argv: Sequence[str], cwd: str = "/", venv: str | None = None, timeout: int = 3600
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the chroot ``root`` from ``cwd`` with a clean environment, output kept."""
    cmd = ["chroot", str(root), "/usr/bin/env", "-i", *chroot_env(venv)]
    cmd += ["/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def ensure_chroot(suite: str, version: str) -> Path:
    """The cached chroot of ``suite`` with python``version`` and its venv (made if needed)."""
    root = CHROOTS / suite
    if not (root / "usr" / "bin" / "python3").exists():
        CHROOTS.mkdir(parents=True, exist_ok=True)
        partial = CHROOTS / f"{suite}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        include = "python3,python3-venv,ca-certificates,procps"
        cmd = ["debootstrap", "--variant=minbase", f"--include={include}", suite, str(partial)]
        # An older debootstrap lacks the newest suites' scripts: they bootstrap as sid does.
        script = Path("/usr/share/debootstrap/scripts") / suite
        tail = [] if script.exists() else [str(script.with_name("sid"))]
        subprocess.run([*cmd, MIRROR, *tail], check=True, capture_output=True, timeout=3600)
        partial.rename(root)
    missing = missing_packages(root, version)
    if missing:
        with mounted(root):
            # testing's Release files expire within days; the mirror's copy can be older than
            # that, and its signature is still checked.
            update = ["apt-get", "-o", "Acquire::Check-Valid-Until=false", "update"]
            for argv in (update, ["apt-get", "install", "-y", *missing]):
                done = in_chroot(root, argv)
                if done.returncode != 0:
                    raise RuntimeError(f"{' '.join(argv)} failed in {root}:\n{done.stderr[-2000:]}")
    return root


def missing_packages(root: Path, version: str) -> list[str]:
    """The Debian packages the chroot lacks: this Python's venv, procps (pgrep, for the tests)."""
    wanted = {
        f"python{version}-venv": Path("usr", "lib", f"python{version}", "ensurepip"),
        "procps": Path("usr", "bin", "pgrep"),
    }
    return [package for package, marker in wanted.items() if not (root / marker).exists()]


@contextmanager
def mounted(root: Path) -> Iterator[Path]:
    """/proc, /sys, /dev, /opt (read-only) and the pip cache mounted in ``root`` while inside."""
    (root / "root" / ".cache" / "pip").mkdir(parents=True, exist_ok=True)
    PIP_CACHE.mkdir(parents=True, exist_ok=True)
    for name in (*PIP_FILES, CERTS, "/etc/resolv.conf"):
        if Path(name).exists():
            (root / name[1:]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(name, root / name[1:])
    plan = [
        (["-t", "proc", "proc"], root / "proc"),
        (["-t", "sysfs", "sysfs"], root / "sys"),
        (["--rbind", "/dev"], root / "dev"),
        (["--bind", "/opt"], root / "opt"),
        (["--bind", str(PIP_CACHE)], root / "root" / ".cache" / "pip"),
    ]
    done: list[Path] = []
    try:
        for args, target in plan:
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *args, str(target)], check=True)
            done.append(target)
            if args[0] == "--rbind":
                subprocess.run(["mount", "--make-rslave", str(target)], check=True)
            if args[-1] == "/opt":
                subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield root
    finally:
        for target in reversed(done):
            subprocess.run(["umount", "-R", str(target)], check=False)


def checkout_files() -> list[str]:
    """The checkout's files that git tracks or would track (not the ignored ones)."""
    cmd = ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(cmd, check=True, capture_output=True).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def copy_checkout(dest: Path) -> Path:
    """Copy the checkout into ``dest``/src (tests then never write into the repository)."""
    src = dest / "src"
    for name in checkout_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    return src


@contextmanager
def workdir(root: Path) -> Iterator[tuple[Path, str]]:
    """A temporary folder inside the chroot: (its path here, its path inside), removed after."""
    host = Path(tempfile.mkdtemp(prefix="lmlessons-", dir=root / "tmp"))
    try:
        yield host, "/" + str(host.relative_to(root))
    finally:
        shutil.rmtree(host, ignore_errors=True)


def pyproject_ranges() -> dict[str, str]:
    """Each course dependency's name (normalised) -> its requirement in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    ranges = {}
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        if name is not None:
            ranges[normalise(name.group(0))] = requirement.split(";")[0].strip()
    return ranges


def normalise(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def unavailable_pins(pip_stderr: str) -> list[str]:
    """The ``name==version`` pins that pip found no distribution for, from its error output."""
    found = re.findall(r"No matching distribution found for ([A-Za-z0-9._-]+==[^\s;]+)", pip_stderr)
    return sorted(set(found))


def relaxed_lock(lock_text: str, dropped: dict[str, str]) -> str:
    """A lock's text with each pin whose name is in ``dropped`` replaced by that requirement."""
    lines = []
    for line in lock_text.splitlines():
        pin = re.match(r"([A-Za-z0-9._-]+)==", line)
        if pin is not None and normalise(pin.group(1)) in dropped:
            line = dropped[normalise(pin.group(1))]
        lines.append(line)
    return "\n".join(lines) + "\n"


class NotInstallable(RuntimeError):
    """A requirement with no distribution for this Python, even at pyproject.toml's range."""


RunFn = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def install_locks(root: Path, python: str, work: tuple[Path, str], src: str) -> list[str]:
    """A venv at work/venv with the course's locks and the checkout (editable); returns notes.

    A pin pip finds no distribution for is replaced by pyproject.toml's range for that package
    (unpinned when pyproject.toml names none) and the note says so; a range that still finds
    none raises NotInstallable with pip's words.
    """
    host, inside = work
    venv = f"{inside}/venv"
    made = in_chroot(root, [python, "-m", "venv", venv])
    if made.returncode != 0:
        raise RuntimeError(f"{python} -m venv failed:\n{made.stderr[-2000:]}")
    ranges, dropped, notes = pyproject_ranges(), dict[str, str](), []
    (host / "locks").mkdir()
    pip = [f"{venv}/bin/python", "-m", "pip", "install", "--no-compile", "--quiet"]
    # First torch alone, at the course's range: without a wheel for this Python nothing runs.
    wheel_only = ["--dry-run", "--no-deps", "--only-binary=:all:"]
    torch = in_chroot(root, [*pip, *wheel_only, ranges["torch"]])
    if torch.returncode != 0:
        index = in_chroot(root, [f"{venv}/bin/python", "-m", "pip", "index", "versions", "torch"])
        found = re.search(r"Available versions: (.*)", index.stdout)
        wheels = found.group(1) if found else "none"
        raise NotInstallable(f"torch wheels for {python}: {wheels}; {_pip_evidence(torch.stderr)}")
    for _ in range(6):
        for lock in LOCKS:
            text = relaxed_lock((ROOT / lock).read_text(encoding="utf-8"), dropped)
            (host / "locks" / lock).write_text(text, encoding="utf-8")
        reqs = [arg for lock in LOCKS for arg in ("-r", f"{inside}/locks/{lock}")]
        done = in_chroot(root, [*pip, *reqs], cwd=src)
        if done.returncode == 0:
            break
        missing = [pin for pin in unavailable_pins(done.stderr) if "==" in pin]
        if not missing:
            raise NotInstallable(_pip_evidence(done.stderr))
        for pin in missing:
            name = normalise(pin.split("==")[0])
            dropped[name] = ranges.get(name, name)
            notes.append(f"lock pin {pin} has no distribution here: installed {dropped[name]}")
    else:
        raise RuntimeError(f"the locks did not install:\n{done.stderr[-2000:]}")
    editable = in_chroot(root, [*pip, "--no-deps", "--no-build-isolation", "-e", src], cwd=src)
    if editable.returncode != 0:
        raise RuntimeError(f"pip install -e failed:\n{editable.stderr[-2000:]}")
    return notes


def _pip_evidence(stderr: str) -> str:
    """pip's own lines saying which requirement has no distribution (and which versions exist)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.startswith("ERROR")]
    return " / ".join(lines) or stderr.strip()[-500:]


def test_steps(run: RunFn, python: str) -> tuple[bool, list[str]]:
    """The fast tests (with -n 2 where xdist is installed), then lesson 01's strict nbval.

    ``run`` runs a command line in the copied checkout; returns (all passed, one note per step).
    """
    xdist = run([python, "-c", "import xdist"]).returncode == 0
    steps = {
        "fast tests": [python, "-m", "pytest", *FAST_TESTS, *(XDIST if xdist else ()), "-q"],
        "nbval 01": [python, "-m", "pytest", *NBVAL_01, "-q"],
    }
    passed, notes = True, []
    for label, argv in steps.items():
        start = time.monotonic()
        done = run(argv)
        summary = pytest_summary(done.stdout)
        notes.append(f"{label}: {summary} ({time.monotonic() - start:.0f} s)")
        if done.returncode != 0:
            passed = False
            print(f"--- {label} failed on {python}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    return passed, notes


def pytest_summary(stdout: str) -> str:
    """pytest's last summary line ("12 passed, 3 skipped in 40.1s"), without its === frame."""
    lines = [ln.strip("= ") for ln in stdout.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    return lines[-1] if lines else "no summary"


def test_host() -> Outcome:
    """3.11 with this machine's .venv (installed from the locks) on a copy of the checkout."""
    start, python = time.monotonic(), ROOT / ".venv" / "bin" / "python"
    if not python.exists():
        return Outcome(HOST_VERSION, "not testable", notes=[f"{python} is missing: make setup"])
    with tempfile.TemporaryDirectory(prefix="lmlessons-") as tmp:
        src = copy_checkout(Path(tmp))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(src)}
        env["PYTHONDONTWRITEBYTECODE"] = "1"

        def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(argv, cwd=src, env=env, capture_output=True, text=True)

        version = run([str(python), "-c", "import sys; print(sys.version.split()[0])"]).stdout
        passed, notes = test_steps(run, str(python))
    notes.insert(0, f"host .venv (Python {version.strip()}, the locks as make setup installs them)")
    return Outcome(HOST_VERSION, "passed" if passed else "FAILED", time.monotonic() - start, notes)


def test_chroot(version: str, suite: str) -> Outcome:
    """``version`` in a chroot of ``suite``: a venv with the locks, then the tests on a copy."""
    start = time.monotonic()
    root = ensure_chroot(suite, version)
    notes = [f"{suite} chroot"]
    with mounted(root), workdir(root) as work:
        src = str(copy_checkout(work[0]).relative_to(work[0]))
        src = f"{work[1]}/{src}"
        try:
            notes += install_locks(root, f"python{version}", work, src)
        except NotInstallable as err:
            notes.append(f"pip: {err}")
            return Outcome(version, "not testable", time.monotonic() - start, notes)
        notes.append(f"install {time.monotonic() - start:.0f} s")
        venv = f"{work[1]}/venv"

        def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            return in_chroot(root, argv, cwd=src, venv=venv)

        passed, steps = test_steps(run, f"{venv}/bin/python")
    result = "passed" if passed else "FAILED"
    return Outcome(version, result, time.monotonic() - start, notes + steps)


def test_version(version: str, found: dict[str, list[str]]) -> Outcome:
    """One version's outcome: on the host (3.11), in a chroot, or not testable with the evidence."""
    if version == HOST_VERSION:
        return test_host()
    if version not in found:
        where = ", ".join(SUITES)
        evidence = f"no python{version} package in Debian's {where} (main/binary-amd64/Packages)"
        return Outcome(version, "not testable", notes=[evidence])
    try:
        return test_chroot(version, found[version][0])
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        return Outcome(version, "FAILED", notes=[f"{type(err).__name__}: {str(err)[-1500:]}"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help="3.N versions (default: all from 3.11)")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    found = archive_pythons({suite: fetch_packages(suite) for suite in SUITES})
    print("Debian ships:", "; ".join(f"{v} in {', '.join(s)}" for v, s in sorted(found.items())))
    outcomes = []
    for version in args.versions or versions_to_test(found):
        outcome = test_version(version, found)
        print(outcome.line(), flush=True)  # as each ends; its chroot's output came before
        outcomes.append(outcome)
    if len(outcomes) > 1:  # the lines again, together, after the chroots' output
        print("All:", *(o.line() for o in outcomes), sep="\n")
    return 1 if any(o.result == "FAILED" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
