"""Lesson 12: a GRPO run that learns a checkable reward, and a reward that the policy games.

TRL's ``GRPOTrainer`` on the course GPT-2 (:func:`lmlessons.course.rl.grpo_trainer`, the
instruction set's prompts), rewarded for one word of the course corpus, :data:`TARGET_WORD`:

* :func:`has_word_reward`: 1.0 when the completion contains the word, else 0.0: a reward a
  program can check, which the pretrained model earns by chance in a few completions of a
  hundred and learns to earn almost always (experiment ``learns``; it learns it by repeating
  the word);
* :func:`word_count_reward`: the number of times the completion says the word: meant to reward
  completions about water, it is satisfied by saying the word again and again (experiment
  ``games``: reward hacking).

:func:`learn_run` trains one run and keeps TRL's logged reward, loss and mean completion length
step by step, with completions sampled before and after training (:func:`policy_samples`, seeded,
on held-out prompts). ``python -m tools.grpo_learn`` records every experiment and seed into
``data/grpo_learn/`` (:func:`record_learn_runs`); :func:`recorded_learn_runs` loads that record,
:func:`reward_rise` summarises each seed's start and end, :func:`sample_stats` measures the
samples and :func:`learn_figure` draws the mean reward beside the logged loss.
"""

from __future__ import annotations

import re
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import check_generator, check_int, check_model
from lmlessons.course.rl import (
    GRPO_RECORDING,
    RUN_DEFAULTS,
    completion_text,
    grpo_trainer,
    rl_prompts,
    run_summary,
)
from lmlessons.sampling import sample

__all__ = [
    "TARGET_WORD",
    "word_count",
    "has_word_reward",
    "word_count_reward",
    "LEARN_REWARDS",
    "LEARN_SETTINGS",
    "LEARN_METRICS",
    "policy_samples",
    "learn_run",
    "record_learn_runs",
    "LEARN_RECORDING",
    "recorded_learn_runs",
    "reward_rise",
    "sample_stats",
    "learn_figure",
]

#: The word both rewards look for: a word of the course corpus (its ``sea`` and ``weather``
#: topics) that the pretrained GPT-2 says by chance in a few completions of a hundred.
TARGET_WORD = "water"

_WORD = re.compile(r"[a-z']+")


def word_count(text: str, word: str = TARGET_WORD) -> int:
    """How many times ``text`` says ``word`` as a whole word (lower case; "seawater" and
    "waters" are other words)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not isinstance(word, str) or not _WORD.fullmatch(word):
        raise ValueError(f"word must be one lower-case word, got {word!r}")
    return _WORD.findall(text.lower()).count(word)


def _counts(completions: object) -> list[int]:
    if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
        raise TypeError("completions must be a list (one completion per row)")
    return [word_count(completion_text(c)) for c in completions]


def has_word_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for each completion that contains :data:`TARGET_WORD`, else 0.0 (TRL's reward
    signature: ``GRPOTrainer`` also passes ``prompts``, ``completion_ids`` and the dataset's
    columns, which this reward ignores)."""
    return [float(n > 0) for n in _counts(completions)]


def word_count_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """The number of times each completion says :data:`TARGET_WORD` (TRL's reward signature):
    more mentions, more reward, whatever the rest of the completion says."""
    return [float(n) for n in _counts(completions)]


#: The recorded experiments: the reward function of each.
LEARN_REWARDS: dict[str, Callable[..., list[float]]] = {
    "learns": has_word_reward,
    "games": word_count_reward,
}

#: The settings of the recorded runs: lesson 12's (:data:`lmlessons.course.rl.RUN_DEFAULTS`,
#: 8 prompts x 4 completions a step, at most 16 new tokens, ``beta = 0``, TRL's default
#: ``loss_type``), but a learning rate of 1e-3, so that the 0/1 reward rises within 25 steps, and
#: 40 steps, so that the count reward has time to run past it. The samples: 4 completions of each
#: of 8 held-out prompts, at temperature 1 as TRL samples.
LEARN_SETTINGS: dict[str, Any] = {
    **RUN_DEFAULTS,
    "learning_rate": 1e-3,
    "loss_type": "dapo",
    "max_steps": 40,
    "word": TARGET_WORD,
    "sample_prompts": 8,
    "samples_per_prompt": 4,
    "sample_split": "validation",
}

#: What :func:`learn_run` keeps of TRL's log, each step: its name here and TRL's key.
LEARN_METRICS: dict[str, str] = {
    "reward": "reward",
    "loss": "loss",
    "mean_length": "completions/mean_length",
    "frac_reward_zero_std": "frac_reward_zero_std",  # groups whose rewards are all equal
}


