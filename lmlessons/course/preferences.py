"""Lesson 11: the course's preference set, made from the course corpus (nothing downloaded).

* :func:`preference_set`: one pair per question of :func:`lmlessons.course.chat.instruction_set`,
  in TRL's conversational preference format: ``prompt``, ``chosen`` and ``rejected`` are lists of
  messages (the user's question; the right answer; a wrong one), with the question's ``task`` and
  the ``kind`` of wrong answer beside them (:data:`KINDS`).
* :func:`encode_pair`: one pair as token ids, as TRL's ``DPOTrainer`` tokenizes a conversational
  pair: the prompt rendered with the generation prompt, each completion the rest of the whole
  conversation (its end-of-turn token ``[SEP]`` included); the input of
  :func:`lmlessons.preference.preference_batch`.
* DPO's foundations on a toy with a handful of completions (section 2 of lesson 11):
  :func:`bradley_terry`, :func:`kl_objective` (``E_pi[r] - beta KL(pi || pi_ref)``) and its
  closed-form maximiser :func:`kl_optimal_policy`;
* :func:`chosen_course`: per recorded run, the chosen answer's log-probability at the start, its
  lowest, its highest and its last value, for the claims the lesson makes about the runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import check_float_tensor, check_int, check_real
from lmlessons.course.chat import conversation_labels, instruction_set, prompt_length
from lmlessons.course.corpus import Corpus, load_corpus
from lmlessons.kl import kl_divergence

__all__ = [
    "KINDS",
    "RUN_LOSS_TYPES",
    "preference_set",
    "encode_pair",
    "preference_sample",
    "preference_runs",
    "bradley_terry",
    "kl_objective",
    "kl_optimal_policy",
    "chosen_course",
]

#: The kinds of rejected answer: another topic (a topic question), another sentence's first word
#: (a first-word question, even positions), or the first three words (a first-word question, odd
#: positions: the right word, then two more; the only kind whose rejected answer is longer).
KINDS: tuple[str, ...] = ("wrong topic", "wrong word", "too long")
TOO_LONG_WORDS = 3


def _answer(content: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": content}]


def _first_words(example: dict[str, Any]) -> list[str]:
    """The words of an instruction-set question's sentence (after ``"First word? "``)."""
    sentence = example["prompt"][0]["content"].split("? ", 1)[1]
    return [w.strip(".,;:!?\"'()").lower() for w in sentence.split()]


def _wrong_word(examples: Sequence[dict[str, Any]], i: int) -> str:
    """The first word of the next first-word question whose answer differs from question i's."""
    right = examples[i]["completion"][0]["content"]
    for step in range(1, len(examples)):
        other = examples[(i + step) % len(examples)]
        if other["task"] == "first_word" and other["completion"][0]["content"] != right:
            return str(other["completion"][0]["content"])
    raise ValueError("corpus must hold sentences with at least two different first words")


def _pair(examples: Sequence[dict[str, Any]], i: int, topics: Sequence[str]) -> dict[str, Any]:
    example = examples[i]
    right = example["completion"][0]["content"]
    if example["task"] == "topic":
        others = [t for t in topics if t != right]
        kind, wrong = "wrong topic", others[i % len(others)]
    elif i % 2 == 0:
        kind, wrong = "wrong word", _wrong_word(examples, i)
    else:
        words = [w for w in _first_words(example) if w]
        kind, wrong = "too long", " ".join(words[:TOO_LONG_WORDS])
    return {
        "task": example["task"],
        "kind": kind,
        "prompt": list(example["prompt"]),
        "chosen": _answer(right),
        "rejected": _answer(wrong),
    }


