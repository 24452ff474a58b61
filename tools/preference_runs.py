"""Record lesson 11's preference runs: ``python -m tools.preference_runs``.

One run (:func:`lmlessons.course.preferences.preference_run`, settings in its ``RUN_SETTINGS``)
per loss type, ``beta`` and seed: the course GPT-2 (``load_checkpoint("gpt2")``, the chat
tokenizer) trained on ``num_pairs`` pairs of the course's preference set
(:func:`lmlessons.course.preferences.preference_sample` of the training split), batches of
``batch_size`` pairs in a seeded order, AdamW at ``learning_rate``, no dropout (TRL's
``disable_dropout``), against a frozen copy of the checkpoint as the reference (its
log-probabilities computed once). The loss is the core's, in a plain loop:
:func:`lmlessons.preference.dpo_loss` for ``sigmoid``, ``ipo``, ``hinge`` and ``sigmoid_norm``
(summed log-probabilities, token counts for the length-normalised ones) and
:func:`lmlessons.preference.simpo_loss` for ``simpo`` (average log-probabilities, no reference,
``simpo_gamma``: TRL's ``CPOTrainer`` with ``loss_type="simpo"`` and
``cpo_alpha=0``). ``tests/test_claims_11.py`` checks that its ``step_loss`` equals TRL's
``DPOTrainer.compute_loss`` and ``CPOTrainer``'s loss on the same batch.

Every ``every`` steps, on all the training pairs (:func:`lmlessons.preference.preference_probe`):
the mean summed log-probability of the chosen and of the rejected completions, the share of pairs
whose chosen completion the policy itself prefers (summed log-probabilities), and TRL's
``rewards/accuracies`` (the log-ratio against the reference larger for the chosen). Small JSON,
4 decimals. The shipped file::

    python -m tools.preference_runs --out lmlessons/data/preference

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.preferences import (
    PREFERENCE_RUNS_FILE,
    RUN_LOSS_TYPES,
    RUN_SETTINGS,
    preference_run,
)
from lmlessons.course.records import write_record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--steps", type=int, default=RUN_SETTINGS["steps"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = []
    start = time.perf_counter()
    for loss_type in RUN_LOSS_TYPES:
        for beta in RUN_SETTINGS["betas"]:
            for seed in RUN_SETTINGS["seeds"]:
                runs.append(preference_run(loss_type, beta, seed, steps=args.steps))
                print(f"{loss_type:12s} beta={beta} seed={seed}: {runs[-1]['probes'][-1]}")
    keys = ("num_pairs", "batch_size", "learning_rate", "simpo_gamma", "every")
    record = {**{k: RUN_SETTINGS[k] for k in keys}, "runs": runs}
    out = args.out if args.out is not None else user_cache_dir() / "preference"
    path = write_record(record, out, PREFERENCE_RUNS_FILE)
    print(f"wrote {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
