"""Behaviour tests of the claims lesson 12 (RL losses) makes about TRL's ``GRPOTrainer``.

Each ``test_claim_12_*`` checks its entry of ``docs/claims.md`` against the installed TRL: real
one-step runs of :func:`lmlessons.course.rl.grpo_trainer` (the course GPT-2 and chat tokenizer,
nothing downloaded; built by the session fixture ``grpo_trainer``), and
``GRPOTrainer._compute_loss`` on tensors the test controls. TRL is a course dependency
(``requirements.txt``); these tests are skipped where it is not installed.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from _grpo_claims import loss_inputs, trl_loss

from lmlessons.course.rl import length_reward
from lmlessons.grpo import LOSS_TYPES, TRL_LOSS_TYPES, group_advantages

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture
def dapo_trainer(grpo_trainer):
    """The course's ``dapo`` trainer, built once per session (``grpo_trainer``)."""
    return grpo_trainer(loss_type="dapo")


MAX_LEN = 16  # the lesson's max_completion_length


@pytest.fixture(scope="module")
def step_one(grpo_trainer):
    """One optimizer step per loss type, seed 0, reward = length: TRL's logged loss, and what
    the reward function was handed (the completions' ids and the keyword arguments)."""
    seen: dict[str, dict] = {}
    logged = {}
    for loss_type in LOSS_TYPES:

        def reward(completions, completion_ids, _t=loss_type, **kwargs):
            seen[_t] = {"ids": [list(ids) for ids in completion_ids], "kwargs": kwargs}
            return length_reward(completions, completion_ids)

        trainer = grpo_trainer(fresh=True, loss_type=loss_type, reward_funcs=reward)  # trained
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
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


def test_claim_12_eight_loss_types(trl, dapo_trainer, monkeypatch):
    """GRPOConfig names eight loss types; cispo, sapo and vespo change the per-token surrogate,
    luspo sums each completion's token losses (the clipped surrogate) and averages them."""
    help_text = trl.GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    supported = help_text.split("Supported values are", 1)[1].split(".")[0]
    assert set(re.findall(r"'(\w+)'", supported)) == set(TRL_LOSS_TYPES)
    inputs = loss_inputs()
    mask, adv = inputs["completion_mask"].float(), inputs["advantages"][:, None]  # (B, C), (B, 1)
    old = inputs["old_per_token_logps"]  # (B, C)
    logps = old + torch.randn(old.shape, generator=torch.Generator().manual_seed(1)) * 0.3
    ratio = (logps - old).exp()  # (B, C)
    args = dapo_trainer.args
    tau = torch.where(adv > 0, args.sapo_temperature_pos, args.sapo_temperature_neg)  # (B, 1)
    expected = {
        "cispo": (-ratio.clamp(max=dapo_trainer.epsilon_high) * adv * logps * mask).sum()
        / mask.sum(),
        "sapo": (
            (-torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv * mask).sum(-1) / mask.sum(-1)
        ).mean(),
        "luspo": (-torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * mask).sum(-1).mean(),
    }
    for loss_type, value in expected.items():
        monkeypatch.setattr(dapo_trainer, "loss_type", loss_type)
        theirs = trl_loss(dapo_trainer, monkeypatch, inputs, logps)
        assert float(theirs) == pytest.approx(float(value), abs=1e-5), loss_type
    monkeypatch.setattr(dapo_trainer, "loss_type", "vespo")
    leaf = logps.clone().requires_grad_()  # (B, C)
    grad = torch.autograd.grad(trl_loss(dapo_trainer, monkeypatch, inputs, leaf), leaf)[0]
    for row, m in zip(grad, mask.bool()):  # one weight per completion: equal over its tokens
        assert torch.allclose(row[m], row[m][0].expand(int(m.sum())), atol=1e-7)


def test_claim_12_gspo_trl_warns(grpo_trainer, monkeypatch):
    import trl.trainer.grpo_trainer as module

    said: list[str] = []
    monkeypatch.setattr(module.logger, "warning", lambda msg, *a, **k: said.append(str(msg)))
    grpo_trainer(fresh=True, loss_type="dapo", importance_sampling_level="sequence")
    (warning,) = [m for m in said if "importance_sampling_level='sequence'" in m]
    assert "completion length" in warning and "loss_type='grpo'" in warning


def test_claim_12_micro_batch_size(dapo_trainer):
    args = dapo_trainer.args
    assert args.per_device_train_batch_size == 32 == 8 * args.num_generations
    assert args.gradient_accumulation_steps == 1 and args.steps_per_generation == 1


def test_claim_quiz_12_group_advantages():
    from lmlessons.exercises.quizzes import QUIZZES

    (question,) = [q for q in QUIZZES["12"] if q.id == "12.1"]
    why = " ".join(" ".join(c.why.split()) for c in question.choices if c.correct)
    rewards = torch.tensor([1.0, 1.0, 1.0, 5.0])  # (G,)
    before = group_advantages(rewards, num_generations=4, scale_rewards="none")
    after = group_advantages(rewards, num_generations=4)
    assert before.tolist() == [-1.0, -1.0, -1.0, 3.0] and "-1, -1, -1 and 3 before" in why
    assert float(rewards.std()) == 2.0 and "(2, with Bessel's correction" in why
    torch.testing.assert_close(after, torch.tensor([-0.5, -0.5, -0.5, 1.5]), atol=1e-4, rtol=0)
    assert "-0.5, -0.5, -0.5 and 1.5" in why
