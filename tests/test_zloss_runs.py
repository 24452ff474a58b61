"""The z-loss lesson's recorded runs (``lmlessons.course.zloss_runs``, ``tools.zloss_runs``).

1. The loader: the shipped record loads; a malformed one is refused naming the missing key, a
   missing one naming the command that records it.
2. The pieces: :func:`logit_stats` against a plain-Python loop, the z-loss really enters the
   loss (a large coefficient pulls ``log Z`` down), :func:`train_steps` logs what it says.
3. The summary on a hand-made record, and the claims a lesson makes about the shipped record,
   each checked in every seed it summarises.
4. A short real run has the record's schema; the tool's arguments.
"""

from __future__ import annotations

import math

import pytest
import torch

from lmlessons.course.records import write_record
from lmlessons.course.training import train_steps
from lmlessons.course.zloss_runs import (
    ZLOSS_COMMAND,
    ZLOSS_FILE,
    ZLOSS_KEYS,
    ZLOSS_RUN_KEYS,
    ZLOSS_SETTINGS,
    logit_stats,
    record_zloss_runs,
    recorded_zloss_runs,
    zloss_figure,
    zloss_run,
    zloss_summary,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(n_embd=32, n_layer=1, n_head=2)
IGNORE = -100


def _run(coefficient: float, seed: int, log_z: list[float], heldout: float = 6.0) -> dict:
    n = len(log_z)
    return {
        "z_loss_coefficient": coefficient,
        "seed": seed,
        "step": list(range(1, n + 1)),
        "lm_loss": [6.0] * n,
        "log_z": log_z,
        "max_abs_logit": [float(i) for i in range(n)],
        "heldout_loss": heldout,
    }


def _record(runs: list[dict]) -> dict:
    return {"settings": dict(ZLOSS_SETTINGS), "seconds": 1, "runs": runs}


# ----------------------------------------------------------------------------- 1. the loader


def test_the_shipped_record_loads_with_every_key():
    data = recorded_zloss_runs()
    assert set(ZLOSS_KEYS) <= set(data)
    for run in data["runs"]:
        assert set(ZLOSS_RUN_KEYS) <= set(run)
        n = len(run["step"])
        assert n > 1 and all(len(run[k]) == n for k in ("lm_loss", "log_z", "max_abs_logit"))


@pytest.mark.parametrize("key", ZLOSS_KEYS)
def test_a_record_without_a_top_level_key_is_refused_naming_it(tmp_path, key):
    record = _record([_run(0.0, 0, [7.0, 7.5])])
    del record[key]
    write_record(record, tmp_path, ZLOSS_FILE)
    with pytest.raises(ValueError, match=key):
        recorded_zloss_runs(directory=tmp_path)


@pytest.mark.parametrize("key", ZLOSS_RUN_KEYS)
def test_a_run_without_a_key_is_refused_naming_the_run_and_the_key(tmp_path, key):
    bad = _run(1e-4, 1, [7.0, 7.5])
    del bad[key]
    write_record(_record([_run(0.0, 0, [7.0, 7.5]), bad]), tmp_path, ZLOSS_FILE)
    with pytest.raises(ValueError, match=rf"\['runs'\]\[1\] lacks the keys \['{key}'\]"):
        recorded_zloss_runs(directory=tmp_path)


def test_a_record_without_runs_or_not_a_dict_is_refused(tmp_path):
    write_record(_record([]), tmp_path, ZLOSS_FILE)
    with pytest.raises(ValueError, match="runs"):
        recorded_zloss_runs(directory=tmp_path)
    (tmp_path / ZLOSS_FILE).write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(TypeError, match="JSON object"):
        recorded_zloss_runs(directory=tmp_path)


def test_a_missing_record_names_the_command_that_makes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tools\.zloss_runs"):
        recorded_zloss_runs(directory=tmp_path)
    assert "--out lmlessons/data/zloss" in ZLOSS_COMMAND


# ----------------------------------------------------------------------------- 2. the pieces


def test_logit_stats_against_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 5, generator=g) * 3  # (B, T, V)
    labels = torch.tensor([[1, 2, IGNORE, 3], [4, IGNORE, IGNORE, IGNORE]])
    # counted: position t when labels[t + 1] != -100: (0, 0), (0, 2) only
    counted = [(0, 0), (0, 2)]
    lse = [math.log(sum(math.exp(x) for x in logits[b, t].tolist())) for b, t in counted]
    top = max(abs(x) for b, t in counted for x in logits[b, t].tolist())
    stats = logit_stats(logits, labels)
    assert stats["log_z"] == pytest.approx(sum(lse) / len(lse), rel=1e-5)
    assert stats["max_abs_logit"] == pytest.approx(top, rel=1e-6)


