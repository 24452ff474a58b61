"""Behaviour tests of the claims lesson 12 (RL losses) makes about TRL's ``GRPOTrainer``.

Each ``test_claim_12_*`` checks its entry of ``docs/claims.md`` against the installed TRL: real
one-step runs of :func:`lmlessons.course.rl.grpo_trainer` (the course GPT-2 and chat tokenizer,
nothing downloaded), and ``GRPOTrainer._compute_loss`` on tensors the test controls. TRL is a course
dependency (``requirements.txt``); these tests are skipped where it is not installed.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lmlessons.course.rl import grpo_trainer, length_reward
from lmlessons.grpo import LOSS_TYPES, group_advantages

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

MAX_LEN = 16  # the lesson's max_completion_length


@pytest.fixture(scope="module")
def step_one(trl, tmp_path_factory):
    """One optimizer step per loss type, seed 0, reward = length: TRL's logged loss, and what
    the reward function was handed (the completions' ids and the keyword arguments)."""
    seen: dict[str, dict] = {}
    logged = {}
    for loss_type in LOSS_TYPES:

        def reward(completions, completion_ids, _t=loss_type, **kwargs):
            seen[_t] = {"ids": [list(ids) for ids in completion_ids], "kwargs": kwargs}
            return length_reward(completions, completion_ids)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = grpo_trainer(
                str(tmp_path_factory.mktemp("grpo")), loss_type=loss_type, reward_funcs=reward
            )
            trainer.train()
        logged[loss_type] = trainer.state.log_history[0]["loss"]
    return logged, seen, trainer


def test_claim_12_trl_defaults(trl, tmp_path):
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert args.loss_type == "dapo" and args.beta == 0.0 and args.scale_rewards == "group"
    assert args.num_iterations == 1 and args.epsilon == 0.2
    assert args.use_bias_correction_kl is True


def test_claim_12_step_one_grpo_zero(step_one):
    logged, seen, _ = step_one
    lengths = torch.tensor([len(ids) for ids in seen["grpo"]["ids"]], dtype=torch.float)  # (B,)
    assert all(s["ids"] == seen["grpo"]["ids"] for s in seen.values())  # the same completions
    assert lengths.unique().numel() > 1  # the rewards differ
    adv = group_advantages(lengths, num_generations=4)  # (B,)
    assert abs(logged["grpo"]) < 1e-6
    weighted = -(adv * lengths).sum()
    assert logged["bnpo"] == pytest.approx(float(weighted / lengths.sum()), abs=1e-5)
    assert logged["dapo"] == pytest.approx(logged["bnpo"], abs=1e-6)
    expected = float(weighted / (len(lengths) * MAX_LEN))
    assert logged["dr_grpo"] == pytest.approx(expected, abs=1e-5)
    assert abs(logged["bnpo"]) > 1e-3


def test_claim_12_columns_reach_rewards(step_one):
    _, seen, _ = step_one
    kwargs = seen["dapo"]["kwargs"]
    assert len(kwargs["answer"]) == len(seen["dapo"]["ids"]) == 32
    assert kwargs["answer"][:4] == [kwargs["answer"][0]] * 4  # a prompt's 4 completions
    assert "task" in kwargs


def test_claim_12_sep_ends_generation(step_one):
    _, seen, trainer = step_one
    sep = trainer.processing_class.sep_token_id
    ids = seen["dapo"]["ids"]
    short = [row for row in ids if len(row) < MAX_LEN]
    assert short and all(row[-1] == sep and sep not in row[:-1] for row in short)


def test_claim_12_dapo_window_rescaled(trl, tmp_path, monkeypatch):
    """TRL 1.16 divides the dapo sum by num_items_in_batch * GA / steps_per_generation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = grpo_trainer(str(tmp_path), loss_type="dapo")
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by train()'s loop
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
