"""The class hub under load: ``make test-hub`` (``python -m tools.hub_load``; docs/teaching.md).

Installs the hub as ``make hub`` does (its own venv from the locks, Debian's Python), in a temp
folder kept between runs (``--dir``), and starts it on 127.0.0.1. The teacher releases lesson 01.
Then, for each class size N of ``--learners`` (a ramp: the learners of one stage stay for the next):

1. the new learners log in through the hub's login form, start their servers through its REST
   API and a kernel each, and run lesson 01 up to its checked exercise (the kernel API);
2. all N learners, in fresh kernels and at the same moment, run lesson 10 up to and including its
   fine-tuning cell (the class's heaviest cell), while a sampler reads every learner's memory.

The ramp stops early only where memory would run out (the next stage would need more than the
machine has, at the last stage's peak per learner). Time runs out at the class size where the
fine-tuning cell would take longer than the autograder's per-cell limit
(``tools.classroom.CELL_TIMEOUT_S``), from a straight line through the stages' times. Then every
learner fetches lesson 01, answers and submits it; the teacher collects and autogrades all
submissions, two at a time; each learner tries to read another's home and the teacher's course.
Writes the figures as JSON (``--out``), prints the sizing table, and exits 1 if a submission was
lost, a learner read what was not theirs, a cell failed, or the ramp ended below 20 learners with
memory to spare.

Memory is PSS (``/proc/<pid>/smaps_rollup``): a process's private memory plus its share of the
pages it shares (torch's libraries, loaded once for every learner), so the learners' figures add
up to what the class uses.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nbgrader.api import Gradebook

from tools import classroom, hub
from tools.hub_class import (
    Learner,
    as_account,
    as_teacher,
    in_parallel,
    lesson_cells,
    running_class,
    teacher_course,
)

TEACHER = "lmload-teacher"
PREFIX = "lmload-"
ASSIGNMENT = "01_mlm_masking"
FINE_TUNING = "# Live fine-tuning"
FINE_TUNING_TIMEOUT_S = 900.0  # bounds a stage; a class waiting this long has long run out of time
GIB = 1024**3
RESERVE_GIB = 2.0  # left for the system, the hub and the teacher
DEFAULT_DIR = Path(tempfile.gettempdir()) / "lmlessons-hub-load"
DEFAULT_OUT = Path.home() / ".cache" / "lmlessons" / "hub_load.json"


def pss_by_user(uids: dict[int, str]) -> dict[str, int]:
    """Bytes of PSS of every process, summed by the learner (``uids``: uid -> name) that owns it."""
    total = dict.fromkeys(uids.values(), 0)
    for proc in Path("/proc").iterdir():
        try:
            name = uids.get(proc.stat().st_uid)
            if name is None or not proc.name.isdigit():
                continue
            for line in (proc / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total[name] += int(line.split()[1]) * 1024
        except OSError:  # the process ended while read
            continue
    return total


def mem_available() -> int:
    """Bytes the machine can still give (``MemAvailable`` of ``/proc/meminfo``)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable")


@dataclass
class Sampler:
    """Every ``every`` seconds in a thread: each learner's PSS (its peak) and the free memory."""

    uids: dict[int, str]
    every: float = 0.5
    peak: dict[str, int] = field(default_factory=dict)
    min_available: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Sampler:
        self.min_available = mem_available()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pss in pss_by_user(self.uids).items():
                self.peak[name] = max(self.peak.get(name, 0), pss)
            self.min_available = min(self.min_available, mem_available())
            self._stop.wait(self.every)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Stage:
    """What N learners measured together (seconds; memory in MiB per learner)."""

    learners: int
    ready_s: list[float]
    first_result_s: list[float]
    lesson01_s: list[float]
    fine_tuning_s: list[float]
    idle_mib: float
    after01_mib: float
    peak10_mib: float
    min_available_gib: float
    kernel_deaths: int
    failed: list[str]  # every status but ok (dead, error, timeout, wrong)


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def mib(values: Sequence[int]) -> float:
    return round(statistics.median(values) / 2**20, 0) if values else 0.0


