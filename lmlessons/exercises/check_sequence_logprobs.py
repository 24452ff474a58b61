"""Checker for ``sequence_logprobs`` (lesson 11), in the runner's pattern: cases and diagnoses.

The reference is :func:`lmlessons.exercises.solutions_part3.sequence_logprobs` (TRL's
``CPOTrainer.get_batch_logps``; its sum is what ``DPOTrainer`` computes).
"""

from __future__ import annotations

import torch

from lmlessons.exercises._framework import Case, Mistake, Runner, close, first_difference

SIGNATURE = (
    "sequence_logprobs(logits, labels, average=False) -> logps   # (B,): labels unshifted, "
    "-100 on the prompt and the padding"
)


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(2, 6, 5, generator=g).requires_grad_()  # (B, T, V)
    labels = torch.tensor([[-100, -100, 3, 1, 4, -100], [-100, -100, 2, 0, -100, -100]])
    return [
        Case("hidden case 1 (a 2-token prompt, completions of 3 and 2 tokens)", (logits, labels)),
        Case(
            "hidden case 2 (hidden case 1 with `average=True`)",
            (logits, labels),
            {"average": True},
        ),
    ]


def check_sequence_logprobs(run: Runner) -> None:
    for case in _cases():
        got = run.call(case)
        expected = run.expected(case)
        run.compare(case, got, expected)
        if not all(close(float(a), float(b)) for a, b in zip(got.detach(), expected.detach())):
            raise Mistake("wrong_value", f"On {case.label}, {first_difference(got, expected)}.")
        run.passed_case(case)
