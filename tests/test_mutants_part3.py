"""Tests that pin what mutation testing of Part III's core found unpinned.

``mutmut`` on ``lmlessons.grpo``, ``lmlessons.preference`` and ``lmlessons.kl`` left mutants alive
that change a default (``dpo_loss``'s ``beta``, ``token_losses``' ``use_bias_correction_kl``), the
0-dim case of the sample KL estimators, a dtype the result keeps, a bound of a check, or the text
of an error message (the argument it names, the shapes it prints). Each test below compares with a
plain-Python computation or with the message the source's f-string writes, and fails on those
mutants. Tiny tensors, no model, no training.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from _exact import gen, raises_exactly

from lmlessons.grpo import (
    aggregate_loss,
    group_advantages,
    rloo_advantages,
    token_losses,
    token_weights,
)
from lmlessons.kl import forward_kl, generalized_jsd, k1, k2, k3, kl_divergence, reverse_kl
from lmlessons.preference import (
    completion_logps,
    dpo_loss,
    preference_batch,
    preference_metrics,
    reward_accuracies,
    reward_margins,
    sequence_logprobs,
    simpo_loss,
)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------------------------- KL estimators


@pytest.mark.parametrize(
    ("estimator", "by_hand"),
    [
        (k1, lambda x: -x),
        (k2, lambda x: x * x / 2),
        (k3, lambda x: math.exp(x) - x - 1),
    ],
    ids=["k1", "k2", "k3"],
)
def test_the_sample_estimators_take_a_0_dim_log_ratio(estimator, by_hand):
    """One sample as a 0-dim tensor is "any shape" too: it returns a 0-dim tensor."""
    for x in (0.5, -1.25):
        out = estimator(torch.tensor(x, dtype=torch.float64))
        assert out.shape == ()
        assert float(out) == pytest.approx(by_hand(x), rel=1e-12)


@pytest.mark.parametrize("estimator", [k1, k2, k3], ids=["k1", "k2", "k3"])
def test_the_sample_estimators_name_log_ratio(estimator):
    raises_exactly(
        TypeError, "log_ratio must be a torch.Tensor of floats, got list", lambda: estimator([0.5])
    )
    raises_exactly(
        TypeError,
        "log_ratio must be a floating-point tensor, got dtype torch.int64",
        lambda: estimator(torch.tensor([1, 2])),
    )


def test_kl_divergence_names_each_argument():
    ok = torch.zeros(2, 3)
    raises_exactly(
        TypeError,
        "log_p must be a torch.Tensor of floats, got list",
        lambda: kl_divergence([0.0], ok),
    )
    raises_exactly(
        TypeError,
        "log_q must be a torch.Tensor of floats, got list",
        lambda: kl_divergence(ok, [0.0]),
    )


@pytest.mark.parametrize("kl", [forward_kl, reverse_kl], ids=["forward", "reverse"])
def test_the_distillation_kls_name_the_logits(kl):
    ok = torch.zeros(2, 3)
    ints = torch.zeros(2, 3, dtype=torch.long)
    message = "must be a floating-point tensor, got dtype torch.int64"
    raises_exactly(TypeError, f"student_logits {message}", lambda: kl(ints, ok))
    raises_exactly(TypeError, f"teacher_logits {message}", lambda: kl(ok, ints))


def test_low_precision_logits_are_log_softmaxed_in_float32():
    """bfloat16 logits are cast to float32 before the log-softmax (``promote_types`` with
    float32): the result is float32 and equals the KL of the same logits given as float32."""
    g = gen(0)
    student = torch.randn(2, 3, 7, generator=g).to(torch.bfloat16)  # (B, T, V)
    teacher = torch.randn(2, 3, 7, generator=g).to(torch.bfloat16)  # (B, T, V)
    for kl in (forward_kl, reverse_kl):
        both = kl(student, teacher)
        assert both.dtype == torch.float32
        reference = kl(student.float(), teacher.float())  # the cast is exact
        torch.testing.assert_close(both, reference, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(kl(student, teacher.float()), reference, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(kl(student.float(), teacher), reference, rtol=1e-6, atol=1e-7)


def test_generalized_jsd_of_one_position_is_the_mixture_jsd_by_hand():
    """``(V,)`` logits: one position, a 0-dim divergence; ``"batchmean"`` divides it by 1."""
    student = torch.tensor([0.3, -1.0, 2.0, 0.0], dtype=torch.float64)  # (V,)
    teacher = torch.tensor([1.5, 0.2, -0.7, 0.4], dtype=torch.float64)  # (V,)
    beta = 0.3

    def softmax(values):
        exps = [math.exp(v) for v in values.tolist()]
        return [e / sum(exps) for e in exps]

    def kl(p, q):
        return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))

    s, t = softmax(student), softmax(teacher)
    m = [beta * ti + (1 - beta) * si for si, ti in zip(s, t, strict=True)]
    by_hand = beta * kl(t, m) + (1 - beta) * kl(s, m)
    per_position = generalized_jsd(student, teacher, beta=beta, reduction="none")
    assert per_position.shape == ()
    assert float(per_position) == pytest.approx(by_hand, rel=1e-10)
    assert float(generalized_jsd(student, teacher, beta=beta)) == pytest.approx(by_hand, rel=1e-10)


def test_generalized_jsd_labels_message_names_student_logits_and_labels():
    student, teacher = torch.zeros(2, 3, 5), torch.zeros(2, 3, 5)
    labels = torch.zeros(2, 2, dtype=torch.long)
    raises_exactly(
        ValueError,
        "labels must have shape student_logits.shape[:-1] = (2, 3) (one label per position), "
        "got (2, 2)",
        lambda: generalized_jsd(student, teacher, labels=labels),
    )


# ---------------------------------------------------------------------------------------- GRPO

LP = torch.zeros(4, 3)  # (B, C)
ADV = torch.zeros(4)  # (B,)


def test_grpo_tensor_checks_print_the_argument_and_the_shapes():
    ints = torch.zeros(4, 3, dtype=torch.long)
    message = "must be a floating-point tensor, got dtype torch.int64"
    raises_exactly(TypeError, f"old_logps {message}", lambda: token_losses(LP, ints, ADV))
    raises_exactly(
        TypeError,
        f"ref_logps {message}",
        lambda: token_losses(LP, None, ADV, beta=0.1, ref_logps=ints),
    )
    raises_exactly(
        TypeError,
        "advantages must be a torch.Tensor of floats, got list",
        lambda: token_losses(LP, None, [0.0]),
    )
    raises_exactly(
        ValueError,
        "advantages must have shape (B,) = (4,) or (B, C) = (4, 3), got (3,)",
        lambda: token_losses(LP, None, torch.zeros(3)),
    )
    raises_exactly(
        ValueError,
        "logps must have at least 2 dimensions, got shape (4,)",
        lambda: token_losses(torch.zeros(4), None, ADV),
    )
    raises_exactly(
        ValueError,
        "logps must have shape (B, C), got (4, 3, 1)",
        lambda: token_losses(torch.zeros(4, 3, 1), None, ADV),
    )
    raises_exactly(
        ValueError,
        "completion_mask must have the shape of logps (4, 3), got (4, 2)",
        lambda: token_losses(
            LP, None, ADV, importance_sampling_level="sequence", completion_mask=torch.ones(4, 2)
        ),
    )


def test_grpo_weight_checks_print_the_argument():
    mask = torch.ones(4, 3)
    raises_exactly(
        TypeError,
        "completion_mask must be a torch.Tensor of 0 and 1, got list",
        lambda: token_weights(mask.tolist(), loss_type="bnpo"),
    )
    raises_exactly(
        TypeError,
        "max_completion_length must be an int, got str",
        lambda: token_weights(mask, loss_type="dr_grpo", max_completion_length="6"),
    )
    raises_exactly(
        ValueError,
        "per_token_loss and completion_mask must have one shape (B, C), got (4, 2) and (4, 3)",
        lambda: aggregate_loss(torch.zeros(4, 2), mask, loss_type="bnpo"),
    )


def test_advantage_checks_print_the_argument_and_the_bound():
    raises_exactly(
        ValueError,
        "rewards must be finite (TRL zeroes the advantage of a NaN reward)",
        lambda: group_advantages(torch.tensor([1.0, float("nan")]), num_generations=2),
    )
    raises_exactly(
        TypeError,
        "rewards must be a torch.Tensor of floats, got list",
        lambda: rloo_advantages([1.0, 2.0], num_generations=2),
    )
    for bad in (1, 0):  # a group of one has no "others": the bound is 2
        raises_exactly(
            ValueError,
            f"num_generations must be >= 2, got {bad}",
            lambda bad=bad: rloo_advantages(torch.zeros(4), num_generations=bad),
        )
    raises_exactly(
        TypeError,
        "num_generations must be an int, got float",
        lambda: rloo_advantages(torch.zeros(4), num_generations=2.0),
    )


def test_rloo_at_the_smallest_group_is_the_difference_of_the_pair():
    """G = 2: each completion's baseline is the other one's reward."""
    rewards = torch.tensor([3.0, 1.0, -0.5, 2.5])
    out = rloo_advantages(rewards, num_generations=2)
    assert out.tolist() == [3.0 - 1.0, 1.0 - 3.0, -0.5 - 2.5, 2.5 - (-0.5)]


def test_the_kl_term_is_bias_corrected_by_default():
    """Off-policy, ``beta > 0``: the default multiplies the k3 term by the token's ratio (TRL
    1.16's ``use_bias_correction_kl=True``), computed here token by token in plain Python."""
    logps = [[-1.0, -2.0, -0.5]]
    old = [[-1.1, -1.7, -0.5]]
    ref = [[-1.3, -1.5, -0.2]]
    adv, beta, eps = 0.7, 0.04, 0.2
    by_hand = []
    for lp, o, r in zip(logps[0], old[0], ref[0], strict=True):
        ratio = math.exp(lp - o)
        clipped = min(max(ratio, 1 - eps), 1 + eps)
        kl = math.exp(r - lp) - (r - lp) - 1
        by_hand.append(-min(ratio * adv, clipped * adv) + beta * kl * ratio)
    args = (torch.tensor(logps, dtype=torch.float64), torch.tensor(old, dtype=torch.float64))
    kwargs = {"beta": beta, "ref_logps": torch.tensor(ref, dtype=torch.float64)}
    advantages = torch.tensor([adv], dtype=torch.float64)
    default = token_losses(*args, advantages, **kwargs)
    explicit = token_losses(*args, advantages, use_bias_correction_kl=True, **kwargs)
    torch.testing.assert_close(default, explicit, rtol=0, atol=0)
    assert default[0].tolist() == pytest.approx(by_hand, rel=1e-12)
    uncorrected = token_losses(*args, advantages, use_bias_correction_kl=False, **kwargs)
    assert not torch.allclose(default, uncorrected)  # the default is not the other setting


