"""Tests that pin what mutation testing of Part III's course layer found unpinned.

``mutmut`` on ``lmlessons.course.records``, ``preferences``, ``rl`` and ``grpo_learn`` left
mutants alive that change a default (``rl_prompts``' ``n``, ``run_summary``'s ``last``,
``reinforce_estimates``' ``baseline``, ...), a bound of a check, the text of an error message
(the argument it names), how a preference pair is built from its corpus (which wrong word, which
three words, which kind), what the recording helpers hand to a run and log, and the styling of
``learn_figure``. Each test compares with a hand-written expectation, a plain computation or the
message the source's f-string writes, and fails on those mutants. A tiny hand-made corpus, fake
runs, no model, no training.
"""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import matplotlib
import pytest
import torch
from _exact import raises_exactly
from matplotlib.colors import to_hex

from lmlessons.course import grpo_learn, rl
from lmlessons.course.corpus import Corpus
from lmlessons.course.preferences import (
    KINDS,
    bradley_terry,
    chosen_course,
    encode_pair,
    kl_objective,
    kl_optimal_policy,
    preference_sample,
    preference_set,
    select_runs,
)
from lmlessons.course.records import check_record, load_record, seed_spread, write_record


def _clock(monkeypatch, module) -> None:
    """``module.time.time`` reads a clock that moves 2 s a call, from 1000 s."""
    ticks = itertools.count(1000.0, 2.0)
    monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: next(ticks)))


# ----------------------------------------------------------------------------------- records


def test_check_record_names_the_record_and_the_type_it_got():
    raises_exactly(
        TypeError,
        "record must be a JSON object (dict), got list",
        lambda: check_record([], ("runs",)),
    )


def test_load_record_names_the_file_it_read(tmp_path):
    (tmp_path / "r.json").write_text("[1]", encoding="utf-8")
    path = str(tmp_path / "r.json")
    raises_exactly(
        TypeError,
        f"{path} must be a JSON object (dict), got list",
        lambda: load_record("r.json", folder="x", keys=(), command="c", directory=tmp_path),
    )
    raises_exactly(
        FileNotFoundError,
        f"no recorded runs at {str(tmp_path / 'no.json')!r}; record them with `make it`",
        lambda: load_record("no.json", folder="x", keys=(), command="make it", directory=tmp_path),
    )


def test_write_record_makes_missing_parent_folders(tmp_path):
    path = write_record({"a": [1, 2]}, tmp_path / "one" / "two", "r.json")
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": [1, 2]}
    raises_exactly(
        TypeError, "record must be a mapping, got list", lambda: write_record([], tmp_path, "x")
    )


def test_seed_spread_messages():
    raises_exactly(
        TypeError, "values must be a sequence of numbers, one per seed", lambda: seed_spread("1")
    )
    raises_exactly(
        ValueError, "values must hold at least one value (one per seed)", lambda: seed_spread([])
    )


# ------------------------------------------------------------------------------- preferences


def _corpus(first_sentences: list[str]) -> Corpus:
    """Three one-sentence documents on three topics (all in train), and a held-out one."""
    return Corpus(
        name="tiny",
        documents=[[s] for s in first_sentences] + [["Fish swim in the deep cold sea."]],
        topics=[*["weather", "music", "weather", "sea"][: len(first_sentences)], "sea"],
        train_indices=tuple(range(len(first_sentences))),
        validation_indices=(len(first_sentences),),
    )


TINY = [
    "Rain fell on the quiet town.",
    "Late? Xylophones play on, softly.",
    "Rain came again to the hills.",
    "Snow lay deep on the hills.",
]