def preference_set(split: str = "train", *, corpus: Corpus | None = None) -> list[dict[str, Any]]:
    """The course's preference pairs: one per question of ``instruction_set(split)``, in its order,
    the same list on every machine.

    ``split``: ``"train"`` or ``"validation"`` (held-out documents). Each pair is a dict with
    ``prompt`` (the user's message), ``chosen`` (the right answer as an assistant message),
    ``rejected`` (a wrong answer as an assistant message), ``task`` (``"first_word"`` or
    ``"topic"``) and ``kind``, one of :data:`KINDS`:

    * ``"wrong topic"``: a topic question answered with another of the corpus's topics (the
      ``i % 11``-th other topic, ``i`` the pair's position);
    * ``"wrong word"``: a first-word question (even position) answered with the first word of the
      next first-word question whose answer differs;
    * ``"too long"``: a first-word question (odd position) answered with the sentence's first
      three words: the right word, then two the user did not ask for. Its rejected completion has
      more tokens than its chosen one, so a loss on summed log-probabilities and one on averaged
      ones differ on these pairs.

    The format is TRL's conversational preference format (``DPOTrainer`` reads ``prompt``,
    ``chosen`` and ``rejected``; other keys are ignored), as ``instruction_set`` is TRL's
    conversational prompt-completion format.
    """
    corpus = load_corpus("course") if corpus is None else corpus
    examples = instruction_set(split, corpus=corpus)  # checks split and corpus
    topics = sorted(set(corpus.topics))
    return [_pair(examples, i, topics) for i in range(len(examples))]


def encode_pair(tokenizer: Any, pair: dict[str, Any]) -> dict[str, list[int]]:
    """``prompt_ids``, ``chosen_ids`` and ``rejected_ids`` of one pair of :func:`preference_set`:
    the prompt as the model sees it when it answers (:func:`lmlessons.course.chat.prompt_length`,
    the prompt rendered with ``add_generation_prompt=True``) and each completion the rest of the
    whole conversation, its end-of-turn token ``[SEP]`` included; what TRL's ``DPOTrainer``
    builds from a conversational pair (without its ``add_eos``, which would add a second ``[SEP]``
    as text). The input of :func:`lmlessons.preference.preference_batch`."""
    if not isinstance(pair, dict) or not {"prompt", "chosen", "rejected"} <= set(pair):
        raise TypeError("pair must be a dict with 'prompt', 'chosen' and 'rejected' message lists")
    out: dict[str, list[int]] = {}
    for key in ("chosen", "rejected"):
        messages = list(pair["prompt"]) + list(pair[key])
        ids = conversation_labels(tokenizer, messages, train_on="everything")["input_ids"]
        n = prompt_length(tokenizer, messages)
        if out and ids[:n] != out["prompt_ids"]:
            raise ValueError("pair's chosen and rejected conversations render different prompts")
        out["prompt_ids"] = ids[:n]
        out[f"{key}_ids"] = ids[n:]
    return out


#: The loss types of lesson 11's recorded runs: four of TRL's ``DPOConfig.loss_type`` and SimPO.
RUN_LOSS_TYPES: tuple[str, ...] = ("sigmoid", "ipo", "hinge", "sigmoid_norm", "simpo")
PREFERENCE_RUNS_FILE = "preference_runs.json"  # made by python -m tools.preference_runs
RUNS_DIR = Path(__file__).resolve().parents[1] / "data" / "preference"


