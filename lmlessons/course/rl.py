"""Lessons 12 and 13: the prompts, reward functions and GRPO runs of the RL lessons.

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

The policy gradient on a toy policy, a softmax over a few actions with a fixed reward per action
(lesson 12's foundations): :func:`expected_reward_gradient` (exact) and
:func:`reinforce_estimates` (sampled, with the baselines of :data:`BASELINES`).
:func:`scaled_loss_updates`: what AdamW and SGD do with a loss multiplied by a constant.

The recorded runs of lesson 12 (``python -m tools.grpo_runs``): :func:`record_runs` trains and
collects them (the tool writes the file), :func:`recorded_runs` reads them back
(:data:`GRPO_RECORDING`) and :func:`run_summary` gives each group's mean and spread over the
seeds (:func:`lmlessons.course.records.seed_spread`).

Names are stable: lesson 08's bug zoo uses them too.
"""

from __future__ import annotations

import re
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import (
    check_float_tensor,
    check_generator,
    check_int,
    check_real,
    check_same_shape,
)
from lmlessons.course.chat import instruction_set
from lmlessons.course.records import Recording, seed_spread
from lmlessons.grpo import group_advantages, rloo_advantages

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
    "GRPO_RECORDING",
    "record_experiment",
    "record_runs",
    "recorded_runs",
    "run_summary",
    "BASELINES",
    "expected_reward_gradient",
    "reinforce_estimates",
    "scaled_loss_updates",
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

#: Lesson 12's recording (``data/grpo/runs.json``), made by ``python -m tools.grpo_runs``.
GRPO_RECORDING = Recording("grpo", "grpo_runs", ("settings", "experiments"))


def record_experiment(
    experiment: str,
    *,
    seeds: Sequence[int],
    max_steps: int,
    log: Callable[[str], None] | None = print,
) -> list[dict[str, Any]]:
    """Every run of ``EXPERIMENTS[experiment]`` for every seed: :func:`grpo_run` in a temporary
    folder (TRL's warnings silenced), ``{"loss_type", "beta", "seed", <metric>: [...]}`` with
    every metric rounded to 4 decimals. ``log``: called with one line per run (None: silent)."""
    spec = EXPERIMENTS[experiment]
    runs = []
    for loss_type, beta in spec["runs"]:
        for seed in seeds:
            start = time.time()
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                metrics = grpo_run(
                    tmp, loss_type=loss_type, beta=beta, seed=seed, max_steps=max_steps,
                    reward_funcs=REWARDS[spec["reward"]],
                )  # fmt: skip
            rounded = {k: [round(v, 4) for v in values] for k, values in metrics.items()}
            runs.append({"loss_type": loss_type, "beta": beta, "seed": seed, **rounded})
            if log is not None:
                length = rounded["mean_length"]
                log(
                    f"{experiment:10s} {loss_type:8s} beta={beta:<5} seed={seed} length "
                    f"{length[0]:.1f} -> {length[-1]:.1f} ({time.time() - start:.0f} s)"
                )
    return runs