@dataclass
class Arrival:
    """One learner's start: seconds to a ready server and to the first result, memory (bytes)."""

    ready_s: float
    first_result_s: float
    lesson01_s: float
    idle: int
    after01: int
    status: str


def arrive(learner: Learner, cells: Sequence[str]) -> Arrival:
    """Log in, start the server and a kernel, run lesson 01 up to its checked exercise."""
    start = time.monotonic()
    assert learner.login().status_code == 302, f"{learner.name} could not log in"
    learner.start_server()
    ready = time.monotonic() - start
    learner.start_kernel()
    learner.execute("pass")  # the kernel is up and waits: the learner's idle memory
    uid = {uid_of(learner.name): learner.name}
    idle = pss_by_user(uid)[learner.name]
    first = learner.execute(cells[0])  # the lesson's imports: the first result a learner sees
    first_s = time.monotonic() - start
    rest = learner.run_cells(cells[1:]) if first.status == "ok" else first
    after = pss_by_user(uid)[learner.name]
    status = rest.status if "✓" in rest.output or rest.status != "ok" else "wrong"
    return Arrival(ready, first_s, first.seconds + rest.seconds, idle, after, status)


def fine_tune(learner: Learner, cells: Sequence[str]) -> tuple[float, str]:
    """Lesson 10 in a fresh kernel, up to its fine-tuning cell: (that cell's seconds, status)."""
    learner.server("DELETE", f"/api/kernels/{learner.kernel}")
    learner.start_kernel()
    before = learner.run_cells(cells[:-1])
    if before.status != "ok":
        return before.seconds, before.status
    cell = learner.execute(cells[-1], timeout=FINE_TUNING_TIMEOUT_S)
    return cell.seconds, cell.status


def run_stage(
    h: hub.Hub, crowd: list[Learner], size: int, cells01: list[str], cells10: list[str]
) -> Stage:
    """Grow the class to ``size`` learners (step 1), then all of them run lesson 10 (step 2)."""
    new = [Learner(h, f"{PREFIX}{i:03d}") for i in range(len(crowd), size)]
    arrived = in_parallel(lambda learner: arrive(learner, cells01), new)
    crowd.extend(new)
    uids = {uid_of(learner.name): learner.name for learner in crowd}
    with Sampler(uids) as sampler:
        tuned = in_parallel(lambda learner: fine_tune(learner, cells10), crowd)
    statuses = [a.status for a in arrived] + [s for _, s in tuned]
    return Stage(
        learners=size,
        ready_s=[round(a.ready_s, 1) for a in arrived],
        first_result_s=[round(a.first_result_s, 1) for a in arrived],
        lesson01_s=[round(a.lesson01_s, 1) for a in arrived],
        fine_tuning_s=[round(t, 1) for t, _ in tuned],
        idle_mib=mib([a.idle for a in arrived]),
        after01_mib=mib([a.after01 for a in arrived]),
        peak10_mib=mib(list(sampler.peak.values())),
        min_available_gib=round(sampler.min_available / GIB, 1),
        kernel_deaths=sum(s == "dead" for s in statuses),
        failed=[s for s in statuses if s != "ok"],
    )