def test_logit_stats_refuses_a_batch_without_a_counted_position():
    with pytest.raises(ValueError, match="labels"):
        logit_stats(torch.zeros(1, 3, 4), torch.tensor([[1, IGNORE, IGNORE]]))


def test_train_steps_logs_step_1_and_every_log_every_steps():
    model = torch.nn.Linear(2, 1)
    batches = iter([{"x": torch.ones(1, 2)}] * 10)

    def loss_fn(m, b):
        loss = m(b["x"]).square().sum()
        return loss, {"loss": loss.item()}

    settings = {**ZLOSS_SETTINGS, "max_steps": 7, "log_every": 3, "learning_rate": 1e-2}
    logged = train_steps(model, batches, loss_fn, settings)
    assert logged["step"] == [1, 3, 6]
    assert len(logged["loss"]) == 3 and logged["loss"][-1] < logged["loss"][0]
    assert not model.training


@pytest.mark.slow
def test_a_large_z_loss_pulls_log_z_down():
    settings = {**ZLOSS_SETTINGS, "max_steps": 12, "log_every": 4, "warmup_steps": 0}
    without = zloss_run(0.0, seed=0, settings=settings, model_config=SMALL)
    strong = zloss_run(1.0, seed=0, settings=settings, model_config=SMALL)
    assert without["log_z"][0] == pytest.approx(strong["log_z"][0], abs=1e-5)  # same start
    assert strong["log_z"][-1] < without["log_z"][-1] - 0.3, (strong["log_z"], without["log_z"])


def test_zloss_run_refuses_a_bad_coefficient_naming_it():
    with pytest.raises(ValueError, match="z_loss_coefficient"):
        zloss_run(-1e-4, seed=0)
    with pytest.raises(TypeError, match="z_loss_coefficient"):
        zloss_run("1e-4", seed=0)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- 3. the summary


def test_the_summary_on_a_hand_made_record():
    data = _record(
        [
            _run(0.0, 0, [7.0, 7.2, 7.4, 7.6], heldout=6.0),
            _run(0.0, 1, [7.0, 7.0, 8.0, 8.0], heldout=6.2),
            _run(1e-4, 0, [7.0, 6.0, 6.0, 6.0], heldout=6.1),
        ]
    )
    summary = zloss_summary(data, window=2)
    assert sorted(summary) == [0.0, 1e-4]
    none = summary[0.0]
    assert none["log_z_end"]["per_seed"] == pytest.approx([7.5, 8.0])
    assert none["log_z_rise"]["per_seed"] == pytest.approx([0.5, 1.0])
    assert none["log_z_rise"]["mean"] == pytest.approx(0.75)
    assert none["log_z_rise"]["std"] == pytest.approx(math.sqrt(0.125))
    assert none["heldout_loss"]["mean"] == pytest.approx(6.1)
    assert none["max_abs_logit_end"]["per_seed"] == [3.0, 3.0]
    assert none["log_z_min"]["per_seed"] == [7.0, 7.0]
    assert summary[1e-4]["log_z_min"]["per_seed"] == [6.0]
    assert summary[1e-4]["log_z_rise"] == {"mean": -1.0, "std": 0.0, "per_seed": [-1.0]}
    assert none["seeds"] == [0, 1]


def test_the_figure_draws_three_panels_one_line_per_run():
    data = _record([_run(0.0, 0, [7.0, 7.5]), _run(1e-4, 0, [7.0, 6.5])])
    fig = zloss_figure(data)
    assert len(fig.axes) == 3
    assert all(len(ax.lines) == 2 for ax in fig.axes)


# ----------------------------------------------------------------------------- 4. a real run


