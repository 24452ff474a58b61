"""Oracle: lmlessons.preference against TRL 1.16's ``DPOTrainer`` and ``CPOTrainer``.

One ``DPOTrainer`` per session (the fixture ``dpo_trainer``), on tiny GPT-2s and the course
tokenizer, never trained: its collator, its log-probabilities and its ``compute_loss`` run on our
batches. TRL 1.16 has no ``dpo_loss`` function (the loss is written inside
``DPOTrainer._compute_loss``), so the loss of each ``loss_type`` and its gradient are read through
``compute_loss`` itself, with a stand-in model that returns our policy log-probabilities and the
reference ones passed as precomputed (``ref_chosen_logps`` in the batch, as with
``precompute_ref_log_probs=True``). SimPO is
``CPOTrainer.cpo_loss`` (``trl.experimental.cpo``), called on our tensors.

TRL is a course dependency (``requirements.txt``): skipped, with the reason, without it.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lmlessons.preference import (
    LOSS_TYPES,
    dpo_loss,
    preference_batch,
    preference_metrics,
    sequence_logprobs,
    simpo_loss,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

PAIRS = [
    {"prompt": "the cat sat on", "chosen": " the mat", "rejected": " a dog that ran far away"},
    {"prompt": "a bird", "chosen": " sang a song all day long", "rejected": " fell"},
    {"prompt": "the river ran", "chosen": " under the old bridge", "rejected": " up the hill"},
]
METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


def _tiny_parts() -> dict:
    """The :data:`PAIRS` on tiny GPT-2s: policy ``tiny_gpt2(seed=0)``, an explicit reference
    ``tiny_gpt2(seed=1)`` (with ``ref_model=None`` TRL would reload the policy from
    ``config._name_or_path``, which is empty for a model built from a config), and the course
    tokenizer with ``eos_token = "[SEP]"``: it has no end-of-text token, and TRL appends
    ``eos_token`` as text to every chosen and rejected completion (``add_eos``)."""
    from lmlessons.course.chat import sep_eos_tokenizer
    from lmlessons.course.models import tiny_gpt2

    tok = sep_eos_tokenizer()
    return {
        "pairs": PAIRS,
        "processing_class": tok,
        "model": tiny_gpt2(tok, seed=0),
        "ref_model": tiny_gpt2(tok, seed=1),
    }


#: The oracle's ``DPOConfig`` arguments beyond the session fixture ``dpo_trainer``'s.
ORACLE = {"gradient_checkpointing": False}


@pytest.fixture
def dpo(dpo_trainer):
    """The ``DPOTrainer`` on :func:`_tiny_parts`, float32 on the CPU, built once per session (the
    session fixture ``dpo_trainer``: ``dpo.trainer``, ``dpo.tok``, ``dpo.examples``)."""
    return dpo_trainer(_tiny_parts, **ORACLE)


def _loss_and_logs(trainer, model, inputs) -> tuple[torch.Tensor, dict[str, float]]:
    """``compute_loss`` of one batch and what ``DPOTrainer.log`` then adds to the log history
    (the metrics of that batch alone: a first ``log`` flushes any left by a failed test)."""
    trainer.log({})
    loss = trainer.compute_loss(model, inputs)
    trainer.log({})
    return loss, trainer.state.log_history[-1]


def _logits(model, batch) -> torch.Tensor:
    """The model's ordinary forward (TRL's fused LM head is off without ``fused_lm_head=True``)."""
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


# -------------------------------------------------------------------------- the batch and logps


def test_trl_collator_pads_as_preference_batch(dpo):
    theirs = dpo.trainer.data_collator(dpo.examples)
    ours = preference_batch(dpo.examples, pad_token_id=dpo.tok.pad_token_id)
    assert set(theirs) == {"input_ids", "attention_mask", "completion_mask"}
    for key in theirs:
        assert torch.equal(theirs[key], ours[key]), key
    assert len({len(e["chosen_ids"]) for e in dpo.examples}) > 1  # really padded


def test_trl_dpo_logps_are_sequence_logprobs(dpo):
    """``compute_ref_log_probs`` runs ``_compute_loss``'s log-probabilities (fused LM head, sum
    over the completion) on any model: the policy's and the reference's."""
    batch = dpo.trainer.data_collator(dpo.examples)
    labels = preference_batch(dpo.examples, pad_token_id=dpo.tok.pad_token_id)["labels"]
    for model in (dpo.trainer.model, dpo.trainer.ref_model):
        with torch.no_grad():
            theirs = dpo.trainer.compute_ref_log_probs(model, batch)  # (chosen, rejected)
        ours = sequence_logprobs(_logits(model, batch), labels).chunk(2)
        for t, o in zip(theirs, ours):
            assert torch.allclose(t, o, rtol=1e-6, atol=1e-6), (t, o)  # float32 rounding


def test_trl_dpo_loss_and_metrics_on_a_real_batch(dpo):
    """``compute_loss`` (policy and reference forwards, ``loss_type="sigmoid"``) is the mean of
    :func:`dpo_loss` of our sequence log-probabilities; its logged metrics are
    :func:`preference_metrics`."""
    trainer = dpo.trainer
    batch = trainer.data_collator(dpo.examples)
    labels = preference_batch(dpo.examples, pad_token_id=dpo.tok.pad_token_id)["labels"]
    policy = sequence_logprobs(_logits(trainer.model, batch), labels).chunk(2)
    ref = sequence_logprobs(_logits(trainer.ref_model, batch), labels).chunk(2)
    losses, chosen_rewards, rejected_rewards = dpo_loss(*policy, *ref, beta=trainer.beta)
    with torch.no_grad():
        theirs, logged = _loss_and_logs(trainer, trainer.model, batch)
    assert abs(float(theirs) - math.log(2)) > 1e-3  # the reference differs from the policy
    assert float(theirs) == pytest.approx(float(losses.mean()), abs=1e-6)
    ours = preference_metrics(
        chosen_rewards, rejected_rewards, chosen_logps=policy[0], rejected_logps=policy[1]
    )
    for key in METRICS:
        assert logged[key] == pytest.approx(ours[key], rel=1e-6, abs=1e-6), key


# ------------------------------------------------------------------ each loss type, on our tensors


class _GivenLogps(torch.nn.Module):
    """Stands in for the policy with TRL's fused LM head: its per-token ``log_probs`` put each
    row's given sequence log-probability on the first position, zeros elsewhere."""

    def __init__(self, logps: torch.Tensor) -> None:
        super().__init__()
        self.logps = logps  # (2B,)

    def forward(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        rows, width = input_ids.shape
        rest = torch.zeros(rows, width - 2)  # (2B, T - 2)
        per_token = torch.cat([self.logps[:, None], rest], dim=1)  # (2B, T - 1)
        zeros = torch.zeros(rows, width - 1)  # (2B, T - 1)
        return SimpleNamespace(
            log_probs=per_token, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool()
        )


def _completion_mask(lengths: list[int]) -> torch.Tensor:
    """One prompt token, then ``lengths[i]`` completion tokens, then padding."""
    width = 2 + max(lengths)
    return torch.tensor([[0] + [1] * n + [0] * (width - 1 - n) for n in lengths])  # (2B, T)


def _trl_loss(dpo, monkeypatch, loss_type, beta, tensors, lengths):
    """TRL's loss of one ``loss_type`` on the four ``(B,)`` tensors, and what it logged."""
    policy_chosen, policy_rejected, ref_chosen, ref_rejected = tensors
    for name, value in (
        ("loss_types", [loss_type]),
        ("loss_weights", [1.0]),
        ("beta", beta),
        ("precompute_ref_logps", True),
    ):
        monkeypatch.setattr(dpo.trainer, name, value)
    mask = _completion_mask(lengths)  # (2B, T)
    inputs = {
        "input_ids": torch.zeros_like(mask),
        "attention_mask": torch.ones_like(mask),
        "completion_mask": mask,
        "ref_chosen_logps": ref_chosen,
        "ref_rejected_logps": ref_rejected,
    }
    model = _GivenLogps(torch.cat([policy_chosen, policy_rejected]))
    return _loss_and_logs(dpo.trainer, model, inputs)


def _tensors(seed: int, n: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(-30 * torch.rand(n, generator=g)).requires_grad_() for _ in range(4)]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_trl_loss_and_gradient_per_loss_type(dpo, monkeypatch, loss_type):
    beta, lengths = 0.3, [3, 7, 1, 4, 5, 2, 6, 4]  # chosen lengths, then rejected lengths
    tensors = _tensors(seed=LOSS_TYPES.index(loss_type))
    theirs, logged = _trl_loss(dpo, monkeypatch, loss_type, beta, tensors, lengths)
    chosen_lengths, rejected_lengths = torch.tensor(lengths).chunk(2)
    losses, chosen_rewards, rejected_rewards = dpo_loss(
        *tensors, beta=beta, loss_type=loss_type,
        chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths,
    )  # fmt: skip
    ours = losses.mean()
    assert float(theirs.detach()) == pytest.approx(float(ours.detach()), abs=1e-6)
    for t, o in zip(torch.autograd.grad(theirs, tensors), torch.autograd.grad(ours, tensors)):
        assert torch.allclose(t, o, rtol=0, atol=1e-6), (t, o)
    assert logged["logps/chosen"] == pytest.approx(float(tensors[0].mean()), abs=1e-5)
    metrics = preference_metrics(chosen_rewards, rejected_rewards)
    for key in METRICS[:4]:
        assert logged[key] == pytest.approx(metrics[key], abs=1e-5), key


def test_trl_reward_accuracy_is_against_the_reference(dpo, monkeypatch):
    """The policy prefers every rejected completion, the reference more so: TRL logs
    ``rewards/accuracies`` 1.0."""
    tensors = [
        torch.tensor([-12.0, -8.0]),  # policy, chosen
        torch.tensor([-10.0, -5.0]),  # policy, rejected: preferred
        torch.tensor([-14.0, -9.0]),  # reference, chosen
        torch.tensor([-9.0, -3.0]),  # reference, rejected: preferred even more
    ]
    _, logged = _trl_loss(dpo, monkeypatch, "sigmoid", 0.1, tensors, [2, 2, 2, 2])
    assert logged["logps/chosen"] < logged["logps/rejected"]
    assert logged["rewards/accuracies"] == 1.0


# ------------------------------------------------------------------------------------------ SimPO


def test_trl_simpo_is_simpo_loss(trl):
    """``CPOTrainer.cpo_loss`` with ``loss_type="simpo"``, run on our tensors with the trainer's
    attributes it reads (``alpha`` and ``label_smoothing`` at their defaults, 0)."""
    from trl.experimental.cpo import CPOTrainer

    beta, gamma = 2.0, 0.8
    trainer = SimpleNamespace(
        beta=beta, simpo_gamma=gamma, loss_type="simpo", label_smoothing=0.0, alpha=0.0,
        accelerator=SimpleNamespace(device=torch.device("cpu")),
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    chosen = (-3 * torch.rand(5, generator=g)).requires_grad_()  # (5,) average log-probs
    rejected = (-3 * torch.rand(5, generator=g)).requires_grad_()  # (5,)
    theirs = CPOTrainer.cpo_loss(trainer, chosen, rejected)
    ours = simpo_loss(chosen, rejected, beta=beta, simpo_gamma=gamma)
    for t, o in zip(theirs, ours):
        assert torch.allclose(t, o, rtol=0, atol=1e-6)
    grads = [torch.autograd.grad(x[0].mean(), [chosen, rejected]) for x in (theirs, ours)]
    for t, o in zip(*grads):
        assert torch.allclose(t, o, rtol=0, atol=1e-6)


def test_trl_cpo_batch_logps_are_sequence_logprobs(dpo):
    """``CPOTrainer.get_batch_logps``, the sum and (SimPO's) the average, on the GPT-2's logits
    of a real preference batch."""
    from trl.experimental.cpo import CPOTrainer

    batch = preference_batch(dpo.examples, pad_token_id=dpo.tok.pad_token_id)
    logits = _logits(dpo.trainer.model, batch)
    for average in (False, True):
        theirs = CPOTrainer.get_batch_logps(logits, batch["labels"], average_log_prob=average)
        ours = sequence_logprobs(logits, batch["labels"], average=average)
        assert torch.allclose(theirs, ours, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------- what TRL does with them


def test_trl_eos_sep_ends_every_completion_with_two_seps(dpo):
    """With ``eos_token = "[SEP]"`` TRL appends the text "[SEP]" to every completion, and the
    course tokenizer adds its own [CLS] ... [SEP]: each completion ends with two [SEP]s, and the
    prompt's closing [SEP] is not in the training sequence (TRL's prompt is the common prefix of
    the prompt's and the whole text's ids)."""
    sep = dpo.tok.sep_token_id
    for example, pair in zip(dpo.examples, PAIRS):
        assert example["chosen_ids"][-2:] == [sep, sep]
        assert example["rejected_ids"][-2:] == [sep, sep]
        alone = dpo.tok(pair["prompt"])["input_ids"]
        assert alone[-1] == sep and example["prompt_ids"] == alone[:-1]


def test_trl_without_a_reference_reloads_the_policy_by_name(dpo_trainer, dpo):
    """``ref_model=None`` makes TRL load a reference from ``model.config._name_or_path``: for a
    model built from a config it is empty and the trainer cannot be built."""
    from lmlessons.course.models import tiny_gpt2

    model = tiny_gpt2(dpo.tok, seed=0)
    assert model.config._name_or_path == ""
    parts = {"pairs": PAIRS[:1], "processing_class": dpo.tok, "model": model, "ref_model": None}
    with pytest.raises(OSError):
        dpo_trainer(lambda: parts, fresh=True, **ORACLE)


def test_trl_needs_an_eos_token(dpo_trainer):
    """The course tokenizer as it is (no ``eos_token``): TRL's ``add_eos`` calls
    ``str.endswith(None)`` on the first text example."""
    from lmlessons.course.models import tiny_gpt2
    from lmlessons.course.tokenizer import load_tokenizer

    tok = load_tokenizer()
    assert tok.eos_token is None
    parts = {
        "pairs": PAIRS[:1],
        "processing_class": tok,
        "model": tiny_gpt2(tok, seed=0),
        "ref_model": tiny_gpt2(tok, seed=1),
    }
    with pytest.raises(TypeError, match="endswith"):
        dpo_trainer(lambda: parts, fresh=True, **ORACLE)