def test_preference_set_builds_each_kind_of_pair_from_its_corpus():
    pairs = preference_set(corpus=_corpus(TINY))
    got = [
        (p["task"], p["kind"], p["chosen"][0]["content"], p["rejected"][0]["content"])
        for p in pairs
    ]
    # first-word questions come first: even positions take the next different first word
    # (position 0 -> "late", not the "snow" two further), odd ones the sentence's first three
    # words (after the first "? ", punctuation stripped, lower case); then the topic questions,
    # each answered with the (i % 2)-th other topic of the sorted ("music", "sea", "weather").
    assert got == [
        ("first_word", "wrong word", "rain", "late"),
        ("first_word", "too long", "late", "late xylophones play"),
        ("first_word", "wrong word", "rain", "snow"),
        ("first_word", "too long", "snow", "snow lay deep"),
        ("topic", "wrong topic", "weather", "music"),
        ("topic", "wrong topic", "music", "weather"),
        ("topic", "wrong topic", "weather", "music"),
        ("topic", "wrong topic", "sea", "weather"),
    ]
    assert {p["kind"] for p in pairs} == set(KINDS)
    assert pairs[0]["prompt"] == [{"role": "user", "content": "First word? " + TINY[0]}]
    assert preference_set("train", corpus=_corpus(TINY)) == pairs  # "train" is the default


def test_preference_set_needs_two_different_first_words():
    same = ["Rain fell on the quiet town.", "Rain came again to the hills."]
    raises_exactly(
        ValueError,
        "corpus must hold sentences with at least two different first words",
        lambda: preference_set(corpus=_corpus(same)),
    )


def test_encode_pair_takes_a_pair_with_exactly_its_three_keys():
    from lmlessons.course.chat import chat_tokenizer

    pair = {
        k: v
        for k, v in preference_set(corpus=_corpus(TINY))[0].items()
        if k in ("prompt", "chosen", "rejected")
    }
    tokenizer = chat_tokenizer()
    ids = encode_pair(tokenizer, pair)
    assert set(ids) == {"prompt_ids", "chosen_ids", "rejected_ids"} and ids["chosen_ids"]
    raises_exactly(
        TypeError,
        "pair must be a dict with 'prompt', 'chosen' and 'rejected' message lists",
        lambda: encode_pair(tokenizer, {"prompt": []}),
    )


def test_preference_sample_bounds_default_seed_and_messages():
    whole = len(preference_set("validation"))
    assert preference_sample("validation", 3) == preference_sample("validation", 3, seed=0)
    assert preference_sample("validation", 3) != preference_sample("validation", 3, seed=1)
    assert len(preference_sample("validation", 1)) == 1
    assert len(preference_sample("validation", whole)) == whole  # every pair, once
    raises_exactly(ValueError, "n must be >= 1, got 0", lambda: preference_sample("validation", 0))
    raises_exactly(
        TypeError, "n must be an int, got str", lambda: preference_sample("validation", "2")
    )


def test_toy_functions_name_their_arguments():
    one = torch.zeros(3)
    raises_exactly(
        TypeError,
        "reward_chosen must be a torch.Tensor of floats, got int",
        lambda: bradley_terry(1, one),
    )
    raises_exactly(
        TypeError,
        "reward_rejected must be a torch.Tensor of floats, got int",
        lambda: bradley_terry(one, 1),
    )
    raises_exactly(
        TypeError,
        "log_reference must be a torch.Tensor of floats, got int",
        lambda: kl_optimal_policy(1, one, 1.0),
    )
    raises_exactly(
        TypeError,
        "reward must be a torch.Tensor of floats, got int",
        lambda: kl_optimal_policy(one, 1, 1.0),
    )
    raises_exactly(
        ValueError,
        "beta must be a finite number > 0, got 0.0",
        lambda: kl_optimal_policy(one, one, 0.0),
    )
    raises_exactly(
        TypeError,
        "log_policy must be a torch.Tensor of floats, got int",
        lambda: kl_objective(1, one, one, 1.0),
    )


def test_chosen_course_and_select_runs_name_the_record():
    message = "record (preference_runs()) lacks the keys ['runs'] of its kind of recording"
    raises_exactly(ValueError, message, lambda: chosen_course({}))
    raises_exactly(ValueError, message, lambda: select_runs({}, "sigmoid", 0.1))