def record_runs(
    experiments: Sequence[str],
    *,
    seeds: Sequence[int],
    max_steps: int,
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """The record :func:`recorded_runs` reads: ``settings`` (:data:`RUN_DEFAULTS`,
    ``max_steps``, ``seeds``) and, per experiment, its ``reward`` and
    :func:`record_experiment`'s ``runs``."""
    unknown = [e for e in experiments if e not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"experiments must be among {sorted(EXPERIMENTS)}, got {unknown}")
    return {
        "settings": {**RUN_DEFAULTS, "max_steps": max_steps, "seeds": list(seeds)},
        "experiments": {
            name: {
                "reward": EXPERIMENTS[name]["reward"],
                "runs": record_experiment(name, seeds=seeds, max_steps=max_steps, log=log),
            }
            for name in experiments
        },
    }


def recorded_runs(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The runs recorded by ``python -m tools.grpo_runs``: ``settings`` (those of
    :data:`RUN_DEFAULTS`, ``max_steps``, ``seeds``) and ``experiments``, by name (see
    :data:`EXPERIMENTS`): each its ``reward`` and ``runs``, a list of ``{"loss_type", "beta",
    "seed", "loss", "reward", "mean_length", "clipped_ratio"[, "kl"]}``, one value per step."""
    return GRPO_RECORDING.load(directory)


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
    spread (:func:`lmlessons.course.records.seed_spread`: the standard deviation with Bessel's
    correction, 0 for one seed), ``per_seed`` those per-seed values.
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
        mean, std = seed_spread(finals)
        out[key] = {
            "loss_type": group[0]["loss_type"],
            "beta": group[0]["beta"],
            "first": sum(r[metric][0] for r in group) / len(group),
            "final": mean,
            "std": std,
            "per_seed": finals,
        }
    return out


# ------------------------------------------------------------------- the policy gradient, on a toy

#: The baselines :func:`reinforce_estimates` knows: none, the true expected reward (a constant),
#: GRPO's group mean (the completion itself included) and RLOO's mean of the others.
BASELINES = ("none", "expected", "group", "rloo")


def _check_toy(logits: object, rewards: object) -> tuple[torch.Tensor, torch.Tensor]:
    logits = check_float_tensor("logits", logits)
    rewards = check_float_tensor("rewards", rewards)
    check_same_shape("logits", logits, "rewards", rewards, dims="(A,)", ndim=1)
    return logits.detach().to(torch.float64), rewards.detach().to(torch.float64)


def expected_reward_gradient(logits: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """The exact gradient of ``J = sum_a softmax(logits)_a * rewards_a`` with respect to the
    logits, ``(A,)`` -> ``(A,)`` float64: ``p_a * (r_a - J)`` (the softmax's Jacobian)."""
    logits, rewards = _check_toy(logits, rewards)
    p = logits.softmax(-1)  # (A,)
    return p * (rewards - (p * rewards).sum())  # (A,)


def reinforce_estimates(
    logits: torch.Tensor,
    rewards: torch.Tensor,
    *,
    num_samples: int,
    baseline: str = "none",
    num_generations: int = 4,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``num_samples`` score-function (REINFORCE) estimates of :func:`expected_reward_gradient`,
    ``(num_samples, A)`` float64: for an action ``a`` sampled from ``softmax(logits)``,
    ``(r_a - b) * grad log p_a`` with ``grad log p_a = onehot(a) - p``.

    ``baseline``: ``"none"`` (``b = 0``), ``"expected"`` (``b = J``, the true mean reward),
    ``"group"`` (the mean reward of the sample's group of ``num_generations`` samples, itself
    included: GRPO's baseline without the std division) or ``"rloo"`` (the mean of the group's
    *other* samples). ``num_samples`` must then be a multiple of ``num_generations``. Sampled
    with ``generator`` (a ``torch.Generator``)."""
    logits, rewards = _check_toy(logits, rewards)
    n = check_int("num_samples", num_samples, minimum=1)
    g = check_int("num_generations", num_generations, minimum=2)
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if baseline in ("group", "rloo") and n % g:
        raise ValueError(f"num_samples must be a multiple of num_generations={g}, got {n}")
    generator = check_generator(generator)
    p = logits.softmax(-1)  # (A,)
    actions = torch.multinomial(p, n, replacement=True, generator=generator)  # (n,)
    r = rewards[actions]  # (n,)
    if baseline == "expected":
        r = r - (p * rewards).sum()  # (n,)
    elif baseline == "group":
        r = group_advantages(r, num_generations=g, scale_rewards="none")  # (n,)
    elif baseline == "rloo":
        r = rloo_advantages(r, num_generations=g)  # (n,)
    score = torch.nn.functional.one_hot(actions, p.numel()).to(p.dtype) - p  # (n, A)
    return r[:, None] * score  # (n, A)


def scaled_loss_updates(
    gradients: torch.Tensor, *, scale: float, optimizer: str, lr: float = 1e-3
) -> torch.Tensor:
    """The parameter change of every step, ``(steps, P)``, when the loss whose gradients are
    ``gradients`` ``(steps, P)`` is multiplied by ``scale`` at every step, under ``"adamw"``
    (``torch.optim.AdamW``, its default betas, eps 1e-8 and weight decay) or ``"sgd"``.

    The updates depend on the parameters only through the gradients, so feeding the gradients
    of a trajectory gives the trajectory's updates."""
    grads = check_float_tensor("gradients", gradients)
    if grads.dim() != 2:
        raise ValueError(f"gradients must have shape (steps, P), got {tuple(grads.shape)}")
    scale = check_real("scale", scale, positive=True)
    if optimizer not in ("adamw", "sgd"):
        raise ValueError(f"optimizer must be 'adamw' or 'sgd', got {optimizer!r}")
    param = torch.nn.Parameter(torch.zeros(grads.shape[1], dtype=grads.dtype))  # (P,)
    opt_class = torch.optim.AdamW if optimizer == "adamw" else torch.optim.SGD
    opt = opt_class([param], lr=check_real("lr", lr, positive=True))
    updates = []
    for grad in grads:  # (P,) each
        before = param.detach().clone()  # (P,)
        param.grad = grad * scale  # (P,)
        opt.step()
        updates.append(param.detach() - before)  # (P,)
    return torch.stack(updates)  # (steps, P)