def test_a_one_token_completion_has_its_tokens_ratio_at_sequence_level():
    """GSPO's ratio is ``exp`` of the mean log-ratio over the completion's tokens: for a
    completion of one token, that token's ratio (the count is clamped at 1, not more)."""
    logps = torch.tensor([[0.1, 5.0, 5.0], [0.05, 0.15, 9.0]], dtype=torch.float64)  # (B, C)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]])  # (B, C): 1 and 2 tokens
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    old = torch.zeros_like(logps)
    kwargs = {"epsilon_low": 0.5, "epsilon_high": 0.5, "importance_sampling_level": "sequence"}
    out = token_losses(logps, old, advantages, completion_mask=mask, **kwargs)
    ratios = [math.exp(0.1), math.exp((0.05 + 0.15) / 2)]  # inside [0.5, 1.5]: not clipped
    for row, (ratio, adv) in enumerate(zip(ratios, advantages.tolist(), strict=True)):
        assert out[row].tolist() == pytest.approx([-ratio * adv] * 3, rel=1e-12)


def test_bfloat16_losses_stay_bfloat16():
    """The float32 mask and weights are cast to the losses' dtype: a bfloat16 loss stays one,
    to bfloat16's precision of the float64 computation."""
    logps = torch.tensor([[-0.5, -1.0, -2.0], [-0.25, -3.0, -1.5]])  # (B, C)
    old = logps - torch.tensor([[0.1, -0.1, 0.0], [0.05, 0.05, 0.05]])  # (B, C)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])  # (B, C)
    advantages = torch.tensor([1.0, -0.5])  # (B,)
    args = (logps, old, advantages)
    low = token_losses(
        *(a.to(torch.bfloat16) for a in args),
        importance_sampling_level="sequence",
        completion_mask=mask,
    )
    high = token_losses(
        *(a.double() for a in args), importance_sampling_level="sequence", completion_mask=mask
    )
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.double(), high, rtol=1e-2, atol=1e-2)
    per_token = torch.tensor([[0.5, -1.25, 3.0], [2.0, 0.75, -0.5]])  # (B, C)
    loss = aggregate_loss(per_token.to(torch.bfloat16), mask, loss_type="bnpo")
    assert loss.dtype == torch.bfloat16
    by_hand = (0.5 - 1.25 + 2.0 + 0.75 - 0.5) / 5  # the mean over the 5 masked-in tokens
    assert float(loss) == pytest.approx(by_hand, abs=1e-2)


