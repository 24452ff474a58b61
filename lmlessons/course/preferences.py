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
* :func:`preference_run`: one run of ``python -m tools.preference_runs`` (:data:`RUN_SETTINGS`;
  :func:`run_logps`, :func:`step_loss` and :func:`probe_means` are its pieces);
* :func:`chosen_course`: per recorded run, the chosen answer's log-probability at the start, its
  lowest, its highest and its last value, for the claims the lesson makes about the runs;
  :func:`preference_summary`: per loss type at one ``beta``, the mean and the spread over the
  seeds (:func:`lmlessons.course.records.seed_spread`) of what the runs end with.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import check_float_tensor, check_int, check_real, check_same_shape
from lmlessons.course.chat import conversation_labels, instruction_set, prompt_length
from lmlessons.course.corpus import Corpus, load_corpus
from lmlessons.course.records import Recording, check_record, seed_spread
from lmlessons.kl import kl_divergence
from lmlessons.preference import (
    completion_logps,
    dpo_loss,
    preference_batch,
    preference_probe,
    simpo_loss,
)
from lmlessons.shifting import num_targets

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
    "select_runs",
    "probe_series",
    "preference_summary",
    "RUN_SETTINGS",
    "run_logps",
    "step_loss",
    "probe_means",
    "preference_run",
    "record_preference_runs",
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
#: Lesson 11's recording, made by ``python -m tools.preference_runs``.
PREFERENCE_RECORDING = Recording(
    "preference", "preference_runs", ("runs",), file="preference_runs.json"
)


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
    return PREFERENCE_RECORDING.load(directory)


def bradley_terry(reward_chosen: torch.Tensor, reward_rejected: torch.Tensor) -> torch.Tensor:
    """The Bradley-Terry probability that the chosen completion is preferred,
    ``exp(r_c) / (exp(r_c) + exp(r_r)) = sigmoid(r_c - r_r)``, elementwise (same shapes)."""
    chosen = check_float_tensor("reward_chosen", reward_chosen, min_ndim=0)
    rejected = check_float_tensor("reward_rejected", reward_rejected, min_ndim=0)
    check_same_shape("reward_chosen", chosen, "reward_rejected", rejected, dims="(...)")
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
    check_record(record, ("runs",), name="record (preference_runs())")
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


def select_runs(record: dict[str, Any], loss_type: str, beta: float) -> list[dict[str, Any]]:
    """The runs of :func:`preference_runs`' ``record`` with ``loss_type`` and ``beta``, one per
    seed; a :class:`ValueError` when there is none."""
    check_record(record, ("runs",), name="record (preference_runs())")
    runs = [r for r in record["runs"] if r["loss_type"] == loss_type and r["beta"] == beta]
    if not runs:
        raise ValueError(f"no recorded run of loss_type={loss_type!r} with beta={beta}")
    return runs


def probe_series(runs: Sequence[dict[str, Any]], key: str) -> list[list[float]]:
    """``key`` of every probe, one list per run; ``"margin"`` is the log-prob gap, the chosen
    minus the rejected summed log-probability (the reference's own gap included)."""
    if key == "margin":
        return [[p["chosen_logps"] - p["rejected_logps"] for p in r["probes"]] for r in runs]
    return [[p[key] for p in r["probes"]] for r in runs]


def preference_summary(
    record: dict[str, Any], beta: float
) -> dict[str, dict[str, tuple[float, float]]]:
    """Per loss type of :data:`RUN_LOSS_TYPES` at ``beta``: ``{quantity: (mean, std)}`` over the
    seeds (:func:`lmlessons.course.records.seed_spread`) at the last probe: ``chosen_logps``,
    ``rejected_logps``, ``margin``, ``policy_prefers_chosen``, ``reward_accuracy``; and
    ``start_chosen_logps`` (before the first step) and ``peak_chosen_logps`` (the highest chosen
    log-probability of the run)."""
    out = {}
    for loss_type in RUN_LOSS_TYPES:
        runs = select_runs(record, loss_type, beta)
        chosen = probe_series(runs, "chosen_logps")
        values = {
            "start_chosen_logps": [c[0] for c in chosen],
            "peak_chosen_logps": [max(c) for c in chosen],
            "chosen_logps": [c[-1] for c in chosen],
        }
        for key in ("rejected_logps", "margin", "policy_prefers_chosen", "reward_accuracy"):
            values[key] = [s[-1] for s in probe_series(runs, key)]
        out[loss_type] = {k: seed_spread(v) for k, v in values.items()}
    return out


#: The settings of lesson 11's recorded runs (``python -m tools.preference_runs``): the pairs of
#: the training split, pairs per batch, optimizer steps, a probe every ``every`` steps, AdamW's
#: learning rate, the betas and seeds, and SimPO's ``simpo_gamma`` (``CPOConfig``'s default).
RUN_SETTINGS: dict[str, Any] = {
    "num_pairs": 64,
    "batch_size": 8,
    "steps": 64,
    "every": 4,
    "learning_rate": 5e-4,
    "betas": (0.1, 0.5),
    "seeds": (0, 1, 2),
    "simpo_gamma": 0.5,
}