@torch.no_grad()
def policy_samples(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[Mapping[str, Any]],
    *,
    per_prompt: int,
    max_new_tokens: int,
    generator: torch.Generator | None = None,
) -> list[dict[str, Any]]:
    """``per_prompt`` completions of each prompt (rows of :func:`rl_prompts`), sampled at
    temperature 1 (no top-k, no top-p: ``GRPOConfig``'s defaults) with
    :func:`lmlessons.sampling.sample` from the prompt rendered by the chat template with the
    generation prompt, and cut at the end-of-turn token. Returns ``[{"prompt": the user's text,
    "completions": [text, ...]}]``."""
    model = check_model(model)
    per_prompt = check_int("per_prompt", per_prompt, minimum=1)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
    check_generator(generator)
    eos = check_int("tokenizer.eos_token_id", tokenizer.eos_token_id, minimum=0)
    out = []
    for row in prompts:
        rendered = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)
        ids = torch.tensor(rendered["input_ids"]).repeat(per_prompt, 1)  # (n, T)
        new = sample(
            model, ids, max_new_tokens=max_new_tokens, eos_token_id=eos, generator=generator
        )[:, ids.shape[1] :]  # (n, max_new_tokens at most): the completions
        texts = []
        for tokens in new.tolist():
            tokens = tokens[: tokens.index(eos)] if eos in tokens else tokens
            texts.append(tokenizer.decode(tokens, skip_special_tokens=True))
        out.append({"prompt": completion_text(row["prompt"]), "completions": texts})
    return out