# --------------------------------------------------------------------------------------- rl


def test_rl_prompts_default_bounds_and_messages():
    whole = len(rl.instruction_set("validation"))
    assert len(rl.rl_prompts()) == 8
    assert len(rl.rl_prompts(1, split="validation")) == 1
    assert len(rl.rl_prompts(whole, split="validation")) == whole
    raises_exactly(ValueError, "n must be >= 1, got 0", lambda: rl.rl_prompts(0))
    raises_exactly(TypeError, "n must be an int, got str", lambda: rl.rl_prompts("2"))


def test_completion_text_of_a_message_without_content_is_empty():
    assert rl.completion_text([{"role": "assistant"}]) == ""
    raises_exactly(
        TypeError,
        "completion must be a string or a non-empty list of {'role', 'content'} messages, got int",
        lambda: rl.completion_text(3),
    )
    raises_exactly(
        TypeError,
        "completions must be a list (one completion per row)",
        lambda: rl.length_reward("a b"),
    )
    raises_exactly(
        ValueError,
        "answer must be a list with one reference answer per completion",
        lambda: rl.correctness_reward(["a"], answer="a"),
    )


def test_record_experiment_hands_each_run_its_settings_and_logs_it(monkeypatch):
    calls = []

    def fake_grpo_run(output_dir, **kwargs):
        calls.append((output_dir, kwargs))
        return {"mean_length": [12.0, 11.0, 9.5]}

    monkeypatch.setattr(rl, "grpo_run", fake_grpo_run)
    _clock(monkeypatch, rl)
    lines: list[str] = []
    data = rl.record_runs(["loss_start"], seeds=[3], max_steps=3, log=lines.append)
    assert data["experiments"]["loss_start"]["reward"] == "shortness_reward"
    assert all(isinstance(d, str) and d for d, _ in calls)
    assert [c for _, c in calls] == [
        {"loss_type": t, "beta": b, "seed": 3, "max_steps": 3, "reward_funcs": rl.shortness_reward}
        for t, b in rl.EXPERIMENTS["loss_start"]["runs"]
    ]
    assert lines[0] == "loss_start grpo     beta=0.04  seed=3 length 12.0 -> 9.5 (2 s)"
    assert len(lines) == 3


def test_run_summary_default_window_and_messages():
    runs = [{"loss_type": "grpo", "beta": 0.0, "seed": 0, "mean_length": [9.0, 1, 2, 3, 4, 5]}]
    data = {"experiments": {"e": {"runs": runs}}}
    assert rl.run_summary(data, "e")["grpo"]["final"] == 3.0  # the last 5 steps
    raises_exactly(ValueError, "experiment must be one of []", lambda: rl.run_summary({}, "e"))
    raises_exactly(ValueError, "experiment must be one of ['e']", lambda: rl.run_summary(data, "f"))
    raises_exactly(
        ValueError, "last must be >= 1, got 0", lambda: rl.run_summary(data, "e", last=0)
    )
    raises_exactly(
        TypeError, "last must be an int, got str", lambda: rl.run_summary(data, "e", last="1")
    )


def test_expected_reward_gradient_is_computed_in_float64():
    logits = torch.tensor([0.1, -1.3, 2.7, 0.4])  # float32
    rewards = torch.tensor([1.0, -0.5, 0.25, 2.0], dtype=torch.float64)
    p = logits.double().softmax(-1)
    want = p * (rewards - (p * rewards).sum())
    torch.testing.assert_close(
        rl.expected_reward_gradient(logits, rewards), want, rtol=0, atol=1e-15
    )
    raises_exactly(
        TypeError,
        "logits must be a torch.Tensor of floats, got int",
        lambda: rl.expected_reward_gradient(1, rewards),
    )
    raises_exactly(
        TypeError,
        "rewards must be a torch.Tensor of floats, got int",
        lambda: rl.expected_reward_gradient(logits, 1),
    )


