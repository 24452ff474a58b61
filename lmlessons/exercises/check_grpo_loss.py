"""Checker for ``grpo_loss`` (lesson 12), in the runner's pattern: cases and diagnoses.

The reference is :func:`lmlessons.exercises.solutions_part3.grpo_loss` (TRL's
``GRPOTrainer._compute_loss`` aggregation, :func:`lmlessons.grpo.aggregate_loss`).
"""

from __future__ import annotations

import torch

from lmlessons.exercises._framework import Case, Runner
from lmlessons.exercises._loss_checks import check_loss

SIGNATURE = (
    "grpo_loss(per_token_loss, completion_mask, loss_type, max_completion_length=None, "
    "num_items_in_batch=None) -> loss   # a 0-dim tensor"
)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(12)
    loss = torch.randn(4, 4, generator=g).requires_grad_()  # (B, C)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.int32)
    kwargs = [
        {"loss_type": "grpo"},
        {"loss_type": "bnpo"},
        {"loss_type": "dr_grpo", "max_completion_length": 6},
        {"loss_type": "dapo", "num_items_in_batch": 25},
    ]
    return [Case(f"hidden case {i + 1} ({kw})", (loss, mask), kw) for i, kw in enumerate(kwargs)]


def check_grpo_loss(run: Runner) -> None:
    for case in _cases():
        check_loss(run, case)
        run.passed_case(case)
