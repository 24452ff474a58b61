"""lmlessons.preference: what its docstrings promise, on tiny random logits (no TRL here; the TRL
oracles are in test_preference_trl.py).

The sequence log-probability is the sum a hand-written loop over positions gives, its mean
divides by the completion's length, positions without a target and padding (on either side) add
nothing; the prompt cancels from the sigmoid and hinge losses but not from ``bco_pair`` nor, when
the completions' lengths differ, from the length-normalised ``ipo`` and ``sigmoid_norm``; the
rewards are measured against the reference; bad arguments are named.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from _exact import gen

from lmlessons.answer_only import completion_only_labels
from lmlessons.packing import pad
from lmlessons.preference import (
    LENGTH_NORMALISED_LOSS_TYPES,
    LOSS_TYPES,
    completion_logps,
    dpo_loss,
    preference_batch,
    preference_metrics,
    preference_probe,
    reward_accuracies,
    reward_margins,
    sequence_logprobs,
    simpo_loss,
)

V = 11


def _ids(n: int, g: torch.Generator) -> list[int]:
    return torch.randint(1, V, (n,), generator=g).tolist()


def _examples(lengths: list[tuple[int, int, int]], seed: int = 0) -> list[dict[str, list[int]]]:
    """One preference pair per ``(prompt, chosen, rejected)`` length triple, random ids."""
    g = gen(seed)
    return [
        {"prompt_ids": _ids(p, g), "chosen_ids": _ids(c, g), "rejected_ids": _ids(r, g)}
        for p, c, r in lengths
    ]


def _loop_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> list[float]:
    """The oracle written out: position t scores the label at t + 1, in float64."""
    out = []
    for row_logits, row_labels in zip(logits, labels):
        total = 0.0
        for t in range(len(row_labels) - 1):
            target = int(row_labels[t + 1])
            if target != -100:
                total += float(torch.log_softmax(row_logits[t].double(), dim=-1)[target])
        out.append(total)
    return out


# ------------------------------------------------------------------------------ preference_batch


def test_preference_batch_is_trls_documented_example():
    """The example of ``DataCollatorForPreference``'s docstring (TRL 1.16), plus the labels
    ``DPOTrainer`` builds from it."""
    examples = [
        {"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5], "rejected_ids": [6]},
        {"prompt_ids": [7, 8], "chosen_ids": [9], "rejected_ids": [10, 11]},
    ]
    batch = preference_batch(examples, pad_token_id=0)
    expected_ids = [[1, 2, 3, 4, 5], [7, 8, 9, 0, 0], [1, 2, 3, 6, 0], [7, 8, 10, 11, 0]]
    expected_attention = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0]]
    expected_completion = [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 1, 1, 0]]
    assert batch["input_ids"].tolist() == expected_ids
    assert batch["attention_mask"].tolist() == expected_attention
    assert batch["completion_mask"].tolist() == expected_completion
    assert batch["labels"].tolist() == [
        [-100, -100, -100, 4, 5],
        [-100, -100, 9, -100, -100],
        [-100, -100, -100, 6, -100],
        [-100, -100, 10, 11, -100],
    ]


def test_preference_batch_stacks_chosen_over_rejected():
    examples = _examples([(3, 2, 5), (1, 4, 1), (2, 1, 2)], seed=1)
    batch = preference_batch(examples, pad_token_id=0)
    chosen, rejected = batch["input_ids"].chunk(2)  # (B, T) each
    for i, example in enumerate(examples):
        for row, key in ((chosen[i], "chosen_ids"), (rejected[i], "rejected_ids")):
            n = len(example["prompt_ids"]) + len(example[key])
            assert row[:n].tolist() == example["prompt_ids"] + example[key]
            assert (row[n:] == 0).all()
    lengths = batch["completion_mask"].sum(dim=1).tolist()
    assert lengths == [2, 4, 1, 5, 1, 2]


# ----------------------------------------------------------------------------- sequence_logprobs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequence_logprobs_is_the_loop_over_positions(seed):
    examples = _examples([(2, 3, 1), (4, 1, 3), (1, 2, 2)], seed=seed)
    labels = preference_batch(examples, pad_token_id=0)["labels"]  # (6, T)
    logits = torch.randn(*labels.shape, V, generator=gen(seed + 10))  # (6, T, V)
    ours = sequence_logprobs(logits, labels)
    assert ours.shape == (6,)
    assert ours.tolist() == pytest.approx(_loop_logprobs(logits, labels), abs=1e-5)


def test_average_divides_by_the_completion_length():
    batch = preference_batch(_examples([(2, 3, 1), (3, 5, 4)], seed=3), pad_token_id=0)
    logits = torch.randn(*batch["labels"].shape, V, generator=gen(4))  # (4, T, V)
    total = sequence_logprobs(logits, batch["labels"])  # (4,)
    mean = sequence_logprobs(logits, batch["labels"], average=True)  # (4,)
    lengths = batch["completion_mask"].sum(dim=1)  # (4,): 3, 5, 1, 4
    assert torch.allclose(mean, total / lengths)
    assert not torch.allclose(mean, total)


def test_positions_without_a_target_contribute_nothing():
    """Changing the logits of the positions whose next label is -100 (the prompt but its last
    token, the padding, the last position) changes neither the sum nor its gradient's support."""
    labels = preference_batch(_examples([(3, 2, 4), (2, 3, 1)], seed=5), pad_token_id=0)["labels"]
    logits = torch.randn(*labels.shape, V, generator=gen(6)).requires_grad_()  # (4, T, V)
    no_target = torch.ones_like(labels, dtype=torch.bool)  # (4, T)
    no_target[:, :-1] = labels[:, 1:] == -100
    noisy = logits.detach() + 50 * no_target[..., None] * torch.randn(
        logits.shape, generator=gen(7)
    )
    assert torch.allclose(sequence_logprobs(noisy, labels), sequence_logprobs(logits, labels))
    sequence_logprobs(logits, labels).sum().backward()
    assert logits.grad is not None
    assert (logits.grad[no_target] == 0).all()
    assert (logits.grad[~no_target].abs().sum(dim=-1) > 0).all()


