"""``make screenshots``: a PNG of each lesson's main widget into ``docs/screenshots/NN_name.png``.

Runs every written lesson in JupyterLab in Chromium exactly as the browser test does (same table,
``tools/browser_lessons.py``; same checks), moves its main widget, and saves the output area
of the cell that shows the widget, after the move. The README shows these images next to the
lesson list. Needs Chromium (``apt-get install chromium``) and the ``playwright`` package.

    python -m tools.screenshots            # all lessons
    python -m tools.screenshots --only 03  # one lesson (repeatable)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tools.browser import (
    NOTEBOOKS_DIR,
    REPO_ROOT,
    JupyterLab,
    check_lesson,
    find_chromium,
    launch_chromium,
    new_context,
)
from tools.browser_lessons import LESSONS, Lesson

DEFAULT_OUT = REPO_ROOT / "docs" / "screenshots"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.screenshots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="directory for the PNGs (default: docs/screenshots)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NN",
        help="only the lesson with this two-digit number (repeatable)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=120.0,
        help="seconds allowed for one lesson's run-all (default 120)",
    )
    return parser.parse_args(argv)


def _jobs(only: list[str], failures: list[str]) -> list[tuple[Lesson, Path]]:
    """The written lessons to screenshot; a written lesson whose row is TODO is a failure."""
    jobs = []
    for lesson in LESSONS:
        if only and lesson.number not in only:
            continue
        path = lesson.resolve(NOTEBOOKS_DIR)
        if path is None:
            print(f"skip {lesson.notebook}: not written yet")
        elif lesson.is_todo:
            print(f"FAIL {path.name}: its row in tools/browser_lessons.py is TODO", file=sys.stderr)
            failures.append(path.name)
        else:
            jobs.append((lesson, path))
    return jobs


def _shoot(
    jobs: list[tuple[Lesson, Path]], chromium: str, out: Path, run_timeout: float
) -> list[str]:
    """Run each lesson, move its widget and save the screenshot; return the failed lessons."""
    from playwright.sync_api import sync_playwright

    failures = []
    with JupyterLab(NOTEBOOKS_DIR) as lab, sync_playwright() as pw:
        browser = launch_chromium(pw, chromium)
        try:
            context = new_context(browser)
            for lesson, path in jobs:
                target = out / f"{path.stem}.png"
                assert lesson.widget is not None and lesson.expected is not None  # not TODO
                try:
                    result = check_lesson(
                        context,
                        lab,
                        path.name,
                        lesson.widget,
                        lesson.expected,
                        run_timeout=run_timeout,
                        screenshot=target,
                    )
                except AssertionError as exc:
                    print(f"FAIL {path.name}: {exc}", file=sys.stderr)
                    failures.append(path.name)
                    continue
                shown = (
                    target.relative_to(REPO_ROOT) if target.is_relative_to(REPO_ROOT) else target
                )
                size = target.stat().st_size // 1024
                print(f"wrote {shown} ({size} KiB, {result.total_s:.1f} s)")
        finally:
            browser.close()
    return failures


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    chromium = find_chromium()
    if chromium is None:
        print(
            "no Chromium found: install it (apt-get install chromium) or set LMLESSONS_CHROMIUM",
            file=sys.stderr,
        )
        return 2
    failures: list[str] = []
    jobs = _jobs(args.only, failures)
    if not jobs:
        print("no lesson to screenshot")
        return 1 if failures else 0
    start = time.monotonic()
    failed = _shoot(jobs, chromium, args.out, args.run_timeout)
    written = len(jobs) - len(failed)
    print(f"{written}/{len(jobs)} screenshots in {time.monotonic() - start:.0f} s")
    return 1 if failures or failed else 0


if __name__ == "__main__":
    sys.exit(main())
