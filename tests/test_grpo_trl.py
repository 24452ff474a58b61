"""Oracle: the losses of ``lmlessons.grpo`` and ``lmlessons.kl`` equal TRL's.

One ``GRPOTrainer`` per session (the fixture ``grpo_trainer``: the course's own
``lmlessons.course.rl.grpo_trainer``, on the course GPT-2 and chat tokenizer), never trained: its
``_compute_loss`` runs on tensors the test controls, its model's forward replaced by a function
that returns given per-token log-probabilities (``_get_per_token_logps_and_entropies``). Each loss
type's value and gradient with respect to those log-probabilities equal the course's to 1e-6.
``GKDTrainer.generalized_jsd_loss`` is a static method: no trainer is needed.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from lmlessons.grpo import (
    LOSS_TYPES,
    TRL_LOSS_TYPES,
    aggregate_loss,
    group_advantages,
    token_losses,
)
from lmlessons.kl import generalized_jsd

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

B, C, G = 8, 5, 4  # completions, completion width, group size: 2 prompts
MAX_COMPLETION_LENGTH = 6  # > C: dr_grpo's constant is not the batch's width
OTHER_WINDOW_TOKENS = 9  # tokens of the accumulation window outside this micro-batch (dapo)


#: The oracle's ``lmlessons.course.rl.grpo_trainer`` arguments: 2 prompts x G completions.
ORACLE = {"num_prompts": 2, "num_generations": G, "max_completion_length": MAX_COMPLETION_LENGTH}


@pytest.fixture
def grpo(grpo_trainer):
    """The course's ``GRPOTrainer`` with :data:`ORACLE`, built once per session (the session
    fixture ``grpo_trainer``: in training mode, one accumulation step, as after its first
    ``train()`` step begins)."""
    return grpo_trainer(**ORACLE)


@pytest.fixture(scope="module")
def batch():
    """Completions of lengths 1..C (right-padded), rewards that grow with the length,
    log-probabilities of the policy, of the old policy (ratios from about 0.5 to 2, so both clips
    act) and of a reference. Seed 0."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([1, 3, 5, 2, 4, 5, 0, 3])  # (B,), one completion without a token
    mask = (torch.arange(C) < lengths.unsqueeze(1)).long()  # (B, C)
    logps = -torch.rand(B, C, generator=g) * 3  # (B, C)
    old = logps + (torch.rand(B, C, generator=g) - 0.5) * 1.4  # (B, C)
    ref = logps + (torch.rand(B, C, generator=g) - 0.5) * 2  # (B, C)
    rewards = lengths.float() + torch.rand(B, generator=g)  # (B,)
    return {"mask": mask, "logps": logps, "old": old, "ref": ref, "rewards": rewards}


def _trl_loss_and_grad(trainer, monkeypatch, batch, *, old, ref, num_items):
    """TRL's loss and its gradient w.r.t. the per-token log-probabilities it is handed."""
    logps = batch["logps"].clone().requires_grad_()  # (B, C)

    def given_logps(*args, **kwargs):
        return logps, torch.zeros_like(logps), None  # logps, entropies, aux loss

    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", given_logps)
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, C, dtype=torch.long),
        "completion_mask": batch["mask"],
        "advantages": group_advantages(batch["rewards"], num_generations=G),
        "num_items_in_batch": torch.tensor(num_items),
    }
    if old:
        inputs["old_per_token_logps"] = batch["old"]
    if ref:
        inputs["ref_per_token_logps"] = batch["ref"]
    loss = trainer._compute_loss(trainer.model, inputs)
    return loss, torch.autograd.grad(loss, logps)[0]


def _course_loss_and_grad(batch, *, loss_type, old, beta, eps, correction, num_items):
    logps = batch["logps"].clone().requires_grad_()  # (B, C)
    per_token = token_losses(
        logps,
        batch["old"] if old else None,
        group_advantages(batch["rewards"], num_generations=G),
        epsilon_low=eps[0],
        epsilon_high=eps[1],
        ref_logps=batch["ref"],
        beta=beta,
        use_bias_correction_kl=correction,
    )  # (B, C)
    loss = aggregate_loss(
        per_token,
        batch["mask"],
        loss_type=loss_type,
        max_completion_length=MAX_COMPLETION_LENGTH,
        num_items_in_batch=num_items,
    )
    return loss, torch.autograd.grad(loss, logps)[0]