def _padded_logits(rows: list[torch.Tensor], side: str, g: torch.Generator) -> torch.Tensor:
    """Each row's logits where its tokens sit in a ``side``-padded batch, random junk elsewhere."""
    width = max(len(r) for r in rows)
    out = 100 * torch.randn(len(rows), width, V, generator=g)  # (B, T, V): junk on the padding
    for i, row in enumerate(rows):
        start = 0 if side == "right" else width - len(row)
        out[i, start : start + len(row)] = row
    return out


def test_padding_side_does_not_change_the_sum_when_the_labels_mask_it():
    """Right and left padding give the same sums when the first token's label is -100 (it is a
    prompt token). If the first token were a target, left padding would score it from the last
    pad position: the shift crosses into the padding."""
    g = gen(8)
    examples = _examples([(2, 3, 1), (4, 2, 5), (1, 2, 2)], seed=9)  # lengths 5, 6 and 3
    rows = [completion_only_labels(e["prompt_ids"], e["chosen_ids"])["labels"] for e in examples]
    row_logits = [torch.randn(len(r), V, generator=g) for r in rows]
    sums = {}
    for side in ("right", "left"):
        labels = pad(rows, -100, padding_side=side)  # (B, T)
        sums[side] = sequence_logprobs(_padded_logits(row_logits, side, g), labels)
    assert torch.allclose(sums["right"], sums["left"], atol=1e-5)
    # The exception: the first token a target.
    targets = [torch.tensor(e["prompt_ids"] + e["chosen_ids"]) for e in examples]
    right = sequence_logprobs(_padded_logits(row_logits, "right", g), pad(targets, -100))
    left_labels = pad(targets, -100, padding_side="left")
    left = sequence_logprobs(_padded_logits(row_logits, "left", g), left_labels)
    assert not torch.allclose(right, left, atol=1e-3)


# ---------------------------------------------------------------------- the prompt and the losses


def _pair_logits(batch: dict[str, torch.Tensor], prompt_lengths: list[int], seed: int):
    """Random ``(2B, T, V)`` logits of a causal model: a prompt's positions see only the prompt,
    so they get the same logits in the chosen row and in the rejected row of its pair."""
    logits = torch.randn(*batch["input_ids"].shape, V, generator=gen(seed))  # (2B, T, V)
    half = len(prompt_lengths)
    for i, p in enumerate(prompt_lengths):
        logits[half + i, :p] = logits[i, :p]
    return logits


def _losses_with_and_without_the_prompt(lengths, loss_type):
    """The per-pair losses with the labels of :func:`preference_batch` (-100 on the prompt) and
    with the prompt's tokens as targets too; the policy and the reference score the prompt
    differently."""
    examples = _examples(lengths, seed=11)
    batch = preference_batch(examples, pad_token_id=0)
    prompt_lengths = [p for p, _, _ in lengths]
    policy = _pair_logits(batch, prompt_lengths, seed=12)  # (2B, T, V)
    ref = _pair_logits(batch, prompt_lengths, seed=13)  # (2B, T, V)
    with_prompt = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)  # (2B, T)
    c_len, r_len = batch["completion_mask"].sum(dim=1).chunk(2)  # (B,), (B,)
    out = []
    for labels in (batch["labels"], with_prompt):
        logps = [sequence_logprobs(x, labels).chunk(2) for x in (policy, ref)]
        losses, _, _ = dpo_loss(
            *logps[0], *logps[1], loss_type=loss_type, chosen_lengths=c_len, rejected_lengths=r_len
        )
        out.append(losses)
    return out


