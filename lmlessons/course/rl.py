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

import re
from collections.abc import Sequence
from typing import Any

from lmlessons._checks import check_int
from lmlessons.course.chat import instruction_set

__all__ = [
    "rl_prompts",
    "completion_text",
    "length_reward",
    "correctness_reward",
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