def run_logps(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Summed (``sum``) and averaged (``avg``, per target) log-probabilities of each completion
    and its token count (``len``, the row sum of ``completion_mask``), each ``(2B,)`` (chosen
    rows first): TRL's ``DPOTrainer`` sums, ``CPOTrainer`` averages for SimPO."""
    summed = completion_logps(model, batch)  # (2B,)
    return {
        "sum": summed,  # (2B,)
        "avg": summed / num_targets(batch["labels"], shift=True),  # (2B,)
        "len": batch["completion_mask"].sum(dim=1),  # (2B,)
    }


def step_loss(
    policy: dict[str, torch.Tensor], ref_sum: torch.Tensor, loss_type: str, beta: float
) -> torch.Tensor:
    """The batch's loss (mean over pairs) of one of :data:`RUN_LOSS_TYPES` from :func:`run_logps`
    of the policy and the reference's summed log-probabilities ``(2B,)``: the core's
    :func:`lmlessons.preference.dpo_loss`, or :func:`lmlessons.preference.simpo_loss` on the
    averages (no reference) for ``"simpo"``."""
    if loss_type == "simpo":
        chosen, rejected = policy["avg"].chunk(2)  # (B,) each
        gamma = RUN_SETTINGS["simpo_gamma"]
        return simpo_loss(chosen, rejected, beta=beta, simpo_gamma=gamma)[0].mean()
    c_pol, r_pol = policy["sum"].chunk(2)  # (B,) each
    c_ref, r_ref = ref_sum.chunk(2)  # (B,) each
    c_len, r_len = policy["len"].chunk(2)  # (B,) each
    losses, _, _ = dpo_loss(
        c_pol, r_pol, c_ref, r_ref, beta=beta, loss_type=loss_type,
        chosen_lengths=c_len, rejected_lengths=r_len,
    )  # fmt: skip
    return losses.mean()


def probe_means(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], ref_sum: torch.Tensor
) -> dict[str, float]:
    """The means over the pairs of :func:`lmlessons.preference.preference_probe`: what the
    recorded runs keep at each probe."""
    return {k: float(v.mean()) for k, v in preference_probe(model, batch, ref_sum).items()}


def _subset(batch: dict[str, torch.Tensor], rows: list[int], n: int) -> dict[str, torch.Tensor]:
    """The chosen and rejected rows of pairs ``rows`` (of ``n``), trimmed of all-padding columns."""
    index = torch.tensor(rows + [i + n for i in rows])  # (2b,)
    sub = {k: v[index] for k, v in batch.items()}  # (2b, T) each
    width = int(sub["attention_mask"].sum(dim=1).max())
    return {k: v[:, :width] for k, v in sub.items()}  # (2b, T')


def preference_run(
    loss_type: str, beta: float, seed: int, *, steps: int | None = None
) -> dict[str, Any]:
    """One recorded run of lesson 11: the course GPT-2 trained with :func:`step_loss` on
    ``num_pairs`` pairs of :func:`preference_sample`, batches of ``batch_size`` pairs in an order
    drawn from ``seed``, AdamW, against a frozen copy of the checkpoint (:data:`RUN_SETTINGS`);
    :func:`probe_means` on every training pair before the first step and every ``every`` steps.
    Returns ``{"loss_type", "beta", "seed", "loss", "steps", "probes"}``, rounded to 4 decimals."""
    from lmlessons.course.chat import chat_tokenizer
    from lmlessons.course.checkpoints import load_checkpoint

    cfg = RUN_SETTINGS
    n, size = cfg["num_pairs"], cfg["batch_size"]
    steps = check_int("steps", cfg["steps"] if steps is None else steps, minimum=1)
    tokenizer = chat_tokenizer()
    examples = [encode_pair(tokenizer, p) for p in preference_sample("train", n)]
    batch = preference_batch(examples, pad_token_id=tokenizer.pad_token_id)  # (2P, T)
    policy = load_checkpoint("gpt2")  # eval mode: no dropout, as TRL's disable_dropout
    with torch.no_grad():
        ref_sum = completion_logps(copy.deepcopy(policy), batch)  # (2P,)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg["learning_rate"])
    g = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses, probes, probed = [], [probe_means(policy, batch, ref_sum)], [0]
    for step in range(1, steps + 1):
        if len(order) < size:
            order += torch.randperm(n, generator=g).tolist()
        rows, order = order[:size], order[size:]
        ref_rows = ref_sum[torch.tensor(rows + [i + n for i in rows])]  # (2b,)
        loss = step_loss(run_logps(policy, _subset(batch, rows, n)), ref_rows, loss_type, beta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % cfg["every"] == 0:
            probed.append(step)
            probes.append(probe_means(policy, batch, ref_sum))
    rounded = [{k: round(v, 4) for k, v in p.items()} for p in probes]
    losses = [round(v, 4) for v in losses]
    run = {"loss_type": loss_type, "beta": beta, "seed": seed}
    return {**run, "loss": losses, "steps": probed, "probes": rounded}


def record_preference_runs(
    *, steps: int | None = None, log: Callable[[str], None] | None = print
) -> dict[str, Any]:
    """The record :func:`preference_runs` reads: :data:`RUN_SETTINGS`' ``num_pairs``,
    ``batch_size``, ``learning_rate``, ``simpo_gamma`` and ``every``, and ``runs``: one
    :func:`preference_run` per loss type of :data:`RUN_LOSS_TYPES`, ``beta`` and seed of
    :data:`RUN_SETTINGS`, in that order. ``log``: called with one line per run (None: silent)."""
    runs = []
    for loss_type in RUN_LOSS_TYPES:
        for beta in RUN_SETTINGS["betas"]:
            for seed in RUN_SETTINGS["seeds"]:
                runs.append(preference_run(loss_type, beta, seed, steps=steps))
                if log is not None:
                    log(f"{loss_type:12s} beta={beta} seed={seed}: {runs[-1]['probes'][-1]}")
    keys = ("num_pairs", "batch_size", "learning_rate", "simpo_gamma", "every")
    return {**{k: RUN_SETTINGS[k] for k in keys}, "runs": runs}