UNEQUAL = [(3, 2, 4), (4, 5, 1), (2, 1, 3)]  # (prompt, chosen, rejected) lengths
EQUAL = [(3, 2, 2), (4, 5, 5), (2, 3, 3)]


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge"])
def test_the_prompt_cancels_from_the_losses_of_the_difference(loss_type):
    """``sigmoid`` and ``hinge`` see only chosen minus rejected log-ratio: the prompt's
    log-probability (policy minus reference) is in both and cancels."""
    masked, with_prompt = _losses_with_and_without_the_prompt(UNEQUAL, loss_type)
    assert torch.allclose(masked, with_prompt, atol=1e-5)


def test_the_prompt_does_not_cancel_from_bco_pair():
    """``bco_pair`` takes each reward on its own (a sigmoid of the chosen one, another of the
    rejected one): the prompt's log-ratio moves both."""
    masked, with_prompt = _losses_with_and_without_the_prompt(EQUAL, "bco_pair")
    assert not torch.allclose(masked, with_prompt, atol=1e-3)


@pytest.mark.parametrize("loss_type", LENGTH_NORMALISED_LOSS_TYPES)
def test_the_prompt_cancels_from_the_length_normalised_losses_only_at_equal_lengths(loss_type):
    """``ipo`` and ``sigmoid_norm`` divide each log-ratio by its completion's length: the prompt's
    term ``p / L_chosen - p / L_rejected`` is zero only when the two lengths are equal."""
    masked, with_prompt = _losses_with_and_without_the_prompt(EQUAL, loss_type)
    assert torch.allclose(masked, with_prompt, atol=1e-5)
    masked, with_prompt = _losses_with_and_without_the_prompt(UNEQUAL, loss_type)
    assert not torch.allclose(masked, with_prompt, atol=1e-3)


# ----------------------------------------------------------------------------- dpo_loss, simpo


def _logps(seed: int, n: int = 5) -> list[torch.Tensor]:
    g = gen(seed)
    return [(-20 * torch.rand(n, generator=g)).requires_grad_() for _ in range(4)]


def test_at_the_reference_the_sigmoid_loss_is_log_2_and_the_rewards_zero():
    chosen, rejected, _, _ = _logps(14)
    losses, chosen_rewards, rejected_rewards = dpo_loss(
        chosen, rejected, chosen.detach(), rejected.detach()
    )
    assert torch.allclose(losses, torch.full((5,), math.log(2)))
    assert (chosen_rewards == 0).all() and (rejected_rewards == 0).all()
    losses.mean().backward()
    assert chosen.grad is not None and rejected.grad is not None
    assert (chosen.grad < 0).all() and (rejected.grad > 0).all()  # raise chosen, lower rejected


def test_the_rewards_are_beta_times_the_log_ratios_and_detached():
    pc, pr, rc, rr = _logps(15)
    _, chosen_rewards, rejected_rewards = dpo_loss(pc, pr, rc, rr, beta=0.5, loss_type="hinge")
    assert torch.allclose(chosen_rewards, 0.5 * (pc - rc))
    assert torch.allclose(rejected_rewards, 0.5 * (pr - rr))
    assert not chosen_rewards.requires_grad and not rejected_rewards.requires_grad


def test_ipo_is_zero_at_its_target_margin():
    """IPO regresses the per-token margin onto ``1 / (2 beta)``: 0 exactly there."""
    beta = 0.25
    lengths = torch.tensor([2, 5, 3])
    ref_c, ref_r = torch.zeros(3), torch.zeros(3)
    rejected = torch.tensor([-4.0, -10.0, -6.0])
    chosen = lengths * (rejected / lengths + 1 / (2 * beta))  # (3,)
    losses, _, _ = dpo_loss(
        chosen, rejected, ref_c, ref_r, beta=beta, loss_type="ipo",
        chosen_lengths=lengths, rejected_lengths=lengths,
    )  # fmt: skip
    assert torch.allclose(losses, torch.zeros(3), atol=1e-6)


