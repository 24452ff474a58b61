"""Build the course website from the stored notebooks: ``python site/build.py [OUT]``.

``make site`` runs it with OUT = _build/site (ignored by git). Nothing is executed: the pages show
the outputs stored in notebooks/. The sources are staged in a temporary folder laid out as the
site is (index.md at the top, every notebooks/*.ipynb, the files README.md's lesson table shows),
then Sphinx builds them with site/conf.py; a warning fails the build. OUT is replaced only by a
successful build, and gets ``_lessons.json``: the SHA-256 of each lesson it was built from
(tests/test_site.py uses it to tell a stale site).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
MANIFEST = "_lessons.json"

sys.path.insert(0, str(SITE))
from lmsite import lesson_table, local_targets  # noqa: E402  (site/ is not a package)


def lessons(root: Path = ROOT) -> list[Path]:
    """Every lesson notebook, in order: notebooks/*.ipynb (a new lesson needs no list)."""
    return sorted((root / "notebooks").glob("*.ipynb"))


def stage(src: Path) -> None:
    """Lay out the site's sources in ``src``: index.md, notebooks/, the lesson table's files."""
    shutil.copy2(SITE / "index.md", src / "index.md")
    (src / "notebooks").mkdir()
    for path in lessons():
        shutil.copy2(path, src / "notebooks" / path.name)
    table = lesson_table((ROOT / "README.md").read_text(encoding="utf-8"))
    for target in local_targets(table):
        if not target.startswith("notebooks/"):
            (src / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / target, src / target)


def manifest() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in lessons()}


def build(out: Path, *, jobs: str = "1") -> float:
    """Build the site and put it in ``out`` (replaced only when the build succeeds); return the
    wall time in seconds."""
    from sphinx.cmd.build import build_main

    start = time.perf_counter()
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).exists():
        raise ValueError(f"out must be empty or a site this script built, got {out}")
    with tempfile.TemporaryDirectory(prefix="lmlessons-site-") as tmp:
        src, doctrees, html = Path(tmp) / "src", Path(tmp) / "doctrees", Path(tmp) / "html"
        src.mkdir()
        stage(src)
        args = ["-b", "html", "-c", str(SITE), "-d", str(doctrees), "-j", jobs, "-q"]
        status = build_main([*args, "-W", "--keep-going", str(src), str(html)])
        if status:
            raise SystemExit(f"sphinx-build failed (exit {status}); {out} is unchanged")
        (html / MANIFEST).write_text(json.dumps(manifest(), indent=1) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(html, out)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "_build" / "site"), type=Path)
    parser.add_argument("-j", "--jobs", default="1", help="Sphinx processes (default 1)")
    args = parser.parse_args(argv)
    seconds = build(args.out, jobs=args.jobs)
    print(f"site: {len(lessons())} lessons built into {args.out} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
