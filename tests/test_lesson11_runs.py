"""Lesson 11's statements about its recorded runs, its toy foundations, and lesson 08's description
of the model its DPO cases start from: each checked against the record, the recording tool or the
run specs, so that a re-recording or an edit of the prose that breaks one fails here."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from lmlessons.course.preferences import (
    bradley_terry,
    chosen_course,
    kl_objective,
    kl_optimal_policy,
    preference_runs,
)
from lmlessons.kl import kl_divergence
from tests._lessons import ROOT, cells

LESSON = ROOT / "notebooks" / "11_preference_losses.ipynb"


@pytest.fixture(scope="module")
def record() -> dict:
    return preference_runs()


@pytest.fixture(scope="module")
def prose() -> str:
    """Lesson 11's markdown, whitespace folded."""
    text = "\n".join("".join(c["source"]) for c in cells(LESSON) if c["cell_type"] == "markdown")
    return " ".join(text.split())


def _lr(value: float) -> str:
    """A learning rate as the prose writes it: 5e-4."""
    return f"{value:.0e}".replace("e-0", "e-")


def _chosen(run: dict) -> list[float]:
    return [p["chosen_logps"] for p in run["probes"]]


def test_every_run_starts_from_the_same_pairs_and_weights(record):
    """The seed changes only the batch order: every run's first probe (before any step, on all
    the pairs) is the same, so the data and the starting model are the same."""
    first = {tuple(sorted(r["probes"][0].items())) for r in record["runs"]}
    assert len(first) == 1
    seeds: dict[tuple[str, float], set[int]] = {
        (r["loss_type"], r["beta"]): set() for r in record["runs"]
    }
    for r in record["runs"]:
        seeds[(r["loss_type"], r["beta"])].add(r["seed"])
    assert all(s == {0, 1, 2} for s in seeds.values())


def test_the_runs_settings_are_the_ones_the_lesson_states(record, prose):
    from lmlessons.course.preferences import RUN_SETTINGS

    size, pairs, steps = (RUN_SETTINGS[k] for k in ("batch_size", "num_pairs", "steps"))
    assert record["batch_size"] == size and record["num_pairs"] == pairs
    assert record["every"] == RUN_SETTINGS["every"]
    assert record["simpo_gamma"] == RUN_SETTINGS["simpo_gamma"]
    assert f"one micro-batch of **{size} pairs** ({2 * size} rows)" in prose
    assert f"trains on the same {pairs} pairs for {steps} steps" in prose
    assert f"no gradient accumulation ({steps * size // pairs} passes)" in prose
    assert f"AdamW at a constant {_lr(RUN_SETTINGS['learning_rate'])}" in prose
    assert all(len(r["loss"]) == steps for r in record["runs"])
    assert {r["beta"] for r in record["runs"]} == set(RUN_SETTINGS["betas"])
    assert {r["seed"] for r in record["runs"]} == set(RUN_SETTINGS["seeds"])


def test_at_beta_01_every_run_ends_above_its_start(record, prose):
    ends = [_chosen(r)[-1] for r in record["runs"] if r["beta"] == 0.1]
    start = _chosen(record["runs"][0])[0]
    assert all(end > start for end in ends)
    assert f"at {max(ends):.1f} to {min(ends):.1f} nats" in prose
    assert f"above its start ({start:.1f})" in prose


def test_the_one_run_that_ends_below_its_start_is_named(record, prose):
    below = [r for r in record["runs"] if _chosen(r)[-1] < _chosen(r)[0]]
    assert [(r["loss_type"], r["beta"], r["seed"]) for r in below] == [("hinge", 0.5, 1)]
    drop = _chosen(below[0])[0] - _chosen(below[0])[-1]
    assert f"one run of fifteen ended *below* it: `hinge`, seed 1, {drop:.1f} nats down" in prose
    assert f"one `hinge` run ended {drop:.1f} nats below it" in prose
    assert "none of them by lowering the chosen answer" not in prose


def test_dips_below_the_start_by_loss_type(record, prose):
    def dipped(loss_type: str) -> int:
        runs = [r for r in record["runs"] if r["loss_type"] == loss_type]
        return sum(min(_chosen(r)) < _chosen(r)[0] for r in runs)

    summed = dipped("sigmoid") + dipped("hinge")
    assert f"in {summed} of their 12 runs" in prose
    assert dipped("ipo") == dipped("sigmoid_norm") == dipped("simpo") == 0


def test_peaks_before_the_end_and_the_largest_fall(record, prose):
    peaked = sum(max(_chosen(r)) > _chosen(r)[-1] for r in record["runs"])
    fall, worst = max((max(_chosen(r)) - _chosen(r)[-1], r["loss_type"]) for r in record["runs"])
    assert f"peaked before the end in {peaked} runs of 30" in prose
    assert f"fell back by up to {fall:.1f} nats (`{worst}`)" in prose


def test_where_the_rejected_answer_fell_further(record):
    """'In every sigmoid, hinge and sigmoid_norm run the rejected answer fell further than the
    chosen one rose; ipo mostly raised the chosen answer.'"""

    def rejected_more(r: dict) -> bool:
        first, last = r["probes"][0], r["probes"][-1]
        fell = first["rejected_logps"] - last["rejected_logps"]
        return fell > last["chosen_logps"] - first["chosen_logps"]

    for r in record["runs"]:
        if r["loss_type"] in ("sigmoid", "hinge", "sigmoid_norm"):
            assert rejected_more(r), (r["loss_type"], r["beta"], r["seed"])
    ipo = [rejected_more(r) for r in record["runs"] if r["loss_type"] == "ipo"]
    assert sum(ipo) < len(ipo) / 2


