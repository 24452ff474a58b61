"""The MTP lesson's recorded runs (``lmlessons.course.mtp_runs``, ``tools.mtp_runs``).

1. The model: depth 1 is the course GPT-2 itself, and its loss is transformers'
   ``ForCausalLMLoss`` on the depth-1 logits; every depth is causal; depth d's held-out loss is
   ``ForCausalLMLoss`` with ``shift_labels = mtp_labels(labels, d)``, token-weighted.
2. The loader: the shipped record loads; a malformed one is refused naming the missing key.
3. The summary on a hand-made record, and the claims a lesson makes about the shipped record.
4. A short real run has the record's schema; the tool's arguments.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from lmlessons.course.mtp_runs import (
    MTP_RECORDING,
    MTP_SETTINGS,
    MTPModel,
    heldout_depth_losses,
    mtp_figure,
    mtp_model,
    mtp_run,
    mtp_summary,
    record_mtp_runs,
    recorded_mtp_runs,
)
from lmlessons.course.records import write_record
from lmlessons.mtp import mtp_labels, mtp_losses

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(n_embd=32, n_layer=1, n_head=2)
IGNORE = -100


@pytest.fixture(scope="module")
def model3(tok):
    return mtp_model(3, seed=0, tokenizer=tok, **SMALL)


def _batch(tok, seed: int, b: int = 2, t: int = 9) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(tok.all_special_ids), len(tok), (b, t), generator=g)  # (B, T)
    mask = torch.ones_like(ids)
    mask[-1, -3:] = 0  # right padding on the last row
    labels = ids.masked_fill(mask == 0, IGNORE)
    ids = ids.masked_fill(mask == 0, tok.pad_token_id)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# ----------------------------------------------------------------------------- 1. the model


def test_depth_1_is_the_course_gpt2_and_its_loss_is_for_causal_lm_loss(tok, model3):
    batch = _batch(tok, 0)
    with torch.no_grad():
        logits = model3(batch["input_ids"], batch["attention_mask"])
        own = model3.lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert len(logits) == 3 and model3.num_depths == 3
    torch.testing.assert_close(logits[0], own.logits)
    expected = ForCausalLMLoss(logits[0], batch["labels"], vocab_size=len(tok))
    torch.testing.assert_close(mtp_losses(logits, batch["labels"])[0], expected)


def test_one_depth_adds_nothing_to_the_course_gpt2(tok):
    model = mtp_model(1, seed=0, tokenizer=tok, **SMALL)
    assert model.num_depths == 1 and len(model.blocks) == 0
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in model.lm.parameters()
    )


def test_every_depth_is_causal(tok, model3):
    batch = _batch(tok, 1, b=1, t=8)
    changed = batch["input_ids"].clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % len(tok)  # change the future of position 4
    with torch.no_grad():
        before = model3(batch["input_ids"])
        after = model3(changed)
    for d, (a, b) in enumerate(zip(before, after), start=1):
        torch.testing.assert_close(a[:, :5], b[:, :5], msg=f"depth {d} sees the future")
        assert not torch.allclose(a[:, 5:], b[:, 5:]), d


def test_the_extra_depths_are_not_the_next_token_head(tok, model3):
    with torch.no_grad():
        logits = model3(_batch(tok, 2)["input_ids"])
    assert not torch.allclose(logits[0], logits[1]) and not torch.allclose(logits[1], logits[2])


def test_heldout_depth_losses_are_token_weighted_for_causal_lm_losses(tok, model3):
    batches = [_batch(tok, 3, b=2, t=9), _batch(tok, 4, b=3, t=6)]
    got = heldout_depth_losses(model3, batches)
    with torch.no_grad():
        for d in (1, 2, 3):
            shifted = [mtp_labels(b["labels"], d) for b in batches]
            count = sum(int((s != IGNORE).sum()) for s in shifted)
            total = sum(
                ForCausalLMLoss(
                    model3(b["input_ids"], b["attention_mask"])[d - 1],
                    None,
                    vocab_size=len(tok),
                    num_items_in_batch=count,
                    shift_labels=s,
                ).item()
                for b, s in zip(batches, shifted)
            )
            assert got[d - 1] == pytest.approx(total, rel=1e-5), d


def test_the_model_refuses_a_bad_number_of_depths(tok):
    with pytest.raises(ValueError, match="num_depths"):
        mtp_model(0, tokenizer=tok, **SMALL)
    with pytest.raises(TypeError, match="num_depths"):
        MTPModel(object(), 1.5)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- 2. the loader


def _run(depths: int, seed: int, heldout: float) -> dict:
    losses = {f"loss_depth_{d}": [7.0, 6.0] for d in range(1, depths + 1)}
    return {
        "num_depths": depths,
        "seed": seed,
        "step": [1, 2],
        **losses,
        "heldout_next_token_loss": heldout,
        "heldout_depth_losses": [heldout + 0.1 * d for d in range(depths)],
    }


def _record(runs: list[dict]) -> dict:
    return {"settings": dict(MTP_SETTINGS), "seconds": 1, "runs": runs}


def test_the_shipped_record_loads_with_every_key():
    data = recorded_mtp_runs()
    assert set(MTP_RECORDING.keys) <= set(data)
    for run in data["runs"]:
        assert set(MTP_RECORDING.run_keys) <= set(run)
        depths = run["num_depths"]
        assert len(run["heldout_depth_losses"]) == depths
        for d in range(1, depths + 1):
            assert len(run[f"loss_depth_{d}"]) == len(run["step"]) > 1
        assert run["heldout_depth_losses"][0] == pytest.approx(
            run["heldout_next_token_loss"], abs=2e-4
        )


@pytest.mark.parametrize("key", MTP_RECORDING.keys)
def test_a_record_without_a_top_level_key_is_refused_naming_it(tmp_path, key):
    record = _record([_run(1, 0, 6.0)])
    del record[key]
    write_record(record, tmp_path, MTP_RECORDING.file)
    with pytest.raises(ValueError, match=key):
        recorded_mtp_runs(directory=tmp_path)


@pytest.mark.parametrize("key", MTP_RECORDING.run_keys)
def test_a_run_without_a_key_is_refused_naming_the_run_and_the_key(tmp_path, key):
    bad = _run(2, 0, 6.0)
    del bad[key]
    write_record(_record([_run(1, 0, 6.0), bad]), tmp_path, MTP_RECORDING.file)
    with pytest.raises(ValueError, match=rf"\['runs'\]\[1\] lacks the keys \['{key}'\]"):
        recorded_mtp_runs(directory=tmp_path)


def test_a_missing_record_names_the_command_that_makes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"tools\.mtp_runs"):
        recorded_mtp_runs(directory=tmp_path)


# ----------------------------------------------------------------------------- 3. the summary


def test_the_summary_on_a_hand_made_record():
    data = _record(
        [_run(1, 0, 6.0), _run(1, 1, 6.2), _run(2, 0, 6.1), _run(2, 1, 6.5), _run(3, 0, 7.0)]
    )
    summary = mtp_summary(data)
    assert sorted(summary) == [1, 2, 3]
    assert summary[1]["heldout_next_token_loss"]["mean"] == pytest.approx(6.1)
    assert summary[1]["minus_d1"]["per_seed"] == [0.0, 0.0]
    assert summary[2]["minus_d1"]["per_seed"] == pytest.approx([0.1, 0.3])
    assert summary[2]["minus_d1"]["mean"] == pytest.approx(0.2)
    assert summary[2]["minus_d1"]["std"] == pytest.approx(math.sqrt(0.02))
    assert summary[3]["seeds"] == [0] and summary[3]["minus_d1"]["std"] == 0.0


def test_the_summary_has_no_difference_without_the_same_seeds_at_d1():
    summary = mtp_summary(_record([_run(1, 0, 6.0), _run(2, 5, 6.1)]))
    assert "minus_d1" not in summary[2]


def test_the_figure_draws_the_training_curves_and_the_heldout_losses():
    fig = mtp_figure(_record([_run(1, 0, 6.0), _run(2, 0, 6.1), _run(2, 1, 6.3)]))
    left, right = fig.axes
    assert len(left.lines) == 3
    assert len(right.lines) == 4  # three runs' dots and the mean


# ----------------------------------------------------------------------------- 4. a real run


@pytest.mark.slow
def test_a_short_real_run_has_the_record_schema():
    settings = {**MTP_SETTINGS, "max_steps": 3, "log_every": 2}
    run = mtp_run(2, seed=0, settings=settings, model_config=SMALL)
    assert set(MTP_RECORDING.run_keys) | {"loss_depth_2"} == set(run)
    assert run["step"] == [1, 2] and len(run["loss_depth_2"]) == 2
    assert run["heldout_depth_losses"][0] == pytest.approx(run["heldout_next_token_loss"])


@pytest.mark.slow
def test_a_short_real_recording_has_the_shipped_schema(tmp_path):
    shipped = recorded_mtp_runs()
    data = record_mtp_runs(seeds=[0], max_steps=1, depths=[1, 2], log=None)
    write_record(data, tmp_path, MTP_RECORDING.file, one_line_lists=True)
    loaded = recorded_mtp_runs(directory=tmp_path)
    assert set(loaded) == set(shipped) and set(loaded["settings"]) == set(shipped["settings"])
    assert [r["num_depths"] for r in loaded["runs"]] == [1, 2]
    for run in loaded["runs"]:
        ref = next(r for r in shipped["runs"] if r["num_depths"] == run["num_depths"])
        assert set(run) == set(ref)


def test_the_tool_parses_its_arguments(tmp_path):
    from tools.mtp_runs import parse_args

    args = parse_args([])
    assert args.seeds == [0, 1, 2] and args.max_steps is None and args.depths == [1, 2, 3]
    args = parse_args(["--out", str(tmp_path), "--seeds", "0", "1", "--max-steps", "4"])
    assert args.seeds == [0, 1] and args.max_steps == 4 and args.out == tmp_path
    assert parse_args(["--depths", "1", "2"]).depths == [1, 2]
    with pytest.raises(SystemExit):
        parse_args(["--depths", "two"])


# ----------------------------------------------------------------- 3b. the record's claims
# What a lesson may say about the shipped runs, each checked in every seed it summarises.


@pytest.fixture(scope="module")
def shipped():
    return recorded_mtp_runs()


def _heldout(data, depths):
    return {
        r["seed"]: r["heldout_next_token_loss"] for r in data["runs"] if r["num_depths"] == depths
    }


def test_the_record_holds_every_depth_on_the_same_seeds(shipped):
    seeds = set(_heldout(shipped, 1))
    assert len(seeds) >= 3 and seeds == set(_heldout(shipped, 2)) == set(_heldout(shipped, 3))


def test_each_extra_depth_raised_the_heldout_next_token_loss_in_every_seed(shipped):
    """Same seed, same batches, same steps: D = 2 above D = 1 by at least 0.15, D = 3 above
    D = 2, in every seed (MTP hurt this tiny model)."""
    d1, d2, d3 = (_heldout(shipped, d) for d in (1, 2, 3))
    for seed in d1:
        assert d2[seed] > d1[seed] + 0.15, (seed, d1[seed], d2[seed])
        assert d3[seed] > d2[seed], (seed, d2[seed], d3[seed])
    gap = mtp_summary(shipped)[2]["minus_d1"]
    assert gap["mean"] > 2 * gap["std"], gap


def test_the_depth_1_training_loss_also_ended_higher_with_more_depths(shipped):
    last = {(r["num_depths"], r["seed"]): r["loss_depth_1"][-1] for r in shipped["runs"]}
    for depths, seed in last:
        if depths > 1:
            assert last[depths, seed] > last[1, seed], (depths, seed)


def test_the_farther_depths_are_harder_in_every_run(shipped):
    for run in shipped["runs"]:
        losses = run["heldout_depth_losses"]
        assert all(a < b for a, b in itertools.pairwise(losses)), (run["num_depths"], run["seed"])
