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

from functools import partial

from lmlessons.course.preferences import (
    PREFERENCE_RECORDING,
    RUN_SETTINGS,
    record_preference_runs,
)
from tools._recording import record_and_write, recording_parser


def main(argv: list[str] | None = None) -> None:
    parser = recording_parser(__doc__, seeds=None)  # the seeds are RUN_SETTINGS'
    parser.add_argument("--steps", type=int, default=RUN_SETTINGS["steps"])
    args = parser.parse_args(argv)
    record = partial(record_preference_runs, steps=args.steps)
    record_and_write(record, args.out, PREFERENCE_RECORDING)


if __name__ == "__main__":
    main()