def preference_sample(split: str, n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` pairs of ``preference_set(split)``, drawn without replacement by a
    ``torch.randperm`` seeded with ``seed``: the same pairs on every machine."""
    pairs = preference_set(split)
    n = check_int("n", n, minimum=1)
    if n > len(pairs):
        raise ValueError(f"n must be at most {len(pairs)} (the {split} pairs), got {n}")
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))
    return [pairs[i] for i in order[:n].tolist()]


def preference_runs(directory: str | Path | None = None) -> dict[str, Any]:
    """The recorded runs of lesson 11 (``python -m tools.preference_runs``): the settings and
    ``runs``, each ``{"loss_type", "beta", "seed", "loss", "steps", "probes"}``, a probe being
    ``chosen_logps``, ``rejected_logps``, ``policy_prefers_chosen`` and ``reward_accuracy``
    (means over the training pairs)."""
    path = (RUNS_DIR if directory is None else Path(directory)) / PREFERENCE_RUNS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run python -m tools.preference_runs --out ...")
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record


def bradley_terry(reward_chosen: torch.Tensor, reward_rejected: torch.Tensor) -> torch.Tensor:
    """The Bradley-Terry probability that the chosen completion is preferred,
    ``exp(r_c) / (exp(r_c) + exp(r_r)) = sigmoid(r_c - r_r)``, elementwise (same shapes)."""
    chosen = check_float_tensor("reward_chosen", reward_chosen, min_ndim=0)
    rejected = check_float_tensor("reward_rejected", reward_rejected, min_ndim=0)
    if chosen.shape != rejected.shape:
        raise ValueError(
            f"reward_chosen and reward_rejected must have one shape, got "
            f"{tuple(chosen.shape)} and {tuple(rejected.shape)}"
        )
    return torch.sigmoid(chosen - rejected)  # (...)


def _toy(log_reference: object, reward: object, beta: object) -> tuple[torch.Tensor, ...]:
    log_ref = check_float_tensor("log_reference", log_reference)
    r = check_float_tensor("reward", reward)
    if r.shape != log_ref.shape[-r.dim() :]:
        raise ValueError(
            f"reward must have the shape of log_reference's last dimensions, got "
            f"{tuple(r.shape)} and {tuple(log_ref.shape)}"
        )
    check_real("beta", beta, positive=True)
    return log_ref, r


def kl_objective(
    log_policy: torch.Tensor, log_reference: torch.Tensor, reward: torch.Tensor, beta: float
) -> torch.Tensor:
    """The KL-regularised reward objective of a policy over a handful of completions,
    ``sum_y pi(y) r(y) - beta KL(pi || pi_ref)`` (Rafailov et al. 2023, Eq. 3, for one prompt):
    ``log_policy`` ``(..., Y)``, ``log_reference`` ``(Y,)`` or ``(..., Y)`` log-probabilities,
    ``reward`` ``(Y,)``. Returns ``(...)``."""
    log_ref, r = _toy(log_reference, reward, beta)
    log_pi = check_float_tensor("log_policy", log_policy)
    log_ref = log_ref.expand_as(log_pi)  # (..., Y)
    expected = (log_pi.exp() * r).sum(dim=-1)  # (...)
    return expected - beta * kl_divergence(log_pi, log_ref)  # (...)


def kl_optimal_policy(
    log_reference: torch.Tensor, reward: torch.Tensor, beta: float
) -> torch.Tensor:
    """The maximiser of :func:`kl_objective` in closed form (Rafailov et al. 2023, Eq. 4):
    ``pi*(y) = pi_ref(y) exp(r(y) / beta) / Z``, as log-probabilities ``(..., Y)``."""
    log_ref, r = _toy(log_reference, reward, beta)
    return torch.log_softmax(log_ref + r / beta, dim=-1)  # (..., Y): the softmax divides by Z


def chosen_course(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Per run of :func:`preference_runs`' record: ``loss_type``, ``beta``, ``seed`` and the mean
    summed log-probability of the chosen answers at the ``start`` (before the first step), its
    ``lowest`` and ``peak`` over the probes, and at the ``end``."""
    if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
        raise TypeError("record must be the dict of preference_runs(), with a 'runs' list")
    out = []
    for run in record["runs"]:
        chosen = [float(p["chosen_logps"]) for p in run["probes"]]
        out.append(
            {
                "loss_type": run["loss_type"],
                "beta": run["beta"],
                "seed": run["seed"],
                "start": chosen[0],
                "lowest": min(chosen),
                "peak": max(chosen),
                "end": chosen[-1],
            }
        )
    return out