SETTINGS = {  # name: (old logps given, beta, (epsilon_low, epsilon_high), use_bias_correction_kl)
    "on-policy": (False, 0.0, (0.2, 0.2), True),
    "clipped": (True, 0.0, (0.2, 0.28), True),
    "kl": (True, 0.04, (0.2, 0.2), True),
    "kl-uncorrected": (True, 0.04, (0.2, 0.2), False),
    "kl-on-policy": (False, 0.5, (0.2, 0.2), True),
}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_gradient_equal_trl(grpo, monkeypatch, batch, loss_type, setting):
    old, beta, eps, correction = SETTINGS[setting]
    for name, value in [
        ("loss_type", loss_type),
        ("beta", beta),
        ("epsilon_low", eps[0]),
        ("epsilon_high", eps[1]),
    ]:
        monkeypatch.setattr(grpo, name, value)
    monkeypatch.setattr(grpo.args, "use_bias_correction_kl", correction)
    num_items = int(batch["mask"].sum()) + OTHER_WINDOW_TOKENS
    theirs, their_grad = _trl_loss_and_grad(
        grpo, monkeypatch, batch, old=old, ref=beta > 0, num_items=num_items
    )
    ours, our_grad = _course_loss_and_grad(
        batch,
        loss_type=loss_type,
        old=old,
        beta=beta,
        eps=eps,
        correction=correction,
        num_items=num_items,
    )
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    torch.testing.assert_close(our_grad, their_grad, rtol=0, atol=1e-6)
    assert our_grad.abs().sum() > 0  # the gradient is not trivially 0 on both sides


def test_trl_scales_the_means_for_accumulation_and_dapo_by_its_window(grpo, monkeypatch, batch):
    """With 2 accumulation steps (and one generation per step): TRL divides the grpo, bnpo and
    dr_grpo losses of a micro-batch by 2, and the dapo loss by the window's token count only."""
    monkeypatch.setattr(grpo, "current_gradient_accumulation_steps", 2)
    monkeypatch.setattr(grpo.args, "steps_per_generation", 2)
    num_items = int(batch["mask"].sum()) + OTHER_WINDOW_TOKENS
    for loss_type in LOSS_TYPES:
        monkeypatch.setattr(grpo, "loss_type", loss_type)
        monkeypatch.setattr(grpo, "beta", 0.0)
        theirs, _ = _trl_loss_and_grad(
            grpo, monkeypatch, batch, old=True, ref=False, num_items=num_items
        )
        ours, _ = _course_loss_and_grad(
            batch,
            loss_type=loss_type,
            old=True,
            beta=0.0,
            eps=(0.2, 0.2),
            correction=True,
            num_items=num_items,
        )
        expected = ours if loss_type == "dapo" else ours / 2
        torch.testing.assert_close(theirs, expected, rtol=0, atol=1e-6)