def _samples(trainer: Any, seed: int, settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    prompts = rl_prompts(settings["sample_prompts"], split=settings["sample_split"])
    return policy_samples(
        trainer.model,
        trainer.processing_class,
        prompts,
        per_prompt=settings["samples_per_prompt"],
        max_new_tokens=settings["max_completion_length"],
        generator=torch.Generator().manual_seed(seed),
    )


def learn_run(
    output_dir: str, experiment: str, *, seed: int, max_steps: int | None = None
) -> dict[str, Any]:
    """One recorded run: a :func:`lmlessons.course.rl.grpo_trainer` with :data:`LEARN_SETTINGS`
    and the ``experiment``'s reward (:data:`LEARN_REWARDS`), trained ``max_steps`` steps (default:
    the settings'). Returns ``{"seed", "loss_type", "beta", name: [value per step] for each of
    :data:`LEARN_METRICS`, "before": samples, "after": samples}``, the samples of
    :func:`policy_samples` on held-out prompts with the same generator seed before and after."""
    if experiment not in LEARN_REWARDS:
        raise ValueError(f"experiment must be one of {sorted(LEARN_REWARDS)}, got {experiment!r}")
    seed = check_int("seed", seed, minimum=0)
    settings = dict(LEARN_SETTINGS)
    if max_steps is not None:
        settings["max_steps"] = check_int("max_steps", max_steps, minimum=1)
    torch.manual_seed(seed)  # TRL samples with the global generator; its Trainer seeds it too
    trainer = grpo_trainer(
        output_dir,
        reward_funcs=LEARN_REWARDS[experiment],
        seed=seed,
        **{k: settings[k] for k in (*RUN_DEFAULTS, "loss_type", "max_steps")},
    )
    before = _samples(trainer, seed, settings)
    trainer.train()
    after = _samples(trainer, seed, settings)
    logs = [e for e in trainer.state.log_history if "loss" in e and "reward" in e]
    metrics = {name: [float(e[key]) for e in logs] for name, key in LEARN_METRICS.items()}
    run = {"seed": seed, "loss_type": settings["loss_type"], "beta": settings["beta"]}
    return {**run, **metrics, "before": before, "after": after}


def _learn_runs(
    experiment: str, seeds: Sequence[int], max_steps: int, log: Callable[[str], None] | None
) -> list[dict[str, Any]]:
    """Every seed's :func:`learn_run` of ``experiment``, its per-step metrics to 4 decimals."""
    runs = []
    for seed in seeds:
        start = time.time()
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = learn_run(tmp, experiment, seed=seed, max_steps=max_steps)
        for name, values in run.items():
            if isinstance(values, list) and values and isinstance(values[0], float):
                run[name] = [round(v, 4) for v in values]
        runs.append(run)
        if log is not None:
            before, after = sample_stats(run["before"]), sample_stats(run["after"])
            log(
                f"{experiment:7s} seed={seed} reward {run['reward'][0]:.2f} -> "
                f"{run['reward'][-1]:.2f}, samples: word count {before['word_count']:.2f} -> "
                f"{after['word_count']:.2f} ({time.time() - start:.0f} s)"
            )
    return runs


def record_learn_runs(
    experiments: Sequence[str],
    *,
    seeds: Sequence[int],
    max_steps: int,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record :func:`recorded_learn_runs` reads: ``settings`` (:data:`LEARN_SETTINGS` with
    ``max_steps`` and ``seeds``), ``seconds`` (the recording's wall time) and, per experiment,
    its ``reward`` (the function's name) and its seeds' :func:`learn_run`, per-step metrics
    rounded to 4 decimals. ``log``: called with one line per run (None: silent)."""
    unknown = [e for e in experiments if e not in LEARN_REWARDS]
    if unknown:
        raise ValueError(f"experiments must be among {sorted(LEARN_REWARDS)}, got {unknown}")
    start = time.time()
    recorded = {
        name: {
            "reward": LEARN_REWARDS[name].__name__,
            "runs": _learn_runs(name, seeds, max_steps, log),
        }
        for name in experiments
    }
    return {
        "settings": {**LEARN_SETTINGS, "max_steps": max_steps, "seeds": list(seeds)},
        "seconds": round(time.time() - start),
        "experiments": recorded,
    }


#: Lesson 13's recording (``data/grpo_learn/runs.json``), made by ``python -m tools.grpo_learn``:
#: the keys of lesson 12's.
LEARN_RECORDING = replace(GRPO_RECORDING, folder="grpo_learn", tool="grpo_learn")


def recorded_learn_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The record of ``python -m tools.grpo_learn`` (``data/grpo_learn/runs.json``, or the same
    file name in ``directory``): ``settings`` (:data:`LEARN_SETTINGS` with ``seeds``),
    ``seconds`` (the recording's wall time) and ``experiments``, ``learns`` and ``games``: each
    its ``reward`` (the function's name) and ``runs``, as :func:`learn_run` returns them."""
    return LEARN_RECORDING.load(directory)


def reward_rise(
    data: dict[str, Any], experiment: str, *, window: int = 5
) -> list[dict[str, float]]:
    """Each seed's mean reward at the start (its mean over steps 1 to ``window``) and at the end
    (over its last ``window`` steps), and the lowest and highest loss TRL logged in the run:
    ``[{"seed", "start", "end", "loss_min", "loss_max"}, ...]`` in the record's order (the
    per-seed values of :func:`lmlessons.course.rl.run_summary`)."""
    window = check_int("window", window, minimum=1)
    if experiment not in data["experiments"]:
        raise ValueError(f"experiment must be one of {sorted(data['experiments'])}")
    runs = data["experiments"][experiment]["runs"]
    if any(len(r["reward"]) < window for r in runs):
        raise ValueError(f"window must be at most the number of steps, got {window}")
    start = run_summary(data, experiment, metric="reward", steps=(1, window))
    end = run_summary(data, experiment, metric="reward", last=window)
    ((key, first),) = start.items()  # one loss type, one beta: one group
    return [
        {
            "seed": r["seed"],
            "start": s,
            "end": e,
            "loss_min": min(r["loss"]),
            "loss_max": max(r["loss"]),
        }
        for r, s, e in zip(runs, first["per_seed"], end[key]["per_seed"])
    ]


def sample_stats(samples: Sequence[Mapping[str, Any]], word: str = TARGET_WORD) -> dict[str, float]:
    """What the completions of :func:`policy_samples` say: ``has_word`` the share that contain
    ``word``, ``word_count`` the mean number of times they say it, ``distinct`` the mean share
    of distinct words among a completion's words (1.0: no word repeated; a completion without
    words counts 1.0), ``n`` the number of completions."""
    texts = [t for row in samples for t in row["completions"]]
    if not texts:
        raise ValueError("samples must hold at least one completion")
    counts = [word_count(t, word) for t in texts]
    words = [_WORD.findall(t.lower()) for t in texts]
    distinct = [len(set(w)) / len(w) if w else 1.0 for w in words]
    return {
        "has_word": sum(c > 0 for c in counts) / len(texts),
        "word_count": sum(counts) / len(texts),
        "distinct": sum(distinct) / len(texts),
        "n": float(len(texts)),
    }


def learn_figure(data: dict[str, Any], experiment: str = "learns") -> Any:
    """The ``experiment``'s runs step by step: the mean reward of each seed (left) and the loss
    TRL logged (right, on its own axis), one colour per seed, the seeds' mean in black."""
    from matplotlib.figure import Figure

    if experiment not in data["experiments"]:
        raise ValueError(f"experiment must be one of {sorted(data['experiments'])}")
    runs = data["experiments"][experiment]["runs"]
    fig = Figure(figsize=(8.0, 2.9), dpi=100)
    axes = fig.subplots(1, 2)
    for ax, metric, title in zip(axes, ("reward", "loss"), ("mean reward", "logged loss")):
        for i, run in enumerate(runs):
            steps = range(1, len(run[metric]) + 1)
            ax.plot(
                steps, run[metric], color=f"C{i}", lw=1.2, alpha=0.8, label=f"seed {run['seed']}"
            )
        mean = torch.tensor([r[metric] for r in runs]).mean(0)  # (steps,): over the seeds
        ax.plot(range(1, mean.shape[0] + 1), mean.tolist(), color="black", lw=2.2, label="mean")
        ax.set_xlabel("optimizer step")
        ax.set_title(
            f"{title} ({experiment}: {data['experiments'][experiment]['reward']})", fontsize=9
        )
        ax.grid(alpha=0.3)
    axes[1].axhline(0.0, color="gray", lw=0.8)
    axes[0].legend(fontsize=7, loc="upper left")
    return fig
