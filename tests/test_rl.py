"""Lesson 12's course helpers: the prompts, the reward functions, the recorded runs and their
summary (``lmlessons.course.rl``). The TRL runs themselves are exercised in
``tests/test_claims_12.py`` (slow)."""

from __future__ import annotations

import json

import pytest

from lmlessons.course.chat import instruction_set
from lmlessons.course.rl import (
    EXPERIMENTS,
    GRPO_RECORDING,
    REWARDS,
    RUN_METRICS,
    completion_text,
    correctness_reward,
    length_reward,
    recorded_runs,
    rl_prompts,
    run_summary,
    shortness_reward,
)
from lmlessons.grpo import LOSS_TYPES


def test_prompts_are_evenly_spaced_examples_of_both_tasks():
    examples = instruction_set("train")
    prompts = rl_prompts(8)
    assert prompts == rl_prompts(8)  # deterministic
    assert [p["prompt"] for p in prompts] == [
        examples[i * len(examples) // 8]["prompt"] for i in range(8)
    ]
    assert {p["task"] for p in prompts} == {"first_word", "topic"}
    for p in prompts:
        assert p["prompt"][-1]["role"] == "user" and isinstance(p["answer"], str) and p["answer"]
    assert len(rl_prompts(3, split="validation")) == 3
    with pytest.raises(ValueError, match="n must be at most"):
        rl_prompts(len(examples) + 1)


def test_length_reward_counts_tokens_when_given_and_words_otherwise():
    conversational = [[{"role": "assistant", "content": "the cat sat"}], [{"content": ""}]]
    assert length_reward(conversational) == [3.0, 0.0]
    assert length_reward(["a b", "c"], completion_ids=[[5, 6, 7], [1]]) == [3.0, 1.0]
    assert shortness_reward(["a b"], completion_ids=[[5, 6, 7]]) == [-3.0]
    with pytest.raises(ValueError, match="completion_ids"):
        length_reward(["a", "b"], completion_ids=[[1]])
    with pytest.raises(TypeError, match="completions"):
        length_reward("not a list")


def test_correctness_reward_compares_the_first_word():
    completions = ["Animals, surely", [{"role": "assistant", "content": "the sea"}], "", "sport"]
    answers = ["animals", "sea", "sport", "music"]
    assert correctness_reward(completions, answer=answers) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="answer"):
        correctness_reward(["a"], answer="a")
    with pytest.raises(TypeError, match="completion"):
        completion_text(3)


def test_rewards_and_experiments_name_each_other():
    for spec in EXPERIMENTS.values():
        assert spec["reward"] in REWARDS
        assert all(t in LOSS_TYPES and beta >= 0 for t, beta in spec["runs"])


def _fake(tmp_path, lengths_by_seed):
    runs = [
        {"loss_type": t, "beta": 0.0, "seed": s, "loss": [0.0] * len(v), "reward": v,
         "mean_length": v, "clipped_ratio": [0.0] * len(v)}
        for t, by_seed in lengths_by_seed.items()
        for s, v in enumerate(by_seed)
    ]  # fmt: skip
    data = {
        "settings": {"seeds": [0, 1]},
        "experiments": {"shorter": {"reward": "r", "runs": runs}},
    }
    (tmp_path / GRPO_RECORDING.file).write_text(json.dumps(data))
    return recorded_runs(directory=tmp_path)


def test_run_summary_is_the_mean_and_spread_over_seeds(tmp_path):
    data = _fake(tmp_path, {"grpo": [[10, 4, 2], [12, 6, 4]], "dapo": [[10, 8, 8], [12, 9, 9]]})
    summary = run_summary(data, "shorter", last=2)
    assert summary["grpo"]["first"] == 11 and summary["grpo"]["per_seed"] == [3.0, 5.0]
    assert summary["grpo"]["final"] == 4.0 and summary["grpo"]["std"] == pytest.approx(2**0.5)
    assert summary["dapo"]["final"] == 8.5
    assert run_summary(data, "shorter", steps=(1, 2))["grpo"]["per_seed"] == [7.0, 9.0]
    with pytest.raises(ValueError, match="experiment"):
        run_summary(data, "longer")
    with pytest.raises(FileNotFoundError):
        recorded_runs(directory=tmp_path / "missing")


def test_the_shipped_runs_hold_every_experiment_loss_type_and_seed():
    data = recorded_runs()
    seeds = data["settings"]["seeds"]
    assert len(seeds) >= 3
    for name, spec in EXPERIMENTS.items():
        runs = data["experiments"][name]["runs"]
        assert {(r["loss_type"], r["beta"], r["seed"]) for r in runs} == {
            (t, b, s) for t, b in spec["runs"] for s in seeds
        }
        for r in runs:
            steps = data["settings"]["max_steps"]
            assert all(len(r[m]) == steps for m in RUN_METRICS if m != "kl")
            assert ("kl" in r) == (r["beta"] > 0)
            assert all(
                1 <= n <= data["settings"]["max_completion_length"] for n in r["mean_length"]
            )