def test_reinforce_estimates_defaults_bounds_and_messages():
    logits, rewards = torch.tensor([0.3, -0.2, 1.1]), torch.tensor([1.0, 0.0, 2.0])

    def draw(**kwargs):
        g = torch.Generator().manual_seed(0)
        return rl.reinforce_estimates(logits, rewards, generator=g, **kwargs)

    assert torch.equal(draw(num_samples=8), draw(num_samples=8, baseline="none"))
    assert torch.equal(
        draw(num_samples=8, baseline="group"),
        draw(num_samples=8, baseline="group", num_generations=4),
    )
    assert draw(num_samples=1).shape == (1, 3)
    assert draw(num_samples=4, baseline="rloo", num_generations=2).shape == (4, 3)
    raises_exactly(ValueError, "num_samples must be >= 1, got 0", lambda: draw(num_samples=0))
    raises_exactly(TypeError, "num_samples must be an int, got str", lambda: draw(num_samples="1"))
    raises_exactly(
        ValueError,
        "num_generations must be >= 2, got 1",
        lambda: draw(num_samples=2, num_generations=1),
    )
    raises_exactly(
        TypeError,
        "num_generations must be an int, got str",
        lambda: draw(num_samples=2, num_generations="2"),
    )
    raises_exactly(
        ValueError,
        "num_samples must be a multiple of num_generations=4, got 6",
        lambda: draw(num_samples=6, baseline="group"),
    )


def test_scaled_loss_updates_default_lr_and_messages():
    grads = torch.tensor([[1.0, -2.0], [0.5, 4.0]], dtype=torch.float64)
    updates = rl.scaled_loss_updates(grads, scale=3.0, optimizer="sgd")
    torch.testing.assert_close(updates, -1e-3 * 3.0 * grads, rtol=0, atol=1e-15)
    raises_exactly(
        TypeError,
        "gradients must be a torch.Tensor of floats, got int",
        lambda: rl.scaled_loss_updates(1, scale=1.0, optimizer="sgd"),
    )
    raises_exactly(
        ValueError,
        "gradients must have shape (steps, P), got (2,)",
        lambda: rl.scaled_loss_updates(grads[0], scale=1.0, optimizer="sgd"),
    )
    raises_exactly(
        ValueError,
        "lr must be a finite number > 0, got 0.0",
        lambda: rl.scaled_loss_updates(grads, scale=1.0, optimizer="sgd", lr=0.0),
    )
    raises_exactly(
        TypeError,
        "lr must be a number, got str",
        lambda: rl.scaled_loss_updates(grads, scale=1.0, optimizer="sgd", lr="1"),
    )


# ------------------------------------------------------------------------------- grpo_learn


def test_word_count_and_rewards_messages():
    raises_exactly(TypeError, "text must be a str, got int", lambda: grpo_learn.word_count(3))
    raises_exactly(
        TypeError,
        "completions must be a list (one completion per row)",
        lambda: grpo_learn.has_word_reward("water"),
    )
    raises_exactly(
        ValueError,
        "samples must hold at least one completion",
        lambda: grpo_learn.sample_stats([{"completions": []}]),
    )


def test_record_learn_runs_hands_each_run_its_settings_and_logs_it(monkeypatch):
    calls = []

    def fake_learn_run(output_dir, experiment, *, seed, max_steps):
        calls.append((output_dir, experiment, seed, max_steps))
        samples = [{"completions": ["water"]}]
        return {"seed": seed, "reward": [0.25, 0.5, 0.75], "before": samples, "after": samples}

    monkeypatch.setattr(grpo_learn, "learn_run", fake_learn_run)
    _clock(monkeypatch, grpo_learn)
    lines: list[str] = []
    data = grpo_learn.record_learn_runs(["learns"], seeds=[4], max_steps=3, log=lines.append)
    assert [c[1:] for c in calls] == [("learns", 4, 3)]
    assert isinstance(calls[0][0], str) and calls[0][0]
    assert data["settings"]["seeds"] == [4] and data["settings"]["max_steps"] == 3
    assert 0 < data["seconds"] < 1000
    assert lines == ["learns  seed=4 reward 0.25 -> 0.75, samples: word count 1.00 -> 1.00 (2 s)"]
    raises_exactly(
        ValueError,
        "experiments must be among ['games', 'learns'], got ['nope']",
        lambda: grpo_learn.record_learn_runs(["nope"], seeds=[0], max_steps=1, log=None),
    )


