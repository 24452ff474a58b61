"""tools.warm_start: the shipped curves are what the tool records (a 200-step prefix re-run here
lands on the recorded probe within float tolerance), they support what lesson 02 says about
them, and the tool writes only where asked."""

from __future__ import annotations

import json

import pytest
import torch

import tools.warm_start as warm_start
from lmlessons.course.checkpoints import CHECKPOINT_DIR, warm_start_curves
from lmlessons.widgets.warm_start import plot_warm_start, warm_start_table
from tools.pretrain import RECIPES

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

CURVES = warm_start_curves()
RUNS = {run["arm"]: run for run in CURVES["runs"]}


def _probe(arm: str, step: int) -> dict:
    run = RUNS[arm]
    return run["probes"][run["steps"].index(step)]


def test_both_runs_follow_the_bert_recipe_for_the_same_number_of_steps() -> None:
    recipe = RECIPES["bert"]
    total = recipe.causal_warm_start_steps + recipe.max_steps
    assert RUNS["warm"]["warm_start_steps"] == recipe.causal_warm_start_steps
    assert RUNS["scratch"]["warm_start_steps"] == 0
    for run in RUNS.values():
        assert run["steps"][0] == 0 and run["steps"][-1] == total
        assert run["steps"] == sorted(set(run["steps"]))
        assert len(run["probes"]) == len(run["steps"])
    assert _probe("scratch", 0) == _probe("warm", 0)  # the same seed: the same untrained model


def test_the_warm_start_wins_on_every_measure_lesson_02_names() -> None:
    end = RUNS["warm"]["steps"][-1]
    scratch, warm = _probe("scratch", end), _probe("warm", end)
    assert warm["mlm_loss"] < scratch["mlm_loss"] - 0.3
    assert warm["mlm_top5_accuracy"] > scratch["mlm_top5_accuracy"] + 0.05
    assert warm["attention_uniformity"] < scratch["attention_uniformity"]


@pytest.mark.slow
def test_a_200_step_prefix_reproduces_the_recorded_probe() -> None:
    total = RUNS["scratch"]["steps"][-1]
    rerun = warm_start._run("scratch", 0, total, 200, seed=0, prefix=200)
    assert rerun["steps"] == [0, 200]
    for step, probe in zip(rerun["steps"], rerun["probes"]):
        recorded = _probe("scratch", step)
        for key in ("mlm_loss", "mlm_accuracy", "mlm_top5_accuracy", "attention_uniformity"):
            assert probe[key] == pytest.approx(recorded[key], abs=0.02), (step, key)


def test_attention_uniformity_is_one_for_uniform_rows_and_lower_for_peaked_ones() -> None:
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    uniform = mask[:, None, None, :].float().expand(2, 1, 4, 4)
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert warm_start._attention_uniformity((uniform,), mask) == pytest.approx(1.0)
    peaked = torch.eye(4)[None, None].expand(2, 1, 4, 4)
    assert warm_start._attention_uniformity((peaked,), mask) == pytest.approx(0.0, abs=1e-6)


def test_plot_and_table_read_the_curves() -> None:
    fig = plot_warm_start(CURVES)
    assert len(fig.axes) == 3 and all(len(ax.lines) >= 2 for ax in fig.axes)
    table = warm_start_table(CURVES, [0, RUNS["warm"]["steps"][-1]])
    runs = [line.split()[1] for line in table.splitlines()[1:]]
    assert runs == ["scratch", "scratch", "warm"]
    with pytest.raises(ValueError, match="curves must hold the runs"):
        plot_warm_start({"runs": []})


def test_the_floor_is_a_level_line_on_the_loss_panel_only() -> None:
    plain, with_floor = plot_warm_start(CURVES), plot_warm_start(CURVES, floor=5.75)
    assert len(with_floor.axes[0].lines) == len(plain.axes[0].lines) + 1
    level = [ln for ln in with_floor.axes[0].lines if set(ln.get_ydata()) == {5.75}]
    assert len(level) == 1
    assert [len(ax.lines) for ax in with_floor.axes[1:]] == [len(ax.lines) for ax in plain.axes[1:]]


def test_the_tool_writes_only_where_asked(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(warm_start, "record", lambda every: {"seconds": 0.0, "every": every})
    before = {p: p.stat().st_mtime_ns for p in CHECKPOINT_DIR.iterdir()}
    assert warm_start.main(["--out", str(tmp_path), "--every", "50"]) == 0
    written = json.loads((tmp_path / "bert.warm_start_curves.json").read_text())
    assert written == {"seconds": 0.0, "every": 50}
    assert {p: p.stat().st_mtime_ns for p in CHECKPOINT_DIR.iterdir()} == before
