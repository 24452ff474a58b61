"""The load test's arithmetic (tools/hub_load.py), without a hub: where time runs out, the sizing
table, and what makes ``make test-hub`` fail."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from tools import hub_load
from tools.classroom import CELL_TIMEOUT_S


def stage(learners: int, fine_tuning_s: float, peak: float = 800.0, **kw: object) -> dict:
    made = hub_load.Stage(
        learners=learners, ready_s=[3.0], first_result_s=[4.0], lesson01_s=[5.0],
        fine_tuning_s=[fine_tuning_s], idle_mib=170.0, after01_mib=500.0, peak10_mib=peak,
        min_available_gib=20.0, kernel_deaths=0, slow=0, failed=0, raised=0, problems=[],
    )  # fmt: skip
    return asdict(made) | kw


def result(stages: list[dict], **kw: object) -> dict:
    grading = {"lost": [], "not_full_marks": [], "not_submitted": []}
    return {"stages": stages, "stopped": "", "grading": grading, "breaches": []} | kw


@pytest.fixture(autouse=True)
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_load.os, "cpu_count", lambda: 2)


def test_time_runs_out_where_the_line_through_the_shared_sizes_crosses_the_limit() -> None:
    # 13 s per learner beyond the cores: the limit is crossed between 9 and 10 learners
    assert hub_load.limit_from_time([4, 10, 20], [52.0, 130.0, 260.0]) == 9
    # sizes below the cores say nothing about sharing them: (1, 26 s) is left out
    assert hub_load.limit_from_time([1, 4, 10], [26.0, 52.0, 130.0]) == 9
    assert hub_load.limit_from_time([1, 2], [26.0, 28.0]) is None  # one shared size only
    assert hub_load.limit_from_time([4, 10], [60.0, 60.0]) is None  # no growth, no limit
    assert hub_load.limit_from_time([4, 8], [CELL_TIMEOUT_S - 4, CELL_TIMEOUT_S + 4]) == 6


def test_sizing_takes_the_worst_memory_and_divides_the_time_limit_by_the_cores() -> None:
    stages = [hub_load.Stage(**stage(n, 13.0 * n, peak=p)) for n, p in ((4, 800.0), (10, 1024.0))]
    table = hub_load.sizing(stages)
    assert table["10"]["mib_per_learner"] == 1024.0 and table["10"]["learners_per_gib"] == 1.0
    assert table["10"]["learners_by_time"] == 9 and table["10"]["learners_per_core"] == 4.5


def test_a_lost_submission_a_breach_a_dead_kernel_or_a_raising_cell_fails_the_load_test() -> None:
    full = [stage(n, 10.0) for n in (1, 4, 10, 20)]
    assert hub_load.failures(result(full)) == []
    lost = result(full, grading={"lost": ["lmload-003"], "not_full_marks": [], "not_submitted": []})
    assert hub_load.failures(lost) == ["lost submissions: ['lmload-003']"]
    assert hub_load.failures(result(full, breaches=["a read b"]))
    unfetched = {"lost": [], "not_full_marks": [], "not_submitted": ["lmload-007"]}
    assert hub_load.failures(result(full, grading=unfetched)) == [
        "could not submit: ['lmload-007']"
    ]
    dead = stage(20, 10.0, kernel_deaths=1, problems=["lmload-019: lesson 10 dead"])
    assert hub_load.failures(result([*full[:3], dead]))
    raised = stage(20, 10.0, failed=1, raised=1, problems=["lmload-004: lesson 01 error"])
    assert hub_load.failures(result([*full[:3], raised]))


def test_a_slow_or_unserved_learner_is_a_figure_of_its_stage_not_a_failure() -> None:
    busy = stage(20, 900.0, slow=3, failed=2, problems=["lmload-011: lesson 10 unreachable"])
    full = [*(stage(n, 10.0) for n in (1, 4, 10)), busy]
    assert hub_load.failures(result(full)) == []
    assert not hub_load.Stage(**busy).held and hub_load.Stage(**full[0]).held
    assert "| 20 | no | 3 / 2 / 0 |" in hub_load.report(
        {"stages": full, "sizing": hub_load.sizing([hub_load.Stage(**s) for s in full])}
    )


def test_a_learner_who_fails_is_a_result_with_the_reason() -> None:
    def refused(learner: object) -> str:
        raise TimeoutError("the server was not ready in 300 s")

    class Named:
        name = "lmload-005"

    got = hub_load.as_result(refused, lambda why: f"failed ({why})")(Named())
    assert got == "failed (lmload-005: TimeoutError: the server was not ready in 300 s)"
    assert hub_load.worst("timeout", "dead") == "dead" and hub_load.worst("ok", "timeout") == (
        "timeout"
    )
    assert hub_load.worst("timeout", "unreachable") == "unreachable"


def test_fewer_than_20_learners_fail_unless_memory_ran_out() -> None:
    few = [stage(n, 10.0) for n in (1, 4, 10)]
    assert hub_load.failures(result(few))
    assert hub_load.failures(result(few, stopped="memory: 20 learners would need more")) == []


def test_the_report_has_a_row_per_stage_and_per_lesson() -> None:
    stages = [stage(n, 13.0 * n) for n in (4, 10)]
    text = hub_load.report(
        {"stages": stages, "sizing": hub_load.sizing([hub_load.Stage(**s) for s in stages])}
    )
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 2 + 2 + 2  # two headers and rules, two stages, two lessons
    assert "| 10 | yes | 0 / 0 / 0 | 3.0 / 3.0 | 4.0 | 5.0 | 130.0 / 130.0 |" in text
    assert text.rstrip().endswith("| 13.0 |")  # lesson 10: 13 s per extra learner


def run_of(*stages: dict) -> dict:
    made = [hub_load.Stage(**s) for s in stages]
    return {"stages": list(stages), "sizing": hub_load.sizing(made)}


def test_the_summary_of_runs_holds_a_size_only_where_every_run_held_it() -> None:
    first = run_of(stage(4, 52.0), stage(10, 130.0), stage(20, 260.0))
    second = run_of(stage(4, 50.0), stage(10, 140.0), stage(20, 900.0, slow=2))
    text = hub_load.summary([first, second])
    assert "| 10 | yes | 0 / 0 / 0 | 130 to 140 |" in text
    assert "| 20 | no | 2 / 0 / 0 | 260 to 900 |" in text
    assert "the largest class that held in every run: 10" in text
    short = run_of(stage(4, 52.0), stage(10, 130.0))  # memory ran out before 20
    assert "held in every run: 10" in hub_load.summary([first, short])
    assert "| 20 | no |" in hub_load.summary([first, short])
    assert "held in every run: 20" in hub_load.summary([first, first])