def submit_and_grade(h: hub.Hub, crowd: list[Learner]) -> dict[str, object]:
    """Every learner fetches, answers and submits lesson 01; the teacher collects and autogrades
    every submission, two at a time. Lost: submitted, but not graded."""

    def submit(learner: Learner) -> bool:
        if not learner.fetch(ASSIGNMENT):
            return False
        learner.answer(ASSIGNMENT)
        return bool(learner.assignment("submit", ASSIGNMENT).json().get("success"))

    submitted = [lr.name for lr, ok in zip(crowd, in_parallel(submit, crowd), strict=True) if ok]
    start = time.monotonic()
    collected = as_teacher(h, ["nbgrader", "collect", ASSIGNMENT])
    grade = ["nbgrader", "autograde", ASSIGNMENT, "--student"]
    graded = in_parallel(lambda name: as_teacher(h, [*grade, name]), submitted, workers=2)
    seconds = time.monotonic() - start
    with Gradebook(f"sqlite:///{teacher_course(TEACHER) / 'gradebook.db'}") as gradebook:
        full = gradebook.find_assignment(ASSIGNMENT).max_score
        scores = {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}
    return {
        "submitted": len(submitted),
        "not_submitted": sorted({lr.name for lr in crowd} - set(submitted)),
        "graded": sum(name in scores for name in submitted),
        "lost": sorted(set(submitted) - set(scores)),
        "not_full_marks": sorted(n for n in submitted if scores.get(n) != full),
        "collect_ok": collected.returncode == 0,
        "autograde_failures": sum(done.returncode != 0 for done in graded),
        "collect_and_autograde_s": round(seconds, 1),
    }


def breaches(crowd: list[Learner]) -> list[str]:
    """Each learner tries to read the next one's work and the teacher's course: what succeeded."""
    course = teacher_course(TEACHER)
    inbound = crowd[0].hub.inbound
    found = []
    for learner, other in zip(crowd, crowd[1:] + crowd[:1], strict=True):
        for attempt in (
            f"open({str(hub.home(other.name) / 'lessons' / (ASSIGNMENT + '.ipynb'))!r}).read()",
            f"import os; os.listdir({str(course / 'source')!r})",
            f"import os; os.listdir({str(inbound)!r})",
        ):
            if other is not learner and as_account(learner.name, attempt).returncode == 0:
                found.append(f"{learner.name}: {attempt}")
    return found


def limit_from_time(sizes: Sequence[int], seconds: Sequence[float]) -> int | None:
    """The class size at which ``seconds`` (a median time per size) reach the autograder's
    per-cell limit, from a straight line through the sizes that share the cores (at least as many
    learners as cores: below that, each has a core of its own); None without two such sizes."""
    cores = os.cpu_count() or 1
    points = [(n, t) for n, t in zip(sizes, seconds, strict=True) if n >= cores]
    if len({n for n, _ in points}) < 2:
        return None
    slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
    if slope <= 0:
        return None
    return int((classroom.CELL_TIMEOUT_S - intercept) / slope)


def sizing(stages: list[Stage]) -> dict[str, dict[str, float | int | None]]:
    """Learners per GiB and per core, for lessons 01 and 10, from the stages."""
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    med = statistics.median
    measured = {  # lesson: (MiB per learner, class sizes, median seconds at each size)
        "01": (
            max(s.after01_mib for s in stages),
            [len(s.lesson01_s) for s in stages],  # the learners who arrived together
            [med(s.lesson01_s) for s in stages],
        ),
        "10": (
            max(s.peak10_mib for s in stages),
            [s.learners for s in stages],
            [med(s.fine_tuning_s) for s in stages],
        ),
    }
    table: dict[str, dict[str, float | int | None]] = {}
    for lesson, (per_learner, sizes, seconds) in measured.items():
        by_time = limit_from_time(sizes, seconds)
        table[lesson] = {
            "mib_per_learner": per_learner,
            "learners_per_gib": round(1024 / per_learner, 1),
            "learners_by_memory": int((total_gib - RESERVE_GIB) * 1024 / per_learner),
            "learners_by_time": by_time,
            "learners_per_core": None
            if by_time is None
            else round(by_time / (os.cpu_count() or 1), 1),
        }
    return table


STAGE_HEADER = (
    "learners", "ready s (median / max)", "first result s", "lesson 01 s",
    "fine-tuning cell s (median / max)", "MiB per learner: idle / after 01 / peak in 10",
    "free GiB, least", "kernel deaths",
)  # fmt: skip
SIZING_HEADER = (
    "lesson", "MiB per learner", "learners per GiB", "learners by memory", "learners by time",
    "learners per core",
)  # fmt: skip


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [header, ["---"] * len(header), *rows]
    return ["| " + " | ".join(map(str, row)) + " |" for row in cells]