# ---------------------------------------------------------------------------------- preference

X = torch.zeros(3)
LENGTHS = torch.ones(3, dtype=torch.long)


def test_dpo_loss_default_beta_is_0_1():
    """Called without ``beta``: the loss and the rewards of ``beta=0.1``, and by hand
    ``-log sigmoid(0.1 * d)`` and ``0.1 * log-ratio``."""
    pc = torch.tensor([-3.0, -7.5], dtype=torch.float64)
    pr = torch.tensor([-4.0, -6.0], dtype=torch.float64)
    rc = torch.tensor([-3.5, -7.0], dtype=torch.float64)
    rr = torch.tensor([-3.0, -8.0], dtype=torch.float64)
    default = dpo_loss(pc, pr, rc, rr)
    explicit = dpo_loss(pc, pr, rc, rr, beta=0.1)
    for a, b in zip(default, explicit, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    chosen = [c - r for c, r in zip(pc.tolist(), rc.tolist(), strict=True)]  # [0.5, -0.5]
    rejected = [c - r for c, r in zip(pr.tolist(), rr.tolist(), strict=True)]  # [-1.0, 2.0]
    by_hand = [-math.log(_sigmoid(0.1 * (c - r))) for c, r in zip(chosen, rejected, strict=True)]
    assert default[0].tolist() == pytest.approx(by_hand, rel=1e-12)
    assert default[1].tolist() == pytest.approx([0.1 * c for c in chosen], rel=1e-12)
    assert default[2].tolist() == pytest.approx([0.1 * r for r in rejected], rel=1e-12)


def test_per_pair_messages_name_the_argument_and_the_first_one():
    first = "policy_chosen_logps (3,)"
    raises_exactly(
        ValueError,
        f"ref_chosen_logps must have the shape of {first}, got (4,)",
        lambda: dpo_loss(X, X, torch.zeros(4), X),
    )
    raises_exactly(
        ValueError,
        f"ref_rejected_logps must have the shape of {first}, got (2,)",
        lambda: dpo_loss(X, X, X, torch.zeros(2)),
    )
    raises_exactly(
        ValueError,
        "chosen_avg_logps must have shape (B,) with B >= 1, got (1, 3)",
        lambda: simpo_loss(X[None], X, beta=2.0, simpo_gamma=0.5),
    )
    raises_exactly(
        TypeError,
        "chosen_rewards must be a torch.Tensor of floats, got list",
        lambda: reward_accuracies([0.0], X),
    )
    raises_exactly(
        ValueError,
        "rejected_rewards must have the shape of chosen_rewards (3,), got (2,)",
        lambda: reward_margins(X, X[:2]),
    )
    raises_exactly(
        ValueError,
        "chosen_logps must have shape (B,) with B >= 1, got (1, 3)",
        lambda: preference_metrics(X, X, chosen_logps=X[None]),
    )


def test_length_counts_must_have_one_per_pair():
    raises_exactly(
        ValueError,
        "chosen_lengths must have shape (3,), got (2,)",
        lambda: dpo_loss(
            X, X, X, X, loss_type="ipo", chosen_lengths=LENGTHS[:2], rejected_lengths=LENGTHS
        ),
    )


@pytest.mark.parametrize("beta", [0.0, -1.0, float("inf")])
def test_simpo_beta_must_be_positive(beta):
    raises_exactly(
        ValueError,
        f"beta must be a finite number > 0, got {beta}",
        lambda: simpo_loss(X, X, beta=beta, simpo_gamma=0.5),
    )


def test_simpo_gamma_may_be_zero_but_not_negative():
    losses, _, _ = simpo_loss(X, X, beta=2.0, simpo_gamma=0.0)
    assert losses.tolist() == pytest.approx([math.log(2.0)] * 3)  # -log sigmoid(0)
    raises_exactly(
        ValueError,
        "simpo_gamma must be a finite number >= 0, got -1.0",
        lambda: simpo_loss(X, X, beta=2.0, simpo_gamma=-1.0),
    )


@pytest.mark.parametrize(
    ("examples", "got"), [("the cat", "str"), (b"ids", "bytes"), ({"prompt_ids": [1]}, "dict")]
)
def test_preference_batch_wants_a_list_of_examples(examples, got):
    raises_exactly(
        TypeError,
        f"examples must be a list of dicts, got {got}",
        lambda: preference_batch(examples, pad_token_id=0),
    )


class _TableLM(torch.nn.Module):
    """A stand-in causal LM: the logits of a token are a fixed row of a table, zeroed where the
    attention mask is 0 (so the mask it is given shows in its output)."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab_size, vocab_size, generator=gen(seed)))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        logits = self.table[input_ids] * attention_mask.unsqueeze(-1)  # (B, T, V)
        return SimpleNamespace(logits=logits)


def test_completion_logps_takes_a_batch_of_exactly_the_two_inputs_and_passes_the_mask():
    model = _TableLM(6, seed=1)
    input_ids = torch.tensor([[1, 2, 3, 4], [5, 4, 0, 0]])  # (2, T)
    attention_mask = torch.tensor([[1, 1, 0, 1], [1, 1, 0, 0]])  # (2, T)
    labels = torch.tensor([[-100, 2, 3, 4], [-100, 4, 0, -100]])  # (2, T)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}  # no "labels" key
    out = completion_logps(model, batch, labels)
    logits = model.table.detach()[input_ids] * attention_mask.unsqueeze(-1)  # (2, T, V)
    by_hand = []
    for b in range(2):
        total = 0.0
        for t in range(3):
            if int(labels[b, t + 1]) != -100:
                total += float(torch.log_softmax(logits[b, t], dim=-1)[labels[b, t + 1]])
        by_hand.append(total)
    assert out.tolist() == pytest.approx(by_hand, rel=1e-6)
    torch.testing.assert_close(out.detach(), sequence_logprobs(logits, labels))
