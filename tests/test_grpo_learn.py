"""Lesson 12's GRPO run that learns and the reward it games (``lmlessons.course.grpo_learn``):
the rewards, the summaries and the figure on records the test makes; the schema of the shipped
record (``data/grpo_learn/runs.json``, made by ``python -m tools.grpo_learn``) and the claims the
lesson makes about it, each checked in every seed; and (slow) the tool itself on one short run."""

from __future__ import annotations

import json

import pytest

from lmlessons.course.grpo_learn import (
    LEARN_METRICS,
    LEARN_REWARDS,
    LEARN_SETTINGS,
    has_word_reward,
    learn_figure,
    recorded_learn_runs,
    reward_rise,
    sample_stats,
    word_count,
    word_count_reward,
)
from lmlessons.course.rl import GRPO_RECORDING, rl_prompts

WINDOW = 5  # the steps the lesson averages at the start and at the end of a run


# The rewards ------------------------------------------------------------------------------------


def test_word_count_counts_whole_words_in_lower_case():
    assert word_count("Water, water and seawater; waters.") == 2
    assert word_count("the sea", "sea") == 1 and word_count("", "sea") == 0
    with pytest.raises(ValueError, match="word"):
        word_count("water", "Water")
    with pytest.raises(ValueError, match="word"):
        word_count("water", "two words")
    with pytest.raises(TypeError, match="text"):
        word_count(["water"])  # type: ignore[arg-type]


def test_rewards_take_trl_completions_and_ignore_the_other_columns():
    chat = [
        [{"role": "assistant", "content": "water water"}],
        [{"role": "assistant", "content": "x"}],
    ]
    plain = ["the water is cold", "no word here", "Water! water? WATER."]
    assert has_word_reward(plain, prompts=["p"] * 3, completion_ids=[[1]] * 3) == [1.0, 0.0, 1.0]
    assert word_count_reward(plain, answer=["a"] * 3) == [1.0, 0.0, 3.0]
    assert has_word_reward(chat) == [1.0, 0.0] and word_count_reward(chat) == [2.0, 0.0]
    with pytest.raises(TypeError, match="completions"):
        has_word_reward("water")
    assert {f.__name__ for f in LEARN_REWARDS.values()} == {"has_word_reward", "word_count_reward"}


# The summaries and the figure, on a record made here ------------------------------------------


def _run(seed, reward, loss, before, after):
    samples = [{"prompt": "p", "completions": before}], [{"prompt": "p", "completions": after}]
    steps = len(reward)
    return {
        "seed": seed,
        "loss_type": "dapo",
        "beta": 0.0,
        "reward": reward,
        "loss": loss,
        "mean_length": [8.0] * steps,
        "frac_reward_zero_std": [0.5] * steps,
        "before": samples[0],
        "after": samples[1],
    }


def _fake():
    runs = [
        _run(0, [0.0, 0.2, 0.4, 1.0], [0.1, -0.2, 0.0, 0.0], ["a b"], ["water b"]),
        _run(3, [0.5, 0.5, 0.5, 0.9], [0.0, 0.0, 0.3, -0.1], ["a a"], ["water"]),
    ]
    return {"settings": {}, "experiments": {"learns": {"reward": "has_word_reward", "runs": runs}}}


def test_reward_rise_is_each_seeds_start_and_end_window(tmp_path):
    (tmp_path / GRPO_RECORDING.file).write_text(json.dumps(_fake()))
    data = recorded_learn_runs(directory=tmp_path)
    rise = reward_rise(data, "learns", window=2)
    assert [r["seed"] for r in rise] == [0, 3]
    assert rise[0]["start"] == pytest.approx(0.1) and rise[0]["end"] == pytest.approx(0.7)
    assert rise[1]["start"] == pytest.approx(0.5) and rise[1]["end"] == pytest.approx(0.7)
    assert (rise[0]["loss_min"], rise[0]["loss_max"]) == (-0.2, 0.1)
    assert (rise[1]["loss_min"], rise[1]["loss_max"]) == (-0.1, 0.3)
    with pytest.raises(ValueError, match="experiment"):
        reward_rise(data, "games")
    with pytest.raises(ValueError, match="window"):
        reward_rise(data, "learns", window=5)
    with pytest.raises(FileNotFoundError):
        recorded_learn_runs(directory=tmp_path / "missing")


