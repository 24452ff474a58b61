"""What the GRPO claims tests (``tests/test_claims_12.py``, ``tests/test_claims_13.py``) share:
controlled inputs for TRL's ``GRPOTrainer._compute_loss`` and the loss TRL computes from given
log-probabilities. Their trainers come from the session fixture ``grpo_trainer``
(``tests/conftest.py``)."""

from __future__ import annotations

from typing import Any

import torch


def loss_inputs(b: int = 8, c: int = 5, *, seed: int = 0) -> dict:
    """Controlled inputs for ``GRPOTrainer._compute_loss``: lengths 1..5, random advantages."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1, 3, 5, 2, 4, 5, 2, 3])[:b]  # (B,)
    return {
        "prompt_ids": torch.zeros(b, 2, dtype=torch.long),
        "prompt_mask": torch.ones(b, 2, dtype=torch.long),
        "completion_ids": torch.zeros(b, c, dtype=torch.long),
        "completion_mask": (torch.arange(c) < lengths[:, None]).long(),  # (B, C)
        "advantages": torch.randn(b, generator=g),  # (B,)
        "num_items_in_batch": torch.tensor(int(lengths.sum())),
        "old_per_token_logps": -torch.rand(b, c, generator=g) * 3,  # (B, C)
    }


def trl_loss(trainer: Any, monkeypatch: Any, inputs: dict, logps: torch.Tensor) -> torch.Tensor:
    """TRL's loss for ``inputs`` when the policy's log-probabilities are ``logps``."""
    monkeypatch.setattr(
        trainer, "_get_per_token_logps_and_entropies", lambda *a, **k: (logps, logps * 0, None)
    )
    return trainer._compute_loss(trainer.model, inputs)