def test_simpo_needs_no_reference_and_is_log_2_at_its_margin():
    beta, gamma = 2.0, 1.0
    rejected = torch.tensor([-3.0, -1.5])
    losses, chosen_rewards, _ = simpo_loss(
        rejected + gamma / beta, rejected, beta=beta, simpo_gamma=gamma
    )
    assert torch.allclose(losses, torch.full((2,), math.log(2)))
    assert torch.allclose(chosen_rewards, beta * (rejected + gamma / beta))


# ----------------------------------------------------------------------------------- the metrics


def test_reward_accuracy_is_against_the_reference_not_the_policys_preference():
    """The policy gives every rejected completion the higher log-probability, the reference
    even more so: every reward margin is positive and ``rewards/accuracies`` is 1."""
    policy_chosen = torch.tensor([-12.0, -8.0, -20.0])
    policy_rejected = torch.tensor([-10.0, -5.0, -15.0])  # preferred by the policy
    ref_chosen = torch.tensor([-14.0, -9.0, -25.0])
    ref_rejected = torch.tensor([-9.0, -3.0, -12.0])
    _, chosen_rewards, rejected_rewards = dpo_loss(
        policy_chosen, policy_rejected, ref_chosen, ref_rejected
    )
    assert (policy_chosen < policy_rejected).all()
    assert reward_accuracies(chosen_rewards, rejected_rewards).tolist() == [1.0, 1.0, 1.0]
    assert (reward_margins(chosen_rewards, rejected_rewards) > 0).all()
    metrics = preference_metrics(
        chosen_rewards, rejected_rewards, chosen_logps=policy_chosen, rejected_logps=policy_rejected
    )
    assert metrics["rewards/accuracies"] == 1.0
    assert metrics["logps/chosen"] < metrics["logps/rejected"]
    assert metrics["rewards/margins"] == pytest.approx(
        metrics["rewards/chosen"] - metrics["rewards/rejected"]
    )


# ------------------------------------------------------------------------------------ the errors

_X = torch.zeros(3)
_L = torch.ones(3, dtype=torch.long)
_EX = {"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5]}

BAD_CALLS = [
    ("logits", ValueError, lambda: sequence_logprobs(torch.zeros(2, V), torch.zeros(2).long())),
    ("logits", TypeError, lambda: sequence_logprobs(torch.zeros(1, 3, V).long(), _L[None])),
    (
        "labels",
        ValueError,
        lambda: sequence_logprobs(torch.zeros(1, 3, V), torch.ones(1, 2).long()),
    ),
    ("labels", ValueError, lambda: sequence_logprobs(torch.zeros(1, 3, V), torch.full((1, 3), V))),
    (
        "labels row 1",
        ValueError,
        lambda: sequence_logprobs(
            torch.zeros(2, 3, V), torch.tensor([[1, 2, 3], [4, -100, -100]]), average=True
        ),
    ),
    ("ref_rejected_logps", ValueError, lambda: dpo_loss(_X, _X, _X, torch.zeros(4))),
    ("policy_chosen_logps", ValueError, lambda: dpo_loss(_X[None], _X, _X, _X)),
    ("policy_rejected_logps", TypeError, lambda: dpo_loss(_X, _L, _X, _X)),
    ("beta", ValueError, lambda: dpo_loss(_X, _X, _X, _X, beta=0.0)),
    ("beta", TypeError, lambda: dpo_loss(_X, _X, _X, _X, beta="0.1")),
    ("loss_type", ValueError, lambda: dpo_loss(_X, _X, _X, _X, loss_type="dpo")),
    ("chosen_lengths", ValueError, lambda: dpo_loss(_X, _X, _X, _X, loss_type="ipo")),
    (
        "rejected_lengths",
        ValueError,
        lambda: dpo_loss(_X, _X, _X, _X, loss_type="sigmoid_norm", chosen_lengths=_L),
    ),
    (
        "chosen_lengths",
        TypeError,
        lambda: dpo_loss(
            _X, _X, _X, _X, loss_type="ipo", chosen_lengths=_X + 1, rejected_lengths=_L
        ),
    ),
    (
        "rejected_lengths",
        ValueError,
        lambda: dpo_loss(
            _X, _X, _X, _X, loss_type="sigmoid_norm", chosen_lengths=_L, rejected_lengths=_L * 0
        ),
    ),
    ("simpo_gamma", ValueError, lambda: simpo_loss(_X, _X, beta=2.0, simpo_gamma=-1.0)),
    ("rejected_avg_logps", ValueError, lambda: simpo_loss(_X, _X[:2], beta=2.0, simpo_gamma=0)),
    ("rejected_rewards", ValueError, lambda: reward_accuracies(_X, _X[:2])),
    ("chosen_rewards", TypeError, lambda: reward_margins([0.0], _X)),
    ("rejected_logps", ValueError, lambda: preference_metrics(_X, _X, rejected_logps=_X[None])),
    ("examples", ValueError, lambda: preference_batch([], pad_token_id=0)),
    (
        "examples[1]",
        ValueError,
        lambda: preference_batch([_EX, {"prompt_ids": [1]}], pad_token_id=0),
    ),
    (
        "examples[0]['rejected_ids']",
        ValueError,
        lambda: preference_batch([{**_EX, "rejected_ids": []}], pad_token_id=0),
    ),
    (
        "examples[0]['prompt_ids']",
        TypeError,
        lambda: preference_batch([{**_EX, "prompt_ids": "the cat"}], pad_token_id=0),
    ),
    (
        "examples[0]['chosen_ids']",
        TypeError,
        lambda: preference_batch([{**_EX, "chosen_ids": " the mat"}], pad_token_id=0),
    ),
    ("pad_token_id", ValueError, lambda: preference_batch([_EX], pad_token_id=-1)),
]


@pytest.mark.parametrize(
    "name,error,call", BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)]
)
def test_errors_name_the_argument(name, error, call):
    with pytest.raises(error, match="^" + re.escape(name)):  # the message starts with it
        call()