@pytest.mark.slow
def test_a_short_real_recording_has_the_shipped_schema(tmp_path):
    shipped = recorded_zloss_runs()
    data = record_zloss_runs(seeds=[0], max_steps=2, log=None)
    write_record(data, tmp_path, ZLOSS_FILE, one_line_lists=True)
    loaded = recorded_zloss_runs(directory=tmp_path)
    assert set(loaded) == set(shipped)
    assert set(loaded["settings"]) == set(shipped["settings"])
    assert [set(r) for r in loaded["runs"]] == [set(shipped["runs"][0])] * 2
    assert [r["z_loss_coefficient"] for r in loaded["runs"]] == [0.0, 1e-4]
    assert loaded["runs"][0]["step"] == [1] and loaded["settings"]["max_steps"] == 2


def test_the_tool_parses_its_arguments(tmp_path):
    from tools.zloss_runs import parse_args

    args = parse_args([])
    assert args.seeds == [0, 1, 2] and args.max_steps is None and args.out is None
    assert args.coefficients == [0.0, 1e-4]
    args = parse_args(["--out", str(tmp_path), "--seeds", "3", "--max-steps", "5"])
    assert args.seeds == [3] and args.max_steps == 5 and args.out == tmp_path
    assert parse_args(["--coefficients", "0"]).coefficients == [0.0]
    with pytest.raises(SystemExit):
        parse_args(["--max-steps", "five"])


# ----------------------------------------------------------------- 3b. the record's claims
# What a lesson may say about the shipped runs, each checked in every run it summarises.


@pytest.fixture(scope="module")
def shipped():
    return recorded_zloss_runs()


def _by(data, coefficient):
    return {r["seed"]: r for r in data["runs"] if r["z_loss_coefficient"] == coefficient}


def test_the_record_holds_both_coefficients_on_the_same_seeds(shipped):
    assert set(_by(shipped, 0.0)) == set(_by(shipped, 1e-4)) and len(_by(shipped, 0.0)) >= 3


def test_log_z_never_drifted_far_from_log_v_in_any_run(shipped, tok):
    """No logit divergence: every logged mean log Z of every run stays within 0.6 of its value
    for uniform logits, log V (where every run starts)."""
    log_v = math.log(len(tok))
    for run in shipped["runs"]:
        assert run["log_z"][0] == pytest.approx(log_v, abs=0.05), run["seed"]
        assert max(abs(v - log_v) for v in run["log_z"]) < 0.6, (run["seed"], run["log_z"])


def test_log_z_dips_early_then_climbs_back_in_every_run(shipped):
    """With and without the z-loss: log Z falls about 0.5 below its start, then climbs back at
    least 0.4 by the end (a rise of the same size in both)."""
    summary = zloss_summary(shipped)
    for coefficient, s in summary.items():
        starts, mins = s["log_z_start"]["per_seed"], s["log_z_min"]["per_seed"]
        ends = s["log_z_end"]["per_seed"]
        for start, low, end in zip(starts, mins, ends):
            assert low < start - 0.45, coefficient
            assert end > low + 0.4, coefficient


def test_a_z_loss_of_1e_4_changes_log_z_far_less_than_the_dip(shipped):
    """Paired by seed: the end log Z with z-loss 1e-4 differs from without by under 0.05, a
    tenth of the early dip; the held-out loss by under 0.06, with no consistent sign."""
    summary = zloss_summary(shipped)
    none, zl = summary[0.0], summary[1e-4]
    dz = [a - b for a, b in zip(zl["log_z_end"]["per_seed"], none["log_z_end"]["per_seed"])]
    dip = min(s - m for s, m in zip(none["log_z_start"]["per_seed"], none["log_z_min"]["per_seed"]))
    assert max(abs(d) for d in dz) < min(0.05, dip / 10), (dz, dip)
    dh = [a - b for a, b in zip(zl["heldout_loss"]["per_seed"], none["heldout_loss"]["per_seed"])]
    assert max(abs(d) for d in dh) < 0.06, dh
    assert min(dh) < 0 < max(dh), dh


def test_the_largest_logit_grows_several_fold_in_every_run(shipped):
    for run in shipped["runs"]:
        assert run["max_abs_logit"][-1] > 4 * run["max_abs_logit"][0], run["seed"]