def test_beta_05_means_the_lesson_states(record, prose):
    def mean_last(loss_type: str, key: str) -> float:
        runs = [r for r in record["runs"] if r["loss_type"] == loss_type and r["beta"] == 0.5]
        return statistics.fmean(r["probes"][-1][key] for r in runs)

    hinge, ipo = (1 - mean_last(t, "policy_prefers_chosen") for t in ("hinge", "ipo"))
    assert f"on {hinge:.0%} and {ipo:.0%} of the pairs (means)" in prose


def test_chosen_course_reads_each_run(record):
    course = chosen_course(record)
    assert len(course) == len(record["runs"])
    for c, r in zip(course, record["runs"]):
        chosen = _chosen(r)
        assert (c["start"], c["lowest"], c["peak"], c["end"]) == (
            chosen[0], min(chosen), max(chosen), chosen[-1],
        )  # fmt: skip
    with pytest.raises(ValueError, match="runs"):  # lesson 11's one schema check
        chosen_course({"probes": []})
    with pytest.raises(TypeError, match="record"):
        chosen_course([])  # type: ignore[arg-type]


def test_bradley_terry_is_the_ratio_of_exponentials():
    rewards = torch.tensor([[0.3, -1.0], [2.0, 2.0], [-4.0, 1.0]], dtype=torch.float64)
    p = bradley_terry(rewards[:, 0], rewards[:, 1])
    expected = rewards[:, 0].exp() / rewards.exp().sum(dim=1)
    assert torch.allclose(p, expected, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="reward_chosen"):
        bradley_terry(torch.zeros(2), torch.zeros(3))
    with pytest.raises(TypeError, match="reward_rejected"):
        bradley_terry(torch.zeros(2), [0.0, 0.0])  # type: ignore[arg-type]


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_the_closed_form_maximises_the_kl_objective(beta):
    g = torch.Generator().manual_seed(1)
    ref = torch.rand(6, generator=g, dtype=torch.float64).softmax(0).log()  # (Y,)
    reward = torch.randn(6, generator=g, dtype=torch.float64)  # (Y,)
    best = kl_optimal_policy(ref, reward, beta)  # (Y,)
    assert torch.isclose(best.exp().sum(), torch.tensor(1.0, dtype=torch.float64))
    by_hand = ref.exp() * (reward / beta).exp()  # (Y,) unnormalised
    assert torch.allclose(best.exp(), by_hand / by_hand.sum(), rtol=0, atol=1e-12)
    value = kl_objective(best, ref, reward, beta)
    log_z = torch.logsumexp(ref + reward / beta, dim=0)
    assert math.isclose(float(value), beta * float(log_z), abs_tol=1e-12)
    e = -torch.rand((2000, 6), generator=g, dtype=torch.float64).log()
    others = (e / e.sum(dim=1, keepdim=True)).log()  # (N, Y)
    assert bool((kl_objective(others, ref, reward, beta) < value).all())
    expected = (others.exp() * reward).sum(1) - beta * kl_divergence(others, ref.expand_as(others))
    assert torch.allclose(kl_objective(others, ref, reward, beta), expected, rtol=0, atol=1e-12)


def test_the_toy_helpers_name_bad_arguments():
    ref = torch.full((3,), 1 / 3).log()
    with pytest.raises(ValueError, match="beta"):
        kl_optimal_policy(ref, torch.zeros(3), 0.0)
    with pytest.raises(ValueError, match="reward"):
        kl_objective(ref, ref, torch.zeros(4), 0.5)
    with pytest.raises(TypeError, match="log_policy"):
        kl_objective([0.0], ref, torch.zeros(3), 0.5)  # type: ignore[arg-type]


def test_bug_zoo_dpo_setting_names_the_model_it_starts_from():
    """Lesson 08's DPO cases start from the healthy chat run's fine-tuned model, not from the gpt2
    checkpoint: the setting says which, trained how, with the run specs' own numbers."""
    from lmlessons.bugzoo.cases import SETTINGS
    from lmlessons.bugzoo.data import BETA
    from lmlessons.bugzoo.runs import RUNS

    chat, dpo = RUNS["healthy_chat"], RUNS["healthy_dpo"]
    text = " ".join(SETTINGS["GPT-2 DPO"].split())
    assert "continuing from the course's gpt2 checkpoint" not in text
    assert f"fine-tuned for {chat.steps} steps at {_lr(chat.lr)}" in text
    assert f"{chat.batch_size} conversations per step" in text
    assert f"for {dpo.steps} steps at {_lr(dpo.lr)}" in text
    assert f"(beta {BETA})" in text and f"{dpo.batch_size} pairs per step" in text
    assert "frozen copy of that fine-tuned model as its reference" in text


def test_the_oserror_message_is_shown_whole():
    """The pitfall cell prints TRL's OSError message in full, not cut at a character count."""
    code = [
        c
        for c in cells(LESSON)
        if c["cell_type"] == "code" and "except OSError" in "".join(c["source"])
    ]
    assert len(code) == 1
    source = "".join(code[0]["source"])
    assert "[:1" not in source and "splitlines()[0][:" not in source
    shown = "".join("".join(o.get("text", [])) for o in code[0]["outputs"])
    assert shown.startswith("OSError: ") and shown.rstrip().endswith("''.")