def test_every_loss_type_runs_and_backpropagates():
    pc, pr, rc, rr = _logps(16)
    for loss_type in LOSS_TYPES:
        losses, _, _ = dpo_loss(
            pc, pr, rc, rr, loss_type=loss_type, chosen_lengths=torch.tensor([2, 3, 1, 4, 2]),
            rejected_lengths=torch.tensor([1, 1, 5, 2, 3]),
        )  # fmt: skip
        assert losses.shape == (5,) and torch.isfinite(losses).all()
        (grad,) = torch.autograd.grad(losses.sum(), pc)
        assert grad.abs().sum() > 0, loss_type


class _Bigram(torch.nn.Module):
    """A causal LM whose logits at t depend on the token at t only (a bigram table), with an
    ``attention_mask`` it ignores; enough to check what a wrapper feeds it."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=gen(seed)))

    def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
        return type("Out", (), {"logits": self.table[input_ids]})()  # (B, T, V)


def test_completion_logps_is_sequence_logprobs_of_the_models_logits():
    batch = preference_batch(_examples([(2, 3, 1), (1, 2, 4)], seed=3), pad_token_id=0)
    model = _Bigram(0)
    logits = model.table[batch["input_ids"]]  # (2B, T, V)
    summed = completion_logps(model, batch)  # (2B,)
    assert torch.equal(summed, sequence_logprobs(logits, batch["labels"]))
    every = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)  # (2B, T)
    assert torch.equal(completion_logps(model, batch, every), sequence_logprobs(logits, every))
    average = completion_logps(model, batch, average=True)
    assert torch.allclose(average, sequence_logprobs(logits, batch["labels"], average=True))
    (grad,) = torch.autograd.grad(summed.sum(), model.table)  # gradients flow to the model
    assert grad.abs().sum() > 0
    with pytest.raises(TypeError, match=r"^model"):
        completion_logps(lambda **kw: None, batch)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^batch"):
        completion_logps(model, {"input_ids": batch["input_ids"]})


def test_preference_probe_reads_each_pair_against_the_reference():
    batch = preference_batch(_examples([(2, 3, 1), (1, 2, 4), (3, 1, 1)], seed=4), pad_token_id=0)
    policy, reference = _Bigram(1), _Bigram(2)
    with torch.no_grad():
        chosen, rejected = completion_logps(policy, batch).chunk(2)  # (3,) each
        ref = completion_logps(reference, batch)  # (6,)
    probe = preference_probe(policy, batch, ref)
    assert torch.equal(probe["chosen_logps"], chosen)
    assert torch.equal(probe["rejected_logps"], rejected)
    assert torch.equal(probe["policy_prefers_chosen"], (chosen > rejected).float())
    _, rewards_c, rewards_r = dpo_loss(chosen, rejected, *ref.chunk(2), beta=0.1)
    assert torch.equal(probe["reward_accuracy"], reward_accuracies(rewards_c, rewards_r))
    assert not probe["chosen_logps"].requires_grad  # measured, not trained on
    same = preference_probe(policy, batch, torch.cat([chosen, rejected]))
    assert same["reward_accuracy"].sum() == 0  # policy = reference: ties, no win
    with pytest.raises(ValueError, match=r"^reference_logps"):
        preference_probe(policy, batch, ref[:4])
