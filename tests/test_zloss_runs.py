"""The z-loss lesson's recorded runs (``lmlessons.course.zloss_runs``, ``tools.zloss_runs``).

1. The loader: the shipped record loads; a malformed one is refused naming the missing key, a
   missing one naming the command that records it.
2. The pieces: :func:`logit_stats` against a plain-Python loop; the attention scores against
   transformers' eager attention (their softmax is its ``output_attentions``), the causal and
   padded pairs left out; the z-loss really enters the loss (a large coefficient pulls ``log Z``
   down); :func:`train_steps` logs what it says; the arms and their checks.
3. The summary and the merge on hand-made records, the figure, and the claims a lesson makes
   about the shipped record, each checked in every seed it summarises.
4. A short real recording has the record's schema; the tool's arguments.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from lmlessons.course.models import tiny_gpt2
from lmlessons.course.records import write_record
from lmlessons.course.training import train_steps
from lmlessons.course.zloss_runs import (
    ZLOSS_ARMS,
    ZLOSS_RECORDING,
    ZLOSS_SETTINGS,
    attention_scores,
    captured_qkv,
    check_arm,
    logit_stats,
    max_attention_score,
    merge_zloss_records,
    record_zloss_runs,
    recorded_zloss_runs,
    zloss_figure,
    zloss_run,
    zloss_summary,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(n_embd=32, n_layer=1, n_head=2)
IGNORE = -100


def _run(lr: float, coefficient: float, seed: int, log_z: list[float], heldout: float = 6.0):
    n = len(log_z)
    return {
        "learning_rate": lr,
        "z_loss_coefficient": coefficient,
        "seed": seed,
        "step": list(range(1, n + 1)),
        "lm_loss": [6.0] * n,
        "log_z": log_z,
        "max_abs_logit": [float(i) for i in range(n)],
        "max_attention_score": [10.0**i for i in range(n)],
        "heldout_loss": heldout,
    }


def _record(runs: list[dict], arms: list[dict] | None = None) -> dict:
    settings = {**ZLOSS_SETTINGS, "seeds": [0], "arms": arms or [dict(a) for a in ZLOSS_ARMS]}
    return {"settings": settings, "seconds": 1, "runs": runs}


# ----------------------------------------------------------------------------- 1. the loader


def test_the_shipped_record_loads_with_every_key():
    data = recorded_zloss_runs()
    assert set(ZLOSS_RECORDING.keys) <= set(data)
    logged = ("lm_loss", "log_z", "max_abs_logit", "max_attention_score")
    for run in data["runs"]:
        assert set(ZLOSS_RECORDING.run_keys) <= set(run)
        n = len(run["step"])
        assert n > 1 and all(len(run[k]) == n for k in logged)


@pytest.mark.parametrize("key", ZLOSS_RECORDING.keys)
def test_a_record_without_a_top_level_key_is_refused_naming_it(tmp_path, key):
    record = _record([_run(1e-2, 0.0, 0, [7.0, 7.5])])
    del record[key]
    write_record(record, tmp_path, ZLOSS_RECORDING.file)
    with pytest.raises(ValueError, match=key):
        recorded_zloss_runs(directory=tmp_path)


@pytest.mark.parametrize("key", ZLOSS_RECORDING.run_keys)
def test_a_run_without_a_key_is_refused_naming_the_run_and_the_key(tmp_path, key):
    bad = _run(1e-2, 1e-4, 1, [7.0, 7.5])
    del bad[key]
    write_record(_record([_run(1e-2, 0.0, 0, [7.0, 7.5]), bad]), tmp_path, ZLOSS_RECORDING.file)
    with pytest.raises(ValueError, match=rf"\['runs'\]\[1\] lacks the keys \['{key}'\]"):
        recorded_zloss_runs(directory=tmp_path)


def test_a_record_without_runs_or_not_a_dict_is_refused(tmp_path):
    write_record(_record([]), tmp_path, ZLOSS_RECORDING.file)
    with pytest.raises(ValueError, match="runs"):
        recorded_zloss_runs(directory=tmp_path)
    (tmp_path / ZLOSS_RECORDING.file).write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(TypeError, match="JSON object"):
        recorded_zloss_runs(directory=tmp_path)


def test_a_missing_record_names_the_command_that_makes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tools\.zloss_runs"):
        recorded_zloss_runs(directory=tmp_path)
    assert "--out lmlessons/data/zloss" in ZLOSS_RECORDING.command


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


def _padded_batch(tok):
    enc = tok(["the cat sat on the mat .", "a dog ran"], padding=True, return_tensors="pt")
    assert not bool(enc["attention_mask"].all())  # row 1 ends in padding
    return enc["input_ids"], enc["attention_mask"]


def test_the_softmax_of_the_scores_is_transformers_eager_attention(tok):
    """From the hooked ``c_attn`` outputs, ``softmax(scores)`` equals the weights GPT-2's eager
    attention returns with ``output_attentions=True``, in every layer, at every real query."""
    model = tiny_gpt2(tok, seed=0, n_embd=32, n_layer=2, n_head=4).eval()
    model.set_attn_implementation("eager")
    input_ids, attention_mask = _padded_batch(tok)
    with captured_qkv(model) as qkv, torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=True)
    assert len(qkv) == 2 and len(out.attentions) == 2
    real_rows = attention_mask.bool()[:, None, :, None]  # (B, 1, T, 1)
    for layer_qkv, eager in zip(qkv, out.attentions):
        scores, used = attention_scores(layer_qkv, attention_mask, num_heads=4)
        assert scores.shape == eager.shape  # (B, H, T, T)
        probs = scores.softmax(-1)
        rows = real_rows.expand_as(probs)
        torch.testing.assert_close(probs[rows], eager[rows], rtol=1e-5, atol=1e-6)
        assert bool(torch.isinf(scores[:, :, 0, 1:]).all())  # the first query sees only itself
        assert not bool(used[1, 0, :, attention_mask[1] == 0].any())  # no padded key is used
    with torch.no_grad():  # the hooks are gone once the block is left
        model(input_ids=input_ids, attention_mask=attention_mask)
    assert len(qkv) == 2


def test_max_attention_score_against_a_plain_loop_and_blind_to_padding():
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 5, 3 * 8, generator=g) * 4  # (B, T, 3C): C = 8, 2 heads of 4
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    q, k = qkv[..., :8], qkv[..., 8:16]
    best = max(
        abs(sum(q[b, t, h * 4 + i].item() * k[b, s, h * 4 + i].item() for i in range(4))) / 2
        for b in range(2)
        for h in range(2)
        for t in range(5)
        for s in range(t + 1)
        if mask[b, t] and mask[b, s]
    )
    assert max_attention_score([qkv], mask, num_heads=2) == pytest.approx(best, rel=1e-5)
    huge = qkv.clone()
    huge[1, 3:, :16] = 1e4  # the padded positions' queries and keys: never used
    assert max_attention_score([huge], mask, num_heads=2) == pytest.approx(best, rel=1e-5)
    ones = torch.ones_like(qkv)  # every score 4 / sqrt(4) = 2: the largest over two layers
    assert max_attention_score([ones, 3 * ones], mask, num_heads=2) == pytest.approx(18.0)


def test_the_attention_helpers_refuse_bad_input_naming_it():
    with pytest.raises(ValueError, match="qkv"):
        attention_scores(torch.zeros(1, 3, 10), torch.ones(1, 3), num_heads=2)
    with pytest.raises(ValueError, match="attention_mask"):
        attention_scores(torch.zeros(1, 3, 12), torch.ones(1, 4), num_heads=2)
    with pytest.raises(ValueError, match="qkv_outputs"):
        max_attention_score([], torch.ones(1, 3), num_heads=2)
    with pytest.raises(TypeError, match="model"), captured_qkv(torch.nn.Linear(2, 2)):
        pass


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
    kw: dict[str, Any] = dict(learning_rate=1e-2, seed=0, settings=settings, model_config=SMALL)
    without = zloss_run(0.0, **kw)
    strong = zloss_run(1.0, **kw)
    assert without["log_z"][0] == pytest.approx(strong["log_z"][0], abs=1e-5)  # same start
    assert strong["log_z"][-1] < without["log_z"][-1] - 0.3, (strong["log_z"], without["log_z"])
    assert without["learning_rate"] == 1e-2 and len(without["max_attention_score"]) == 4


def test_zloss_run_refuses_a_bad_arm_naming_it():
    with pytest.raises(ValueError, match="z_loss_coefficient"):
        zloss_run(-1e-4, learning_rate=1e-2, seed=0)
    with pytest.raises(TypeError, match="z_loss_coefficient"):
        zloss_run("1e-4", learning_rate=1e-2, seed=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="learning_rate"):
        zloss_run(0.0, learning_rate=0.0, seed=0)


def test_the_arms_are_every_learning_rate_with_every_coefficient_and_are_checked():
    assert [(a["learning_rate"], a["z_loss_coefficient"]) for a in ZLOSS_ARMS] == [
        (1e-2, 0.0), (1e-2, 1e-4), (3e-1, 0.0), (3e-1, 1e-4)
    ]  # fmt: skip
    assert check_arm({"learning_rate": 1, "z_loss_coefficient": 0}) == {
        "learning_rate": 1.0, "z_loss_coefficient": 0.0
    }  # fmt: skip
    with pytest.raises(ValueError, match="learning_rate"):
        check_arm({"z_loss_coefficient": 0.0})
    with pytest.raises(TypeError, match="arm"):
        check_arm([1e-2, 0.0])
    with pytest.raises(TypeError, match="arms"):
        record_zloss_runs(seeds=[0], arms=ZLOSS_ARMS[0], log=None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- 3. the summary


def test_the_summary_on_a_hand_made_record():
    data = _record(
        [
            _run(1e-2, 0.0, 0, [7.0, 7.2, 7.4, 7.6], heldout=6.0),
            _run(1e-2, 0.0, 1, [7.0, 7.0, 8.0, 8.0], heldout=6.2),
            _run(3e-1, 0.0, 0, [7.0, 9.0, 6.0, 6.0], heldout=6.1),
        ]
    )
    summary = zloss_summary(data, window=2)
    assert sorted(summary) == [(1e-2, 0.0), (3e-1, 0.0)]
    low = summary[(1e-2, 0.0)]
    assert low["log_z_end"]["per_seed"] == pytest.approx([7.5, 8.0])
    assert low["log_z_rise"]["per_seed"] == pytest.approx([0.5, 1.0])
    assert low["log_z_rise"]["mean"] == pytest.approx(0.75)
    assert low["log_z_rise"]["std"] == pytest.approx(math.sqrt(0.125))
    assert low["heldout_loss"]["mean"] == pytest.approx(6.1)
    assert low["max_abs_logit_peak"]["per_seed"] == [3.0, 3.0]
    assert low["max_attention_score_peak"]["per_seed"] == [1000.0, 1000.0]
    assert low["log_z_min"]["per_seed"] == [7.0, 7.0]
    assert low["log_z_peak"]["per_seed"] == [7.6, 8.0]
    high = summary[(3e-1, 0.0)]
    assert high["log_z_peak"]["per_seed"] == [9.0] and high["log_z_min"]["per_seed"] == [6.0]
    assert high["log_z_rise"] == {"mean": -1.0, "std": 0.0, "per_seed": [-1.0]}
    assert low["seeds"] == [0, 1]


def test_merging_records_made_in_parts():
    low = [dict(a) for a in ZLOSS_ARMS[:2]]
    high = [dict(a) for a in ZLOSS_ARMS[2:]]
    part1 = _record([_run(1e-2, 0.0, 0, [7.0]), _run(1e-2, 1e-4, 0, [7.1])], low)
    part2 = _record([_run(3e-1, 0.0, 0, [9.0])], high)
    part2["seconds"] = 5
    merged = merge_zloss_records([part1, part2])
    assert merged["settings"]["arms"] == low + high and merged["seconds"] == 6
    assert [r["log_z"] for r in merged["runs"]] == [[7.0], [7.1], [9.0]]
    assert merged["settings"]["max_steps"] == ZLOSS_SETTINGS["max_steps"]
    other = _record([_run(3e-1, 0.0, 0, [9.0])], high)
    other["settings"]["max_steps"] = 5
    with pytest.raises(ValueError, match="settings"):
        merge_zloss_records([part1, other])
    with pytest.raises(ValueError, match="arms"):
        merge_zloss_records([part1, part1])


def test_the_figure_draws_a_row_per_learning_rate_one_line_per_run():
    data = _record([_run(1e-2, 0.0, 0, [7.0, 7.5]), _run(1e-2, 1e-4, 0, [7.0, 6.5]),
                    _run(3e-1, 0.0, 0, [7.0, 9.5])])  # fmt: skip
    fig = zloss_figure(data, log_v=7.8)
    assert len(fig.axes) == 6
    lines = [len(ax.lines) for ax in fig.axes]  # row 1: 2 runs (+ log V); row 2: 1 run (+ log V)
    assert lines == [3, 2, 2, 2, 1, 1]
    assert fig.axes[2].get_yscale() == "log" and "0.3" in fig.axes[3].get_title()


# ----------------------------------------------------------------------------- 4. a real run


@pytest.mark.slow
def test_a_short_real_recording_has_the_shipped_schema(tmp_path):
    shipped = recorded_zloss_runs()
    data = record_zloss_runs(seeds=[0], max_steps=2, log=None)
    write_record(data, tmp_path, ZLOSS_RECORDING.file, one_line_lists=True)
    loaded = recorded_zloss_runs(directory=tmp_path)
    assert set(loaded) == set(shipped)
    assert set(loaded["settings"]) == set(shipped["settings"])
    assert [set(r) for r in loaded["runs"]] == [set(shipped["runs"][0])] * 4
    arms = [(r["learning_rate"], r["z_loss_coefficient"]) for r in loaded["runs"]]
    assert arms == [(a["learning_rate"], a["z_loss_coefficient"]) for a in ZLOSS_ARMS]
    assert loaded["settings"]["arms"] == shipped["settings"]["arms"]
    assert loaded["runs"][0]["step"] == [1] and loaded["settings"]["max_steps"] == 2
    assert all(r["max_attention_score"][0] > 0 for r in loaded["runs"])


def test_the_tool_parses_its_arguments(tmp_path):
    from tools.zloss_runs import parse_args

    args = parse_args([])
    assert args.seeds == [0, 1, 2] and args.max_steps is None and args.out is None
    assert args.learning_rates == [1e-2, 3e-1] and args.merge is None
    args = parse_args(["--out", str(tmp_path), "--seeds", "3", "--max-steps", "5"])
    assert args.seeds == [3] and args.max_steps == 5 and args.out == tmp_path
    assert parse_args(["--learning-rates", "0.3"]).learning_rates == [0.3]
    assert parse_args(["--merge", "a", "b"]).merge == [Path("a"), Path("b")]
    with pytest.raises(SystemExit):
        parse_args(["--max-steps", "five"])
    with pytest.raises(SystemExit):
        parse_args(["--learning-rates", "0.05"])


def test_the_tool_merges_two_parts(tmp_path):
    from tools.zloss_runs import main

    low, high = [dict(a) for a in ZLOSS_ARMS[:2]], [dict(a) for a in ZLOSS_ARMS[2:]]
    write_record(
        _record([_run(1e-2, 0.0, 0, [7.0, 7.1])], low), tmp_path / "a", ZLOSS_RECORDING.file
    )
    write_record(
        _record([_run(3e-1, 0.0, 0, [9.0, 9.1])], high), tmp_path / "b", ZLOSS_RECORDING.file
    )
    main(["--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c")])
    merged = recorded_zloss_runs(directory=tmp_path / "c")
    assert [r["learning_rate"] for r in merged["runs"]] == [1e-2, 3e-1]
    assert merged["settings"]["arms"] == low + high


# ----------------------------------------------------------------- 3b. the record's claims
# What lesson 15 says about the shipped runs, each checked in every run it summarises.


@pytest.fixture(scope="module")
def shipped():
    return recorded_zloss_runs()


@pytest.fixture(scope="module")
def log_v(tok):
    return math.log(len(tok))


def _by(data, lr, coefficient):
    return {
        r["seed"]: r
        for r in data["runs"]
        if (r["learning_rate"], r["z_loss_coefficient"]) == (lr, coefficient)
    }


def test_the_record_holds_every_arm_on_the_same_seeds(shipped):
    assert shipped["settings"]["arms"] == [dict(a) for a in ZLOSS_ARMS]
    seeds = [set(_by(shipped, a["learning_rate"], a["z_loss_coefficient"])) for a in ZLOSS_ARMS]
    assert all(s == seeds[0] for s in seeds) and len(seeds[0]) >= 3


def test_every_run_starts_at_log_v(shipped, log_v):
    for run in shipped["runs"]:
        assert run["log_z"][0] == pytest.approx(log_v, abs=0.05), run["seed"]


@pytest.mark.parametrize("coefficient", [0.0, 1e-4])
def test_at_1e_2_log_z_never_drifts_far_from_log_v(shipped, log_v, coefficient):
    """No drift at 1e-2: every logged mean log Z of every run stays within 0.6 of log V; it dips
    about half a unit early, then climbs back part of the way (0.3 to 0.5)."""
    for seed, run in _by(shipped, 1e-2, coefficient).items():
        assert max(abs(v - log_v) for v in run["log_z"]) < 0.6, (seed, run["log_z"])
        low = min(run["log_z"])
        assert low < run["log_z"][0] - 0.45 and run["log_z"][-1] > low + 0.25, seed


@pytest.mark.parametrize("coefficient", [0.0, 1e-4])
def test_at_3e_1_log_z_jumps_2_above_log_v_in_every_run(shipped, log_v, coefficient):
    """Drift at 3e-1, the z-loss of 1e-4 or not: every run's highest logged log Z is 2 or more
    above log V, within the first 100 steps, at a step where the training loss is above log V
    too (worse than uniform); the held-out loss ends above that of the same seed at 1e-2."""
    low = _by(shipped, 1e-2, coefficient)
    for seed, run in _by(shipped, 3e-1, coefficient).items():
        peak = max(run["log_z"])
        assert peak >= log_v + 2, (seed, peak)
        at = run["log_z"].index(peak)
        assert run["step"][at] <= 100 and run["lm_loss"][at] > log_v, (seed, at)
        assert run["heldout_loss"] > low[seed]["heldout_loss"], seed


def test_at_3e_1_the_z_loss_lowers_the_peak_of_log_z_in_some_seeds_not_all(shipped):
    """No consistent effect of the z-loss on the jumps: paired by seed, both signs."""
    without, with_z = _by(shipped, 3e-1, 0.0), _by(shipped, 3e-1, 1e-4)
    effect = [max(with_z[s]["log_z"]) - max(without[s]["log_z"]) for s in without]
    assert min(effect) < 0 < max(effect), effect


@pytest.mark.parametrize("coefficient", [0.0, 1e-4])
def test_attention_scores_at_3e_1_are_100_times_those_at_1e_2_in_every_seed(shipped, coefficient):
    """From about 0.2 at step 1, the largest attention score grows past 1,000 at 1e-2, and at
    3e-1 to 100 times or more (500 to 1,600 times) that of the same seed at 1e-2."""
    low, high = _by(shipped, 1e-2, coefficient), _by(shipped, 3e-1, coefficient)
    for seed in low:
        assert low[seed]["max_attention_score"][0] < 1, seed
        assert 1e3 < max(low[seed]["max_attention_score"]) < 1e4, seed
        ratio = max(high[seed]["max_attention_score"]) / max(low[seed]["max_attention_score"])
        assert ratio >= 100, (seed, ratio)