def _learn_data(rewards: list[float]) -> dict:
    run = {"seed": 0, "loss_type": "dapo", "beta": 0.0, "reward": rewards, "loss": [0.1, -0.2]}
    return {"experiments": {"learns": {"reward": "has_word_reward", "runs": [run]}}}


def test_reward_rise_default_window_bounds_and_messages():
    data = _learn_data([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    (rise,) = grpo_learn.reward_rise(data, "learns")
    assert rise["start"] == pytest.approx(0.4) and rise["end"] == pytest.approx(0.6)  # 5 steps
    (whole,) = grpo_learn.reward_rise(data, "learns", window=6)  # every step
    assert whole["start"] == whole["end"] == pytest.approx(0.5)
    (one,) = grpo_learn.reward_rise(data, "learns", window=1)
    assert (one["start"], one["end"]) == (0.0, 1.0)
    raises_exactly(
        ValueError,
        "window must be >= 1, got 0",
        lambda: grpo_learn.reward_rise(data, "learns", window=0),
    )
    raises_exactly(
        TypeError,
        "window must be an int, got str",
        lambda: grpo_learn.reward_rise(data, "learns", window="1"),
    )


def test_learn_figure_draws_seeds_mean_and_zero_line_as_styled():
    data = _learn_data([0.0, 0.5])
    data["experiments"]["learns"]["runs"].append(
        {**data["experiments"]["learns"]["runs"][0], "seed": 1}
    )
    with matplotlib.rc_context({"figure.dpi": 50}):  # the figure sets its own dpi
        fig = grpo_learn.learn_figure(data)  # "learns" is the default
    assert tuple(fig.get_size_inches()) == (8.0, 2.9) and fig.dpi == 100
    left, right = fig.axes
    assert left.get_position().x1 < right.get_position().x0  # side by side
    for ax, title in zip(fig.axes, ("mean reward", "logged loss")):
        assert ax.get_title() == f"{title} (learns: has_word_reward)"
        assert ax.title.get_fontsize() == 9 and ax.get_xlabel() == "optimizer step"
        seeds, mean = ax.lines[:2], ax.lines[2]
        assert [(ln.get_label(), ln.get_linewidth(), ln.get_alpha()) for ln in seeds] == [
            ("seed 0", 1.2, 0.8),
            ("seed 1", 1.2, 0.8),
        ]
        assert [to_hex(ln.get_color()) for ln in seeds] == [to_hex("C0"), to_hex("C1")]
        assert [list(ln.get_xdata()) for ln in seeds] == [[1, 2], [1, 2]]  # steps count from 1
        assert (mean.get_label(), mean.get_linewidth()) == ("mean", 2.2)
        assert to_hex(mean.get_color()) == to_hex("black")
        assert list(mean.get_xdata()) == [1, 2]
        assert ax.xaxis.get_gridlines()[0].get_alpha() == 0.3
    zero = right.lines[3]
    assert list(zero.get_ydata()) == [0.0, 0.0]
    assert (to_hex(zero.get_color()), zero.get_linewidth()) == (to_hex("gray"), 0.8)
    legend = left.get_legend()
    assert legend is not None and right.get_legend() is None
    assert legend.get_texts()[0].get_fontsize() == 7 and legend._loc == 2  # "upper left"