REWARDS = {
    "spread": [1.0, 2.0, 3.0, 5.0, 0.0, 0.0, 1.0, 4.0],
    "a group without spread": [0.5, 2.0, -1.0, 3.0, 2.0, 2.0, 2.0, 2.0],
}


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_group_advantages_equal_trl(grpo, monkeypatch, scale_rewards):
    """TRL generates completions (2 prompts x 4) and scores them with the given rewards
    (``_calculate_rewards`` replaced); the advantages it returns are the course's."""
    monkeypatch.setattr(grpo, "scale_rewards", scale_rewards)
    for name, values in REWARDS.items():
        rewards = torch.tensor(values)  # (B,)
        monkeypatch.setattr(grpo, "_calculate_rewards", lambda *a, r=rewards, **k: r[:, None])
        with torch.no_grad():
            out = grpo._generate_and_score_completions([{"prompt": "the dog"}] * B)
        ours = group_advantages(rewards, num_generations=G, scale_rewards=scale_rewards)
        torch.testing.assert_close(ours, out["advantages"], rtol=0, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def gkd_trainer_class():
    pytest.importorskip("trl", reason="TRL is a course dependency (requirements.txt)")
    with warnings.catch_warnings():  # TRL warns that trl.experimental is unstable
        warnings.simplefilter("ignore")
        from trl.experimental.gkd import GKDTrainer
    return GKDTrainer


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 0.1])
def test_generalized_jsd_equals_trl(gkd_trainer_class, beta):
    g = torch.Generator().manual_seed(1)
    student = (torch.randn(2, 4, 7, generator=g) * 2).requires_grad_()  # (B, T, V)
    teacher = torch.randn(2, 4, 7, generator=g) * 2  # (B, T, V)
    labels = torch.randint(0, 7, (2, 4), generator=g)  # (B, T)
    labels[0, :2] = -100
    theirs_fn = gkd_trainer_class.generalized_jsd_loss
    cases: list[dict[str, Any]] = [
        {"temperature": 1.0},  # batchmean without labels: divided by B
        {"temperature": 2.0, "labels": labels},  # batchmean: divided by the counted positions
        {"labels": labels, "reduction": "sum"},
        {"labels": labels, "num_items_in_batch": 13},
    ]
    for kwargs in cases:
        theirs = theirs_fn(student, teacher, beta=beta, **kwargs)
        ours = generalized_jsd(student, teacher, beta=beta, **kwargs)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        their_grad = torch.autograd.grad(theirs, student)[0]
        our_grad = torch.autograd.grad(ours, student)[0]
        torch.testing.assert_close(our_grad, their_grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_sequence_level_ratio_equals_trl(grpo, monkeypatch, batch, loss_type):
    """GSPO (``importance_sampling_level="sequence"``): off-policy, with and without the KL term,
    the course's loss and gradient equal TRL's."""
    monkeypatch.setattr(grpo, "importance_sampling_level", "sequence")
    monkeypatch.setattr(grpo, "loss_type", loss_type)
    num_items = int(batch["mask"].sum()) + OTHER_WINDOW_TOKENS
    for beta in (0.0, 0.04):
        monkeypatch.setattr(grpo, "beta", beta)
        theirs, their_grad = _trl_loss_and_grad(
            grpo, monkeypatch, batch, old=True, ref=beta > 0, num_items=num_items
        )
        logps = batch["logps"].clone().requires_grad_()  # (B, C)
        per_token = token_losses(
            logps,
            batch["old"],
            group_advantages(batch["rewards"], num_generations=G),
            ref_logps=batch["ref"],
            beta=beta,
            importance_sampling_level="sequence",
            completion_mask=batch["mask"],
        )  # (B, C)
        ours = aggregate_loss(
            per_token, batch["mask"], loss_type=loss_type, num_items_in_batch=num_items
        )
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        our_grad = torch.autograd.grad(ours, logps)[0]
        torch.testing.assert_close(our_grad, their_grad, rtol=0, atol=1e-6)
        token_level = token_losses(
            logps,
            batch["old"],
            group_advantages(batch["rewards"], num_generations=G),
            ref_logps=batch["ref"],
            beta=beta,
        )  # (B, C)
        assert not torch.allclose(per_token, token_level)  # the option changes the loss


def test_dapo_with_every_completion_masked_is_zero_as_in_trl(grpo, monkeypatch, batch):
    """A window whose completions are all masked (``mask_truncated_completions=True`` and every
    one truncated): TRL clamps ``num_items_in_batch`` 0 to 1 and returns 0; so does the course."""
    monkeypatch.setattr(grpo, "loss_type", "dapo")
    monkeypatch.setattr(grpo, "beta", 0.0)
    empty = dict(batch, mask=torch.zeros_like(batch["mask"]))
    theirs, their_grad = _trl_loss_and_grad(
        grpo, monkeypatch, empty, old=True, ref=False, num_items=0
    )
    ours, our_grad = _course_loss_and_grad(
        empty, loss_type="dapo", old=True, beta=0.0, eps=(0.2, 0.2), correction=True, num_items=0
    )
    assert float(theirs.detach()) == 0.0 and float(ours.detach()) == 0.0
    torch.testing.assert_close(our_grad, their_grad, rtol=0, atol=0)


def test_trl_accepts_exactly_the_eight_loss_types(grpo, monkeypatch, batch):
    """``TRL_LOSS_TYPES``: each computes a finite loss in ``_compute_loss``; another name is
    refused there."""
    monkeypatch.setattr(grpo, "beta", 0.0)
    for loss_type in TRL_LOSS_TYPES:
        monkeypatch.setattr(grpo, "loss_type", loss_type)
        loss, _ = _trl_loss_and_grad(grpo, monkeypatch, batch, old=True, ref=False,
                                     num_items=int(batch["mask"].sum()))  # fmt: skip
        assert torch.isfinite(loss), loss_type
    monkeypatch.setattr(grpo, "loss_type", "ppo")
    with pytest.raises(ValueError, match="Unknown loss type"):
        _trl_loss_and_grad(grpo, monkeypatch, batch, old=True, ref=False, num_items=1)