def test_sample_stats_measure_the_word_and_the_repetition():
    samples = [
        {"prompt": "p", "completions": ["water water water", "the sea"]},
        {"prompt": "q", "completions": ["", "water, the water"]},
    ]
    stats = sample_stats(samples)
    assert stats["n"] == 4 and stats["has_word"] == 0.5
    assert stats["word_count"] == pytest.approx(5 / 4)
    assert stats["distinct"] == pytest.approx((1 / 3 + 1 + 1 + 2 / 3) / 4)
    assert sample_stats(samples, "sea")["word_count"] == 0.25
    with pytest.raises(ValueError, match="samples"):
        sample_stats([{"prompt": "p", "completions": []}])


def test_learn_figure_draws_reward_and_loss_per_seed_and_their_mean():
    data = _fake()
    fig = learn_figure(data, "learns")
    reward_ax, loss_ax = fig.axes
    assert [len(ax.lines) for ax in fig.axes] == [3, 4]  # 2 seeds + mean (+ the loss's zero line)
    assert list(reward_ax.lines[-1].get_ydata()) == pytest.approx([0.25, 0.35, 0.45, 0.95])
    assert list(loss_ax.lines[1].get_ydata()) == [0.0, 0.0, 0.3, -0.1]
    with pytest.raises(ValueError, match="experiment"):
        learn_figure(data, "games")


@pytest.mark.usefixtures("one_torch_thread")
def test_policy_samples_are_seeded_completions_of_each_prompt(chat_tok):
    import torch

    from lmlessons.course.checkpoints import load_checkpoint
    from lmlessons.course.grpo_learn import policy_samples

    model, prompts = load_checkpoint("gpt2"), rl_prompts(2, split="validation")

    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        return policy_samples(model, chat_tok, prompts, per_prompt=3, max_new_tokens=6, generator=g)

    samples = draw(0)
    assert [s["prompt"] for s in samples] == [p["prompt"][-1]["content"] for p in prompts]
    assert [len(s["completions"]) for s in samples] == [3, 3]
    assert all(isinstance(t, str) and "[SEP]" not in t for s in samples for t in s["completions"])
    assert draw(0) == samples and draw(1) != samples
    with pytest.raises(ValueError, match="per_prompt"):
        policy_samples(model, chat_tok, prompts, per_prompt=0, max_new_tokens=6)


# The shipped record: its schema, then the lesson's claims in every seed ---------------------


def _check_schema(data, *, min_seeds):
    settings = data["settings"]
    seeds = settings["seeds"]
    assert len(set(seeds)) == len(seeds) >= min_seeds
    assert {k: v for k, v in settings.items() if k not in ("seeds", "max_steps")} == {
        k: v for k, v in LEARN_SETTINGS.items() if k != "max_steps"
    }
    assert isinstance(data["seconds"], int) and data["seconds"] > 0
    prompts = [p["prompt"][-1]["content"] for p in rl_prompts(8, split="validation")]
    for name, experiment in data["experiments"].items():
        assert experiment["reward"] == LEARN_REWARDS[name].__name__
        assert [r["seed"] for r in experiment["runs"]] == seeds
        for run in experiment["runs"]:
            assert (run["loss_type"], run["beta"]) == (settings["loss_type"], settings["beta"])
            assert all(len(run[m]) == settings["max_steps"] for m in LEARN_METRICS)
            limit = 1.0 if name == "learns" else settings["max_completion_length"]
            assert all(0.0 <= r <= limit for r in run["reward"])
            for when in ("before", "after"):
                assert [s["prompt"] for s in run[when]] == prompts[: settings["sample_prompts"]]
                assert all(
                    len(s["completions"]) == settings["samples_per_prompt"]
                    and all(isinstance(t, str) for t in s["completions"])
                    for s in run[when]
                )
    if set(data["experiments"]) == {"learns", "games"}:
        learns, games = (data["experiments"][n]["runs"] for n in ("learns", "games"))
        # Same seed, same checkpoint, same sampling generator: the same samples before training.
        assert [r["before"] for r in learns] == [r["before"] for r in games]


