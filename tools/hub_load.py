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
lost or not taken, a kernel died, a cell raised, a learner read what was not theirs, or the ramp
ended below 20 learners with memory to spare. A learner who is slow (a cell past its time limit)
or fails for the machine's sake (a server that did not start, a kernel that could not be reached)
is a result of the stage, counted in its row, never a traceback. ``--summarise A.json B.json``
prints the table of two or more runs: the spread between them and the largest class that held in
all of them.

Memory is PSS (``/proc/<pid>/smaps_rollup``): a process's private memory plus its share of the
pages it shares (torch's libraries, loaded once for every learner), so the learners' figures add
up to what the class uses.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from tools import classroom, hub, leftovers
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
    slow: int  # learners with a cell past its time limit
    failed: int  # learners who could not go on: no server, no kernel, a wrong or raising cell
    raised: int  # of those, learners whose cell raised or whose check failed: the course's fault
    problems: list[str]  # what went wrong, a line per learner (empty when every learner held)

    @property
    def held(self) -> bool:
        """Every learner of the stage ran every cell, in time, in a kernel that lived."""
        return not (self.kernel_deaths or self.slow or self.failed)


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def mib(values: Sequence[int]) -> float:
    return round(statistics.median(values) / 2**20, 0) if values else 0.0


def median(values: Sequence[float]) -> float:
    """The median of the measured ``values`` (a learner who failed has none: NaN)."""
    measured = [v for v in values if not math.isnan(v)]
    return statistics.median(measured) if measured else math.nan


def largest(values: Sequence[float]) -> float:
    measured = [v for v in values if not math.isnan(v)]
    return max(measured) if measured else math.nan


@dataclass
class Arrival:
    """One learner's start: seconds to a ready server and to the first result, memory (bytes)."""

    ready_s: float
    first_result_s: float
    lesson01_s: float
    idle: int
    after01: int
    status: str
    problem: str = ""


T = TypeVar("T")


def as_result(fn: Callable[[Learner], T], failed: Callable[[str], T]) -> Callable[[Learner], T]:
    """``fn`` for one learner, where what goes wrong for the machine's sake (a refused login, a
    server that never started, a request that timed out) becomes ``failed(why)``: a result of the
    stage, not a traceback that ends the load test with no figures."""

    def run(learner: Learner) -> T:
        try:
            return fn(learner)
        except Exception as exc:  # any failure of one learner is that learner's result
            return failed(f"{learner.name}: {type(exc).__name__}: {exc}"[:300])

    return run


def arrive(learner: Learner, cells: Sequence[str]) -> Arrival:
    """Log in, start the server and a kernel, run lesson 01 up to its checked exercise."""
    start = time.monotonic()
    if learner.login().status_code != 302:
        raise RuntimeError("the hub refused the class password")
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
    problem = "" if status == "ok" else f"{learner.name}: lesson 01 {status}"
    return Arrival(ready, first_s, first.seconds + rest.seconds, idle, after, status, problem)


def fine_tune(learner: Learner, cells: Sequence[str]) -> tuple[float, str]:
    """Lesson 10 in a fresh kernel, up to its fine-tuning cell: (that cell's seconds, status)."""
    learner.server("DELETE", f"/api/kernels/{learner.kernel}")
    learner.start_kernel()
    before = learner.run_cells(cells[:-1])
    if before.status != "ok":
        return before.seconds, before.status
    cell = learner.execute(cells[-1], timeout=FINE_TUNING_TIMEOUT_S)
    return cell.seconds, cell.status


SLOW = {"timeout"}  # a cell past its time limit
DEAD = {"dead"}  # the server reported the kernel dead or restarting
RAISED = {"error", "wrong"}  # a cell raised, or lesson 01's check did not pass


def run_stage(
    h: hub.Hub, crowd: list[Learner], size: int, cells01: list[str], cells10: list[str]
) -> Stage:
    """Grow the class to ``size`` learners (step 1), then all of them run lesson 10 (step 2)."""
    new = [Learner(h, f"{PREFIX}{i:03d}") for i in range(len(crowd), size)]
    no_arrival = partial(Arrival, math.nan, math.nan, math.nan, 0, 0, "failed")
    arrived = in_parallel(as_result(partial(arrive, cells=cells01), no_arrival), new)
    crowd.extend(new)
    uids = {uid_of(learner.name): learner.name for learner in crowd}
    with Sampler(uids) as sampler:
        tuned = in_parallel(as_result(partial(fine_tune, cells=cells10), failed_cell), crowd)
    by_learner = {learner.name: a.status for learner, a in zip(new, arrived, strict=True)}
    problems = [a.problem for a in arrived if a.problem]
    for learner, (_, status) in zip(crowd, tuned, strict=True):
        if status != "ok":
            problems.append(f"{learner.name}: lesson 10 {status}")
            by_learner[learner.name] = worst(by_learner.get(learner.name, "ok"), status)
    statuses = list(by_learner.values())
    return Stage(
        learners=size,
        ready_s=[round(a.ready_s, 1) for a in arrived],
        first_result_s=[round(a.first_result_s, 1) for a in arrived],
        lesson01_s=[round(a.lesson01_s, 1) for a in arrived],
        fine_tuning_s=[round(t, 1) for t, _ in tuned],
        idle_mib=mib([a.idle for a in arrived if a.status == "ok"]),
        after01_mib=mib([a.after01 for a in arrived if a.status == "ok"]),
        peak10_mib=mib(list(sampler.peak.values())),
        min_available_gib=round(sampler.min_available / GIB, 1),
        kernel_deaths=sum(s in DEAD for s in statuses),
        slow=sum(s in SLOW for s in statuses),
        failed=sum(s not in SLOW | DEAD | {"ok"} for s in statuses),
        raised=sum(s in RAISED for s in statuses),
        problems=problems,
    )


def failed_cell(why: str) -> tuple[float, str]:
    return math.nan, f"failed ({why})"


def worst(a: str, b: str) -> str:
    """Of two statuses of one learner, the one that counts: dead, then failed, then slow."""
    rank = {"ok": 0, **dict.fromkeys(SLOW, 1)}
    return max(a, b, key=lambda s: 3 if s in DEAD else rank.get(s, 2))


def submit_and_grade(h: hub.Hub, crowd: list[Learner]) -> dict[str, object]:
    """Every learner fetches, answers and submits lesson 01; the teacher collects and autogrades
    every submission, two at a time. Lost: submitted, but not graded."""

    def submit(learner: Learner) -> bool:
        if not learner.fetch(ASSIGNMENT):
            return False
        learner.answer(ASSIGNMENT)
        return bool(learner.assignment("submit", ASSIGNMENT).json().get("success"))

    done = in_parallel(as_result(submit, lambda why: False), crowd)
    submitted = [lr.name for lr, ok in zip(crowd, done, strict=True) if ok]
    start = time.monotonic()
    collected = as_teacher(h, ["nbgrader", "collect", ASSIGNMENT])
    grade = ["nbgrader", "autograde", ASSIGNMENT, "--student"]
    graded = in_parallel(lambda name: as_teacher(h, [*grade, name]), submitted, workers=2)
    seconds = time.monotonic() - start
    from nbgrader.api import Gradebook  # not at the top: a second to import, for one call

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


def time_line(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float] | None:
    """(seconds per extra learner, intercept): a straight line through the median times of the
    sizes that share the cores (at least as many learners as cores: below that, each has a core
    of its own); None without two such sizes."""
    cores = os.cpu_count() or 1
    points = [(n, t) for n, t in zip(sizes, seconds, strict=True) if n >= cores]
    points = [(n, t) for n, t in points if not math.isnan(t)]
    if len({n for n, _ in points}) < 2:
        return None
    return statistics.linear_regression(*zip(*points, strict=True))


def limit_from_time(sizes: Sequence[int], seconds: Sequence[float]) -> int | None:
    """The class size at which ``seconds`` (a median time per size) reach the autograder's
    per-cell limit, on ``time_line``; None without such a line or where time does not grow."""
    line = time_line(sizes, seconds)
    if line is None or line[0] <= 0:
        return None
    slope, intercept = line
    return int((classroom.CELL_TIMEOUT_S - intercept) / slope)


def sizing(stages: list[Stage]) -> dict[str, dict[str, float | int | None]]:
    """Learners per GiB and per core, and seconds per extra learner, for lessons 01 and 10."""
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    measured = {  # lesson: (MiB per learner, class sizes, median seconds at each size)
        "01": (
            max(s.after01_mib for s in stages),
            [len(s.lesson01_s) for s in stages],  # the learners who arrived together
            [median(s.lesson01_s) for s in stages],
        ),
        "10": (
            max(s.peak10_mib for s in stages),
            [s.learners for s in stages],
            [median(s.fine_tuning_s) for s in stages],
        ),
    }
    table: dict[str, dict[str, float | int | None]] = {}
    for lesson, (per_learner, sizes, seconds) in measured.items():
        by_time, line = limit_from_time(sizes, seconds), time_line(sizes, seconds)
        table[lesson] = {
            "mib_per_learner": per_learner,
            "learners_per_gib": round(1024 / per_learner, 1),
            "learners_by_memory": int((total_gib - RESERVE_GIB) * 1024 / per_learner),
            "learners_by_time": by_time,
            "learners_per_core": None
            if by_time is None
            else round(by_time / (os.cpu_count() or 1), 1),
            "s_per_extra_learner": None if line is None else round(line[0], 1),
        }
    return table


STAGE_HEADER = (
    "learners", "held", "slow / failed / kernel deaths", "ready s (median / max)",
    "first result s", "lesson 01 s", "fine-tuning cell s (median / max)",
    "MiB per learner: idle / after 01 / peak in 10", "free GiB, least",
)  # fmt: skip
SIZING_HEADER = (
    "lesson", "MiB per learner", "learners per GiB", "learners by memory", "learners by time",
    "learners per core", "s per extra learner",
)  # fmt: skip


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [header, ["---"] * len(header), *rows]
    return ["| " + " | ".join(map(str, row)) + " |" for row in cells]


def stage_row(s: Stage) -> tuple[object, ...]:
    return (
        s.learners, "yes" if s.held else "no", f"{s.slow} / {s.failed} / {s.kernel_deaths}",
        f"{median(s.ready_s):.1f} / {largest(s.ready_s):.1f}", f"{median(s.first_result_s):.1f}",
        f"{median(s.lesson01_s):.1f}",
        f"{median(s.fine_tuning_s):.1f} / {largest(s.fine_tuning_s):.1f}",
        f"{s.idle_mib:.0f} / {s.after01_mib:.0f} / {s.peak10_mib:.0f}", s.min_available_gib,
    )  # fmt: skip


def report(result: dict[str, Any]) -> str:
    """The stages and the sizing as Markdown tables."""
    rows = [stage_row(Stage(**d)) for d in result["stages"]]
    sizes = [(lesson, *row.values()) for lesson, row in result["sizing"].items()]
    return "\n".join([*markdown(STAGE_HEADER, rows), "", *markdown(SIZING_HEADER, sizes)])


def spread(values: Sequence[float], digits: int = 1) -> str:
    """``low to high`` of one figure over the runs (one value when they agree)."""
    low, high = round(min(values), digits), round(max(values), digits)
    return f"{low:g}" if low == high else f"{low:g} to {high:g}"


def summary(results: Sequence[dict[str, Any]]) -> str:
    """Two or more runs of the load test: each class size's figures as their spread over the
    runs, whether it held in every run, and the largest class that did (what a teacher plans by).
    A size that some run did not reach (memory ran out first) did not hold."""
    runs = [{d["learners"]: Stage(**d) for d in r["stages"]} for r in results]
    sizes = sorted(set().union(*runs))
    header = ("learners", "held in every run", "slow / failed / kernel deaths, most",
              "fine-tuning cell s, median", "fine-tuning cell s, max",
              "MiB per learner, peak in 10", "lesson 01 s, median")  # fmt: skip
    rows, held = [], []
    for n in sizes:
        at = [run[n] for run in runs if n in run]
        every = len(at) == len(runs) and all(s.held for s in at)
        held += [n] if every else []
        worst_counts = max((s.slow, s.failed, s.kernel_deaths) for s in at)
        rows.append((
            n, "yes" if every else "no", " / ".join(map(str, worst_counts)),
            spread([median(s.fine_tuning_s) for s in at]),
            spread([largest(s.fine_tuning_s) for s in at]), spread([s.peak10_mib for s in at], 0),
            spread([median(s.lesson01_s) for s in at]),
        ))  # fmt: skip
    extra = [r["sizing"]["10"]["s_per_extra_learner"] for r in results]
    lines = markdown(header, rows)
    lines.append(f"\nruns: {len(results)}; the largest class that held in every run: "
                 f"{max(held) if held else 'none'}")  # fmt: skip
    if None not in extra:
        lines.append(f"lesson 10's fine-tuning cell, per extra learner beyond the cores: "
                     f"{spread(extra)} s")  # fmt: skip
    return "\n".join(lines)


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


def load_test(hub_dir: Path | None, sizes: Sequence[int], mem_limit: str) -> dict[str, Any]:
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
    """What makes the load test fail: work lost or not taken, wrong marks, a breach, a kernel that
    died or a cell that raised. Slow learners, and learners the machine could not serve in time,
    are figures of their stage (``report``), not failures."""
    grading, stages = result["grading"], [Stage(**d) for d in result["stages"]]
    named = {
        "lost submissions": grading["lost"],
        "could not submit": grading["not_submitted"],
        "not full marks": grading["not_full_marks"],
        "isolation breaches": result["breaches"],
    }
    problems = [f"{what}: {names}" for what, names in named.items() if names]
    problems += [
        f"{s.learners} learners: {s.kernel_deaths} kernel deaths, {s.raised} raised: {s.problems}"
        for s in stages
        if s.kernel_deaths or s.raised
    ]
    if max(s.learners for s in stages) < 20 and not result["stopped"]:
        problems.append("fewer than 20 learners, and the machine did not run out")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.hub_load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--learners", default="1,4,10,20", help="the class sizes of the ramp")
    parser.add_argument(
        "--dir", type=Path, help="the hub's folder, kept (default: a temp folder, removed after)"
    )
    parser.add_argument(
        "--summarise", nargs="+", type=Path, metavar="JSON", help="print the table of earlier runs"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the figures, as JSON")
    parser.add_argument("--mem-limit", default="2G", help="each learner's memory limit")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summary([json.loads(path.read_text()) for path in args.summarise]))
        return 0
    if os.geteuid() != 0:
        parser.error("run as root: the hub makes an account per learner")
    sizes = sorted({int(n) for n in args.learners.split(",")})
    leftovers.begin()
    try:
        result = load_test(args.dir, sizes, args.mem_limit)
    finally:
        left = leftovers.leftovers()
        if left:  # what the class left running, made or wrote: named, then removed
            print(f"FAILED: the load test left behind:\n{left.describe()}", file=sys.stderr)
            leftovers.clean(left)
        leftovers.end()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(report(result))
    print(f"stopped early: {result['stopped']}" if result["stopped"] else "every class size ran")
    print(f"grading: {result['grading']}\nfigures: {args.out}")
    problems = failures(result) + (["the load test left something behind"] if left else [])
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
