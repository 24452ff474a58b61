"""Lesson 12: the prompts, reward functions and GRPO runs of the RL lesson.

* :func:`rl_prompts`: ``n`` prompts of lesson 10's instruction set
  (:func:`lmlessons.course.chat.instruction_set`), evenly spaced through it, so both tasks
  appear: the same list on every machine. Each row is TRL's conversational prompt-only format,
  ``{"prompt": [user message], "answer": str, "task": str}``; ``GRPOTrainer`` hands the extra
  columns (``answer``, ``task``) to every reward function as keyword arguments.
* Reward functions with TRL's signature ``reward(completions, **kwargs) -> list[float]``, one
  reward per completion (``GRPOTrainer._calculate_rewards`` also passes ``prompts``,
  ``completion_ids`` and the dataset's columns):

  - :func:`length_reward`: the completion's length in tokens, its end-of-turn token included
    (``len(completion_ids[i])``, the row sum of TRL's ``completion_mask``): a reward that grows
    with length, the one that shows what each ``loss_type`` does to length.
  - :func:`correctness_reward`: 1.0 when the completion's first word is the instruction set's
    answer, else 0.0.
  - :func:`completion_text`: the text of a completion in either of TRL's formats (a string, or a
    list of messages whose last one is the assistant's).

Names are stable: lesson 08's bug zoo uses them too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmlessons._checks import check_int
from lmlessons.course.chat import instruction_set

__all__ = [
    "rl_prompts",
    "completion_text",
    "length_reward",
    "shortness_reward",
    "correctness_reward",
    "RUN_DEFAULTS",
    "RUN_METRICS",
    "grpo_trainer",
    "grpo_run",
    "REWARDS",
    "EXPERIMENTS",
    "RUNS_FILE",
    "recorded_runs",
    "run_summary",
]

_WORD = re.compile(r"[a-z']+")


def rl_prompts(n: int = 8, *, split: str = "train") -> list[dict[str, Any]]:
    """``n`` rows ``{"prompt", "answer", "task"}`` of :func:`instruction_set` (``split``), the
    examples at ``i * len / n`` for ``i < n``: evenly spaced, both tasks when ``n >= 2``.

    ``prompt`` is the user message alone (TRL's conversational prompt-only format: the chat
    template adds ``assistant:``), ``answer`` the reference answer's text."""
    n = check_int("n", n, minimum=1)
    examples = instruction_set(split)
    if n > len(examples):
        raise ValueError(f"n must be at most {len(examples)} (the {split} examples), got {n}")
    rows = [examples[i * len(examples) // n] for i in range(n)]
    return [
        {"prompt": e["prompt"], "answer": e["completion"][-1]["content"], "task": e["task"]}
        for e in rows
    ]


def completion_text(completion: str | Sequence[dict[str, str]]) -> str:
    """The text of one completion as TRL hands it to a reward function: the string itself, or
    the ``content`` of the last message of a conversational completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(
        "completion must be a string or a non-empty list of {'role', 'content'} messages, got "
        f"{type(completion).__name__}"
    )


def _check_completions(completions: object) -> list[Any]:
    if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
        raise TypeError("completions must be a list (one completion per row)")
    return list(completions)


def length_reward(
    completions: Sequence[Any],
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float]:
    """The length of each completion, a reward that grows with length (TRL's reward signature).

    With ``completion_ids`` (``GRPOTrainer`` always passes them): the number of tokens, the
    end-of-turn token included, i.e. the row sum of TRL's ``completion_mask``. Without: the
    number of words of :func:`completion_text`."""
    completions = _check_completions(completions)
    if completion_ids is not None:
        if len(completion_ids) != len(completions):
            raise ValueError(
                f"completion_ids must hold one row per completion ({len(completions)}), "
                f"got {len(completion_ids)}"
            )
        return [float(len(ids)) for ids in completion_ids]
    return [float(len(_WORD.findall(completion_text(c).lower()))) for c in completions]


def shortness_reward(
    completions: Sequence[Any],
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float]:
    """Minus :func:`length_reward`: a reward that grows as the completion gets shorter."""
    return [-r for r in length_reward(completions, completion_ids)]


def correctness_reward(
    completions: Sequence[Any], answer: Sequence[str], **kwargs: Any
) -> list[float]:
    """1.0 for a completion whose first word is its row's ``answer`` (the dataset column of
    :func:`rl_prompts`, compared in lower case), 0.0 otherwise (TRL's reward signature)."""
    completions = _check_completions(completions)
    if isinstance(answer, str) or len(answer) != len(completions):
        raise ValueError("answer must be a list with one reference answer per completion")
    rewards = []
    for c, a in zip(completions, answer):
        words = _WORD.findall(completion_text(c).lower())
        rewards.append(float(bool(words) and words[0] == a.lower()))
    return rewards


#: The settings of the lesson's GRPO runs (TRL's ``GRPOConfig`` names): 8 prompts x 4
#: completions a step, at most 16 new tokens, no KL term, one update per generation (and dropout
#: off, ``disable_dropout=True``, unless a run says otherwise).
RUN_DEFAULTS: dict[str, Any] = {
    "num_prompts": 8,
    "num_generations": 4,
    "max_completion_length": 16,
    "learning_rate": 1e-4,
    "beta": 0.0,
}


#: The ``GRPOConfig`` settings every lesson run shares: on the CPU, a log entry every step,
#: nothing saved, reported or shown as a progress bar.
_QUIET_CPU_RUN: dict[str, Any] = {
    "report_to": "none",
    "save_strategy": "no",
    "use_cpu": True,
    "logging_steps": 1,
    "disable_tqdm": True,
}


def _policy(output_dir: str, *, with_reference: bool) -> Any:
    """The course GPT-2; ``with_reference``: also saved to ``output_dir/reference`` and named
    by that path, from which TRL loads its reference model (``config._name_or_path``)."""
    from lmlessons.course.checkpoints import load_checkpoint

    model = load_checkpoint("gpt2")
    if with_reference:
        reference = Path(output_dir) / "reference"
        model.save_pretrained(reference)
        model.config._name_or_path = str(reference)
    return model


def grpo_trainer(
    output_dir: str,
    *,
    loss_type: str = "dapo",
    reward_funcs: Any = length_reward,
    max_steps: int = 1,
    seed: int = 0,
    num_prompts: int = RUN_DEFAULTS["num_prompts"],
    num_generations: int = RUN_DEFAULTS["num_generations"],
    max_completion_length: int = RUN_DEFAULTS["max_completion_length"],
    learning_rate: float = RUN_DEFAULTS["learning_rate"],
    beta: float = RUN_DEFAULTS["beta"],
    **config: Any,
) -> Any:
    """A TRL ``GRPOTrainer`` on the course GPT-2 (``load_checkpoint("gpt2")``) with
    :func:`lmlessons.course.chat.chat_tokenizer` (its ``eos_token`` is ``[SEP]``: TRL stops a
    generation there) and :func:`rl_prompts` (``num_prompts``) as the dataset.

    One step generates ``num_generations`` completions of every prompt (``num_prompts *
    num_generations`` completions, sampled at temperature 1, no vLLM) and takes one optimizer
    step on them. With ``beta > 0`` the checkpoint is saved to ``output_dir/reference``, from
    where TRL loads its reference model. ``config``: more ``GRPOConfig`` arguments
    (``gradient_accumulation_steps``, ``steps_per_generation``, ``scale_rewards``, ...).
    Nothing else is written to ``output_dir``
    (``save_strategy="no"``, ``report_to="none"``) and nothing is printed while it trains
    (``PrinterCallback`` removed); TRL is imported here."""
    import datasets
    import trl
    from transformers import PrinterCallback

    from lmlessons.course.chat import chat_tokenizer

    num_prompts = check_int("num_prompts", num_prompts, minimum=1)
    num_generations = check_int("num_generations", num_generations, minimum=2)
    ga = int(config.pop("gradient_accumulation_steps", 1))
    config.setdefault("disable_dropout", True)  # the policy's log-probs as the reference's
    args = trl.GRPOConfig(
        output_dir=output_dir,
        **_QUIET_CPU_RUN,
        seed=seed,
        data_seed=seed,
        max_steps=max_steps,
        loss_type=loss_type,
        beta=beta,
        learning_rate=learning_rate,
        per_device_train_batch_size=num_prompts * num_generations // ga,
        gradient_accumulation_steps=ga,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        **config,
    )
    trainer = trl.GRPOTrainer(
        model=_policy(output_dir, with_reference=beta > 0),
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=datasets.Dataset.from_list(rl_prompts(num_prompts)),
        processing_class=chat_tokenizer(),
    )
    trainer.remove_callback(PrinterCallback)  # TRL's log would be printed at every step
    return trainer


#: What :func:`grpo_run` keeps of TRL's log, each step: its name here and TRL's key.
RUN_METRICS: dict[str, str] = {
    "loss": "loss",
    "reward": "reward",
    "mean_length": "completions/mean_length",
    "clipped_ratio": "completions/clipped_ratio",
    "kl": "kl",  # logged by TRL only when beta > 0
}


def grpo_run(output_dir: str, **kwargs: Any) -> dict[str, list[float]]:
    """Train a :func:`grpo_trainer` (``kwargs`` are its arguments) and return TRL's logged
    metrics, step by step: ``{name: [value of step 1, step 2, ...]}`` for every name of
    :data:`RUN_METRICS` (``loss`` the logged loss, ``reward`` the mean reward of the step's
    completions, ``mean_length`` their mean length in tokens, ``clipped_ratio`` the share that
    hit ``max_completion_length`` without ``[SEP]``)."""
    import torch

    torch.manual_seed(int(kwargs.get("seed", 0)))  # sampling; TRL's Trainer seeds it too
    trainer = grpo_trainer(output_dir, **kwargs)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry and "reward" in entry]
    return {
        name: [float(entry[key]) for entry in logs]
        for name, key in RUN_METRICS.items()
        if all(key in entry for entry in logs)
    }


#: The reward functions by name (the names the recorded runs store).
REWARDS: dict[str, Any] = {
    "length_reward": length_reward,
    "shortness_reward": shortness_reward,
    "correctness_reward": correctness_reward,
}

#: The recorded experiments of ``python -m tools.grpo_runs``: the reward function's name and the
#: runs, each ``(loss_type, beta)``, every one with each seed.
EXPERIMENTS: dict[str, dict[str, Any]] = {
    "shorter": {
        "reward": "shortness_reward",
        "runs": [(t, 0.0) for t in ("grpo", "bnpo", "dr_grpo", "dapo")],
    },
    "longer": {
        "reward": "length_reward",
        "runs": [(t, 0.0) for t in ("grpo", "bnpo", "dr_grpo", "dapo")],
    },
    "loss_start": {
        "reward": "shortness_reward",
        "runs": [("grpo", 0.04), ("dapo", 0.04), ("dapo", 0.0)],
    },
}

RUNS_FILE = "runs.json"  # in lmlessons/data/grpo/, made by python -m tools.grpo_runs
RUNS_DIR = Path(__file__).resolve().parent.parent / "data" / "grpo"


def recorded_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The runs recorded by ``python -m tools.grpo_runs``: ``settings`` (those of
    :data:`RUN_DEFAULTS`, ``max_steps``, ``seeds``) and ``experiments``, by name (see
    :data:`EXPERIMENTS`): each its ``reward`` and ``runs``, a list of ``{"loss_type", "beta",
    "seed", "loss", "reward", "mean_length", "clipped_ratio"[, "kl"]}``, one value per step."""
    path = (RUNS_DIR if directory is None else Path(directory)) / RUNS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no recorded GRPO runs at {str(path)!r}")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def run_summary(
    data: dict[str, Any],
    experiment: str,
    *,
    metric: str = "mean_length",
    last: int = 5,
    steps: tuple[int, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each run of ``experiment`` in :func:`recorded_runs`'s ``data``, grouped by
    ``(loss_type, beta)`` and summarised over its seeds: ``{"grpo": {"first": ..., "final":
    ..., "std": ..., "per_seed": [...], "beta": ...}, ...}`` (keyed ``"dapo, beta=0.04"`` when one
    loss type runs with several betas). ``first`` is the mean over seeds of step 1's ``metric``;
    ``final`` the mean over seeds of each seed's mean over its ``last`` steps, ``std`` their
    standard deviation (Bessel's; 0 for one seed), ``per_seed`` those per-seed values.
    ``steps=(a, b)``: over steps ``a`` to ``b`` (1-based, both included) instead of the last."""
    if experiment not in data.get("experiments", {}):
        raise ValueError(f"experiment must be one of {sorted(data.get('experiments', {}))}")
    last = check_int("last", last, minimum=1)
    runs = data["experiments"][experiment]["runs"]
    betas: dict[str, set[float]] = {}
    for run in runs:
        betas.setdefault(run["loss_type"], set()).add(run["beta"])
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        several = len(betas[run["loss_type"]]) > 1
        key = f"{run['loss_type']}, beta={run['beta']:g}" if several else run["loss_type"]
        groups.setdefault(key, []).append(run)
    out = {}
    for key, group in groups.items():
        window = slice(-last, None) if steps is None else slice(steps[0] - 1, steps[1])
        finals = [sum(r[metric][window]) / len(r[metric][window]) for r in group]
        mean = sum(finals) / len(finals)
        var = sum((f - mean) ** 2 for f in finals) / max(len(finals) - 1, 1)
        out[key] = {
            "loss_type": group[0]["loss_type"],
            "beta": group[0]["beta"],
            "first": sum(r[metric][0] for r in group) / len(group),
            "final": mean,
            "std": var**0.5,
            "per_seed": finals,
        }
    return out
