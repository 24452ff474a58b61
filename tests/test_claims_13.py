"""Behaviour tests of the claims lesson 13 (RL losses across steps) makes about TRL's
``GRPOTrainer``: how it divides the loss over an accumulation window and ``steps_per_generation``,
what the older ``dapo`` normaliser did, and the defaults the lesson's AdamW argument rests on.

Each ``test_claim_13_*`` checks its entry of ``docs/claims.md`` against the installed TRL, on
``GRPOTrainer._compute_loss`` with tensors the test controls (the course GPT-2, nothing downloaded;
the trainer from the session fixture ``grpo_trainer``).
TRL is a course dependency (``requirements.txt``); these tests are skipped where it is not
installed.
"""

from __future__ import annotations

import pytest
import torch
from _grpo_claims import loss_inputs, trl_loss

from lmlessons.grpo import aggregate_loss

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture
def dapo_trainer(grpo_trainer):
    """The course's ``dapo`` trainer, built once per session (``grpo_trainer``)."""
    return grpo_trainer(loss_type="dapo")


def test_claim_13_dapo_window_rescaled(dapo_trainer, monkeypatch):
    """TRL 1.16 divides the dapo sum by num_items_in_batch * GA / steps_per_generation."""
    trainer = dapo_trainer
    g = torch.Generator().manual_seed(0)
    b, c = 8, 5
    mask = (torch.arange(c) < torch.tensor([1, 3, 5, 2, 4, 5, 2, 3])[:, None]).long()  # (B, C)
    logps = (-torch.rand(b, c, generator=g) * 3).requires_grad_()  # (B, C)
    monkeypatch.setattr(
        trainer, "_get_per_token_logps_and_entropies", lambda *a, **k: (logps, logps * 0, None)
    )
    adv = torch.randn(b, generator=g)  # (B,)
    inputs = {
        "prompt_ids": torch.zeros(b, 2, dtype=torch.long),
        "prompt_mask": torch.ones(b, 2, dtype=torch.long),
        "completion_ids": torch.zeros(b, c, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "num_items_in_batch": torch.tensor(60),
    }
    summed = float((-adv[:, None] * mask).sum())
    for ga, spg in ((2, 2), (2, 4), (4, 2)):
        monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", ga)
        monkeypatch.setattr(trainer.args, "steps_per_generation", spg)
        loss = trainer._compute_loss(trainer.model, inputs)
        assert float(loss) == pytest.approx(summed / (60 * ga / spg), abs=1e-6)


def test_claim_13_old_dapo_constant_factor(dapo_trainer, monkeypatch):
    """The pre-1.16 normaliser (the generation batch's count alone) gives every micro-batch TRL
    1.16's loss times gradient_accumulation_steps / steps_per_generation: one constant."""
    for seed in (0, 1):  # two micro-batches of different lengths and advantages
        inputs = loss_inputs(seed=seed)
        inputs["completion_mask"] = inputs["completion_mask"].flip(0) if seed else inputs[
            "completion_mask"]  # fmt: skip
        inputs["num_items_in_batch"] = torch.tensor(60)
        logps = inputs.pop("old_per_token_logps")  # on-policy
        old = aggregate_loss(
            -inputs["advantages"][:, None].expand_as(logps) + 0 * logps,
            inputs["completion_mask"],
            loss_type="dapo",
            num_items_in_batch=60,
        )
        for ga, spg in ((2, 4), (1, 4), (2, 2)):
            monkeypatch.setattr(dapo_trainer, "current_gradient_accumulation_steps", ga)
            monkeypatch.setattr(dapo_trainer.args, "steps_per_generation", spg)
            new = trl_loss(dapo_trainer, monkeypatch, inputs, logps)
            assert float(old) == pytest.approx(float(new) * ga / spg, rel=1e-5)


def test_claim_13_max_grad_norm(trl, tmp_path):
    from transformers import TrainingArguments

    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert args.max_grad_norm == 1.0 == TrainingArguments(output_dir=str(tmp_path)).max_grad_norm
    assert args.optim.startswith("adamw")  # TRL's default optimizer is AdamW
