"""Record lesson 11's preference runs: ``python -m tools.preference_runs``.

One run per loss type, ``beta`` and seed: the course GPT-2 (``load_checkpoint("gpt2")``, the chat
tokenizer) trained on :data:`NUM_PAIRS` pairs of the course's preference set
(:func:`lmlessons.course.preferences.preference_sample` of the training split), batches of
:data:`BATCH_SIZE` pairs in a seeded order, AdamW at :data:`LEARNING_RATE`, no dropout (TRL's
``disable_dropout``), against a frozen copy of the checkpoint as the reference (its
log-probabilities computed once). The loss is the core's, in a plain loop:
:func:`lmlessons.preference.dpo_loss` for ``sigmoid``, ``ipo``, ``hinge`` and ``sigmoid_norm``
(summed log-probabilities, token counts for the length-normalised ones) and
:func:`lmlessons.preference.simpo_loss` for ``simpo`` (average log-probabilities, no reference,
``simpo_gamma`` :data:`SIMPO_GAMMA`: TRL's ``CPOTrainer`` with ``loss_type="simpo"`` and
``cpo_alpha=0``). ``tests/test_claims_11.py`` checks that :func:`step_loss` equals TRL's
``DPOTrainer.compute_loss`` and ``CPOTrainer``'s loss on the same batch.

Every :data:`EVERY` steps, on all the training pairs: the mean summed log-probability of the
chosen and of the rejected completions, the share of pairs whose chosen completion the policy
itself prefers (summed log-probabilities), and TRL's ``rewards/accuracies`` (the log-ratio
against the reference larger for the chosen). Small JSON, 4 decimals. The shipped file::

    python -m tools.preference_runs --out lmlessons/data/preference

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.chat import chat_tokenizer
from lmlessons.course.checkpoints import load_checkpoint
from lmlessons.course.preferences import (
    PREFERENCE_RUNS_FILE,
    RUN_LOSS_TYPES,
    encode_pair,
    preference_sample,
)
from lmlessons.preference import dpo_loss, preference_batch, sequence_logprobs, simpo_loss

NUM_PAIRS, BATCH_SIZE, STEPS, EVERY = 64, 8, 64, 4
LEARNING_RATE = 5e-4
BETAS = (0.1, 0.5)
SEEDS = (0, 1, 2)
SIMPO_GAMMA = 0.5  # CPOConfig's default simpo_gamma


def logps(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Summed and averaged log-probabilities of each completion, and its token count, each ``(2B,)``
    (chosen rows first): TRL's ``DPOTrainer`` sums, ``CPOTrainer`` averages for SimPO."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return {
        "sum": sequence_logprobs(logits, batch["labels"]),  # (2B,)
        "avg": sequence_logprobs(logits, batch["labels"], average=True),  # (2B,)
        "len": batch["completion_mask"].sum(dim=1),  # (2B,)
    }


def step_loss(
    policy: dict[str, torch.Tensor], ref_sum: torch.Tensor, loss_type: str, beta: float
) -> torch.Tensor:
    """The batch's loss (mean over pairs) of one of :data:`RUN_LOSS_TYPES` from :func:`logps` of
    the policy and the reference's summed log-probabilities ``(2B,)``."""
    if loss_type == "simpo":
        chosen, rejected = policy["avg"].chunk(2)  # (B,) each
        return simpo_loss(chosen, rejected, beta=beta, simpo_gamma=SIMPO_GAMMA)[0].mean()
    c_pol, r_pol = policy["sum"].chunk(2)  # (B,) each
    c_ref, r_ref = ref_sum.chunk(2)  # (B,) each
    c_len, r_len = policy["len"].chunk(2)  # (B,) each
    losses, _, _ = dpo_loss(
        c_pol, r_pol, c_ref, r_ref, beta=beta, loss_type=loss_type,
        chosen_lengths=c_len, rejected_lengths=r_len,
    )  # fmt: skip
    return losses.mean()


@torch.no_grad()
def probe(model: torch.nn.Module, batch: dict[str, torch.Tensor], ref_sum: torch.Tensor) -> dict:
    """What the lesson plots, on every training pair at once."""
    c, r = logps(model, batch)["sum"].chunk(2)  # (P,) each
    c_ref, r_ref = ref_sum.chunk(2)  # (P,) each
    return {
        "chosen_logps": float(c.mean()),
        "rejected_logps": float(r.mean()),
        "policy_prefers_chosen": float((c > r).float().mean()),
        "reward_accuracy": float(((c - c_ref) > (r - r_ref)).float().mean()),
    }


def _subset(batch: dict[str, torch.Tensor], rows: list[int], n: int) -> dict[str, torch.Tensor]:
    """The chosen and rejected rows of pairs ``rows`` (of ``n``), trimmed of all-padding columns."""
    index = torch.tensor(rows + [i + n for i in rows])  # (2b,)
    sub = {k: v[index] for k, v in batch.items()}  # (2b, T) each
    width = int(sub["attention_mask"].sum(dim=1).max())
    return {k: v[:, :width] for k, v in sub.items()}  # (2b, T')


def run(loss_type: str, beta: float, seed: int, *, steps: int = STEPS) -> dict[str, Any]:
    """One recorded run: ``{"loss_type", "beta", "seed", "steps", "loss", "probes"}``."""
    tokenizer = chat_tokenizer()
    pairs = preference_sample("train", NUM_PAIRS)
    examples = [encode_pair(tokenizer, p) for p in pairs]
    batch = preference_batch(examples, pad_token_id=tokenizer.pad_token_id)  # (2P, T)
    policy = load_checkpoint("gpt2")  # eval mode: no dropout, as TRL's disable_dropout
    reference = copy.deepcopy(policy)
    with torch.no_grad():
        ref_sum = logps(reference, batch)["sum"]  # (2P,)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=LEARNING_RATE)
    g = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses, probes, probed = [], [probe(policy, batch, ref_sum)], [0]
    for step in range(1, steps + 1):
        if len(order) < BATCH_SIZE:
            order += torch.randperm(NUM_PAIRS, generator=g).tolist()
        rows, order = order[:BATCH_SIZE], order[BATCH_SIZE:]
        sub = _subset(batch, rows, NUM_PAIRS)
        ref_rows = ref_sum[torch.tensor(rows + [i + NUM_PAIRS for i in rows])]  # (2b,)
        loss = step_loss(logps(policy, sub), ref_rows, loss_type, beta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % EVERY == 0:
            probed.append(step)
            probes.append(probe(policy, batch, ref_sum))
    rounded = [{k: round(v, 4) for k, v in p.items()} for p in probes]
    return {
        "loss_type": loss_type,
        "beta": beta,
        "seed": seed,
        "loss": [round(v, 4) for v in losses],
        "steps": probed,
        "probes": rounded,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = []
    start = time.perf_counter()
    for loss_type in RUN_LOSS_TYPES:
        for beta in BETAS:
            for seed in SEEDS:
                runs.append(run(loss_type, beta, seed, steps=args.steps))
                print(f"{loss_type:12s} beta={beta} seed={seed}: {runs[-1]['probes'][-1]}")
    record = {
        "num_pairs": NUM_PAIRS,
        "batch_size": BATCH_SIZE,
        "learning_rate": LEARNING_RATE,
        "simpo_gamma": SIMPO_GAMMA,
        "every": EVERY,
        "runs": runs,
    }
    out = args.out if args.out is not None else user_cache_dir() / "preference"
    out.mkdir(parents=True, exist_ok=True)
    path = out / PREFERENCE_RUNS_FILE
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