@pytest.fixture(scope="module")
def record():
    return recorded_learn_runs()


def test_the_shipped_record_holds_both_experiments_and_three_seeds(record):
    assert set(record["experiments"]) == set(LEARN_REWARDS)
    _check_schema(record, min_seeds=3)


def test_claim_the_reward_rises_from_its_start_in_every_seed(record):
    """Lesson 12: the pretrained model says "water" in fewer than one completion of five (TRL's
    mean reward over steps 1-5, and the held-out samples); over the last 5 of the 40 steps in more
    than 9 of 10, in every seed."""
    for rise, run in zip(reward_rise(record, "learns", window=WINDOW), _runs(record, "learns")):
        assert rise["start"] < 0.2 and rise["end"] > 0.9, rise
        before, after = sample_stats(run["before"]), sample_stats(run["after"])
        assert before["has_word"] < 0.2 and after["has_word"] > 0.9, (run["seed"], before, after)


def test_claim_the_logged_loss_is_no_progress_signal(record):
    """Lesson 12: while the reward rises, the loss TRL logs stays within 0.1 of 0 at every step
    of every seed, and its start and end windows differ by less than a tenth of the reward's
    rise. At the end nearly every group's four completions all score 1 (TRL's
    ``frac_reward_zero_std``): their advantages, hence their loss, are 0."""
    for rise, run in zip(reward_rise(record, "learns", window=WINDOW), _runs(record, "learns")):
        assert rise["loss_min"] >= -0.1 and rise["loss_max"] <= 0.1, rise
        loss_change = abs(_mean(run["loss"][-WINDOW:]) - _mean(run["loss"][:WINDOW]))
        assert loss_change < (rise["end"] - rise["start"]) / 10, (rise, loss_change)
        assert _mean(run["frac_reward_zero_std"][-WINDOW:]) >= 0.95, run["seed"]


def test_claim_the_count_reward_is_gamed_by_repeating_the_word(record):
    """Lesson 12: the 0/1 reward's policy already says "water" at least 4 times a completion on
    average; rewarded for each "water", the policy's reward keeps rising (at least 5 a
    completion over the last 5 steps, where groups still differ), its samples say the word more
    often than the 0/1 run's of the same seed, and fewer of their words are distinct (by at
    least 0.2), in every seed."""
    rises = reward_rise(record, "games", window=WINDOW)
    for rise, learns, games in zip(rises, _runs(record, "learns"), _runs(record, "games")):
        assert rise["end"] >= 5.0 and _mean(games["frac_reward_zero_std"][-WINDOW:]) <= 0.1, rise
        honest, gamed = sample_stats(learns["after"]), sample_stats(games["after"])
        assert honest["word_count"] >= 4.0, (games["seed"], honest)
        assert gamed["word_count"] > honest["word_count"], (games["seed"], honest, gamed)
        assert gamed["distinct"] < honest["distinct"] - 0.2, (games["seed"], honest, gamed)
        assert gamed["distinct"] < sample_stats(games["before"])["distinct"] - 0.5, games["seed"]


def _runs(data, experiment):
    return data["experiments"][experiment]["runs"]


def _mean(values):
    return sum(values) / len(values)


# The tool ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_the_tool_records_a_short_run_with_the_shipped_schema(trl, tmp_path, capsys):
    from tools.grpo_learn import main

    main(["--out", str(tmp_path), "--steps", "1", "--seeds", "0", "--experiments", "games"])
    data = recorded_learn_runs(directory=tmp_path)
    assert data["settings"]["max_steps"] == 1 and list(data["experiments"]) == ["games"]
    _check_schema(data, min_seeds=1)
    assert "wrote" in capsys.readouterr().out