def report(result: dict[str, Any]) -> str:
    """The stages and the sizing as Markdown tables."""
    med = statistics.median
    rows = [
        (s.learners, f"{med(s.ready_s):.1f} / {max(s.ready_s):.1f}", f"{med(s.first_result_s):.1f}",
         f"{med(s.lesson01_s):.1f}", f"{med(s.fine_tuning_s):.1f} / {max(s.fine_tuning_s):.1f}",
         f"{s.idle_mib:.0f} / {s.after01_mib:.0f} / {s.peak10_mib:.0f}", s.min_available_gib,
         s.kernel_deaths)
        for s in (Stage(**d) for d in result["stages"])
    ]  # fmt: skip
    sizes = [(lesson, *row.values()) for lesson, row in result["sizing"].items()]
    return "\n".join([*markdown(STAGE_HEADER, rows), "", *markdown(SIZING_HEADER, sizes)])


def ramp(h: hub.Hub, sizes: Sequence[int]) -> tuple[list[Learner], list[Stage], str]:
    """The stages, until the sizes end or the machine runs out; why it stopped ('' if not)."""
    crowd: list[Learner] = []
    stages: list[Stage] = []
    cells01 = lesson_cells("01", through='check("mask_tokens"')
    cells10 = lesson_cells("10", through=FINE_TUNING)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for size in sizes:
        if stages and size * stages[-1].peak10_mib * 2**20 > total - RESERVE_GIB * GIB:
            return crowd, stages, f"memory: {size} learners would need more than the machine has"
        stages.append(run_stage(h, crowd, size, cells01, cells10))
        print(json.dumps(asdict(stages[-1])), flush=True)
    return crowd, stages, ""


def load_test(hub_dir: Path, sizes: Sequence[int], mem_limit: str) -> dict[str, Any]:
    names = [f"{PREFIX}{i:03d}" for i in range(max(sizes))]
    settings = {"LMLESSONS_HUB_MEM_LIMIT": mem_limit}
    with running_class(names, TEACHER, hub_dir=hub_dir, settings=settings) as h:
        crowd, stages, stopped = ramp(h, sizes)
        grading = submit_and_grade(h, crowd)
        found = breaches(crowd)
    return {
        "cores": os.cpu_count(),
        "mem_limit": mem_limit,
        "stages": [asdict(s) for s in stages],
        "stopped": stopped,
        "grading": grading,
        "breaches": found,
        "sizing": sizing(stages),
    }


def failures(result: dict[str, Any]) -> list[str]:
    """What makes the load test fail."""
    grading, stages = result["grading"], [Stage(**d) for d in result["stages"]]
    named = {
        "lost submissions": grading["lost"],
        "could not submit": grading["not_submitted"],
        "not full marks": grading["not_full_marks"],
        "isolation breaches": result["breaches"],
    }
    problems = [f"{what}: {names}" for what, names in named.items() if names]
    problems += [f"{s.learners} learners: {s.failed}" for s in stages if s.failed]
    if max(s.learners for s in stages) < 20 and not result["stopped"]:
        problems.append("fewer than 20 learners, and the machine did not run out")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.hub_load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--learners", default="1,4,10,20", help="the class sizes of the ramp")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the hub's folder (kept)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the figures, as JSON")
    parser.add_argument("--mem-limit", default="2G", help="each learner's memory limit")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run as root: the hub makes an account per learner")
    sizes = sorted({int(n) for n in args.learners.split(",")})
    result = load_test(args.dir, sizes, args.mem_limit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(report(result))
    print(f"stopped early: {result['stopped']}" if result["stopped"] else "every class size ran")
    print(f"grading: {result['grading']}\nfigures: {args.out}")
    problems = failures(result)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
