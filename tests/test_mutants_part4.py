"""Tests that pin what mutation testing of Part IV's core found unpinned.

``mutmut`` on ``lmlessons.moe``, ``lmlessons.zloss``, ``lmlessons.mtp`` and
``lmlessons.smoothing`` left mutants alive that change the text of an error message (the argument
it names, the shape it prints), a bound of a check (a zero affinity, one expert, 1-dim labels), a
documented default (``top_k=2`` as transformers'), or the dtype a result keeps. Each test below
compares with the message the source's f-string writes or with a plain computation, and fails on
those mutants. Tiny tensors, no model, no training.
"""

from __future__ import annotations

import math

import pytest
import torch
from _exact import gen, raises_exactly
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func as hf_lb

from lmlessons.moe import (
    batch_aux_loss,
    expert_counts,
    expert_fractions,
    load_balancing_loss_func,
    load_spread,
    router_z_loss_func,
    select_experts,
    sequence_aux_loss,
    switch_load_balancing_loss,
    update_expert_bias,
)
from lmlessons.mtp import mtp_labels, mtp_loss, mtp_losses, mtp_num_items
from lmlessons.smoothing import label_smoothed_loss
from lmlessons.zloss import bamba_z_loss, logsumexp_error, z_loss

_LOGITS = torch.zeros(1, 3, 4)
_LABELS = torch.tensor([[1, 2, 3]])
_SCORES = torch.full((1, 2, 3), 0.5)  # (B, T, E)
_CHOSEN = torch.tensor([[[0], [1]]])  # (B, T, K=1)


# ----------------------------------------------------------------------- numbers named by name


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: label_smoothed_loss(_LOGITS, _LABELS, epsilon=1.5),
            "epsilon must be in [0, 1], got 1.5",
        ),
        (
            lambda: z_loss(_LOGITS, _LABELS, z_loss_coefficient=-1.0),
            "z_loss_coefficient must be a finite number >= 0, got -1.0",
        ),
        (
            lambda: bamba_z_loss(_LOGITS, z_loss_coefficient=math.inf),
            "z_loss_coefficient must be a finite number >= 0, got inf",
        ),
        (
            lambda: sequence_aux_loss(_SCORES, _CHOSEN, alpha=-1.0),
            "alpha must be a finite number >= 0, got -1.0",
        ),
        (
            lambda: batch_aux_loss(_SCORES, _CHOSEN, alpha=-1.0),
            "alpha must be a finite number >= 0, got -1.0",
        ),
        (
            lambda: update_expert_bias(torch.zeros(2), torch.ones(2), step=0.0),
            "step must be a finite number > 0, got 0.0",
        ),
        (
            lambda: mtp_loss([_LOGITS, _LOGITS], _LABELS, mtp_weight=-0.5),
            "mtp_weight must be a finite number >= 0, got -0.5",
        ),
        (lambda: mtp_labels(_LABELS, 0), "depth must be >= 1, got 0"),
        (lambda: mtp_num_items(_LABELS, 0), "num_depths must be >= 1, got 0"),
        (lambda: expert_counts(_CHOSEN, 0), "num_experts must be >= 1, got 0"),
        (
            lambda: load_balancing_loss_func((torch.zeros(2, 1),), 0, 1),
            "num_experts must be >= 1, got 0",
        ),
        (
            lambda: mtp_loss([_LOGITS], _LABELS, mtp_weight=0.3),
            "mtp_weight needs at least 2 depths (the main head and one MTP head)",
        ),
    ],
)
def test_a_bad_number_is_named(call, message):
    """A bad scalar argument raises a ValueError that names it and what it got."""
    raises_exactly(ValueError, message, call)


def test_mtp_labels_names_ignore_index():
    raises_exactly(
        TypeError,
        "ignore_index must be an int, got float",
        lambda: mtp_labels(_LABELS, 1, ignore_index=-1.5),
    )


# ----------------------------------------------------------------------- tensors named by name


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bamba_z_loss([0.0]), "logits must be a torch.Tensor of floats, got list"),
        (lambda: logsumexp_error([0.0]), "logits must be a torch.Tensor of floats, got list"),
        (
            lambda: select_experts([0.5], 1),
            "scores must be a torch.Tensor of floats, got list",
        ),
        (
            lambda: select_experts(torch.ones(3), 1, bias=[0.0]),
            "bias must be a torch.Tensor of floats, got list",
        ),
        (
            lambda: update_expert_bias([0.0], torch.ones(1)),
            "bias must be a torch.Tensor of floats, got list",
        ),
        (
            lambda: update_expert_bias(torch.zeros(1), [1.0]),
            "counts must be a torch.Tensor of floats, got list",
        ),
        (lambda: load_spread([1.0]), "counts must be a torch.Tensor of floats, got list"),
        (
            lambda: switch_load_balancing_loss([0.5], _CHOSEN),
            "router_probs must be a torch.Tensor of floats, got list",
        ),
        (
            lambda: router_z_loss_func([0.5]),
            "router_logits must be a torch.Tensor of floats, got list",
        ),
        (
            lambda: sequence_aux_loss([0.5], _CHOSEN),
            "scores must be a torch.Tensor of floats, got list",
        ),
        (
            lambda: load_balancing_loss_func([torch.zeros(2, 2)], 2),
            "gate_logits must be a tuple of per-layer (B*T, num_experts) tensors (transformers' "
            "function silently returns 0 for anything else), got list",
        ),
        (
            lambda: load_balancing_loss_func((torch.zeros(2, 2), torch.zeros(2, 2).long()), 2),
            "gate_logits[1] must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            lambda: expert_counts(_CHOSEN, 2, attention_mask=[1, 1]),
            "attention_mask must be a torch.Tensor of 0 and 1, got list",
        ),
        (lambda: mtp_labels([1, 2], 1), "labels must be a torch.Tensor of token ids, got list"),
        (
            lambda: mtp_num_items([1, 2], 1),
            "labels must be a torch.Tensor of token ids, got list",
        ),
        (
            lambda: mtp_losses(_LOGITS, _LABELS),
            "logits_per_depth must be a list of (B, T, V) tensors, one per depth, got Tensor",
        ),
        (
            lambda: mtp_losses(3, _LABELS),
            "logits_per_depth must be a list of (B, T, V) tensors, one per depth, got int",
        ),
    ],
)
def test_a_wrong_type_is_named(call, message):
    """A non-tensor (or a tensor where a list goes) raises a TypeError naming the argument."""
    raises_exactly(TypeError, message, call)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: expert_counts(torch.tensor([0.0]), 2),
            "expert_indices must hold integer ids (torch.long), got dtype torch.float32",
        ),
        (
            lambda: switch_load_balancing_loss(torch.ones(1, 2, 3), torch.ones(1, 2)),
            "expert_indices must hold integer ids (torch.long), got dtype torch.float32",
        ),
        (
            lambda: sequence_aux_loss(_SCORES, torch.ones(1, 2, 1)),
            "expert_indices must hold integer ids (torch.long), got dtype torch.float32",
        ),
    ],
)
def test_float_expert_indices_are_named(call, message):
    raises_exactly(TypeError, message, call)


# ------------------------------------------------------------------------- shapes and bounds


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: bamba_z_loss(torch.zeros(4)),
            "logits must have at least 2 dimensions, got shape (4,)",
        ),
        (
            lambda: logsumexp_error(torch.tensor(1.0)),
            "logits must have at least 1 dimensions, got shape ()",
        ),
        (
            lambda: sequence_aux_loss(torch.ones(2, 3), _CHOSEN),
            "scores must have at least 3 dimensions, got shape (2, 3)",
        ),
        (
            lambda: sequence_aux_loss(torch.ones(1, 1, 2, 3), _CHOSEN),
            "scores must have shape (B, T, E), got (1, 1, 2, 3)",
        ),
        (
            lambda: sequence_aux_loss(_SCORES, torch.tensor([[0, 1]])),
            "expert_indices must have shape (B, T, K) = (1, 2) + (K,), got (1, 2)",
        ),
        (
            lambda: switch_load_balancing_loss(torch.ones(2, 3), torch.tensor([[0]])),
            "router_probs must have at least 3 dimensions, got shape (2, 3)",
        ),
        (
            lambda: switch_load_balancing_loss(torch.ones(1, 1, 2, 3), torch.tensor([[0]])),
            "router_probs must have shape (G, T, E), got (1, 1, 2, 3)",
        ),
        (
            lambda: switch_load_balancing_loss(torch.ones(1, 2, 3), torch.tensor([[0, 1, 2]])),
            "expert_indices must have shape (G, T) or (G, T, K) with (G, T) = (1, 2), got (1, 3)",
        ),
        (
            lambda: router_z_loss_func(torch.ones(2, 3)),
            "router_logits must have at least 3 dimensions, got shape (2, 3)",
        ),
        (
            lambda: router_z_loss_func(torch.ones(1, 1, 2, 3)),
            "router_logits must have shape (G, T, E), got (1, 1, 2, 3)",
        ),
        (
            lambda: router_z_loss_func(torch.ones(1, 2, 3), torch.ones(3)),
            "attention_mask must have one entry per token of router_logits[..., 0] (2), "
            "got shape (3,)",
        ),
        (
            lambda: expert_counts(torch.tensor([[0], [1]]), 2, torch.ones(3)),
            "attention_mask must have one entry per token of expert_indices (2), got shape (3,)",
        ),
        (
            lambda: load_balancing_loss_func((torch.zeros(2, 2),), 2, 1, torch.ones(3)),
            "attention_mask must have one entry per token of gate_logits[0] (2), got shape (3,)",
        ),
        (
            lambda: expert_counts(torch.tensor([[0], [1]]), 2, torch.tensor([1, 2])),
            "attention_mask must hold only 0 and 1 (1 = a real token)",
        ),
        (
            lambda: expert_counts(torch.tensor([[0], [1]]), 2, torch.zeros(2)),
            "attention_mask must keep at least one token (all padding: 0 / 0)",
        ),
        (
            lambda: load_balancing_loss_func((), 2),
            "gate_logits must hold at least one layer, got an empty tuple",
        ),
        (
            lambda: load_balancing_loss_func((torch.zeros(2, 2), torch.zeros(3, 2)), 2, 1),
            "gate_logits[1] must have shape (B*T, num_experts=2), the shape of gate_logits[0] "
            "(2, 2), got (3, 2)",
        ),
        (
            lambda: expert_counts(torch.tensor(1), 2),
            "expert_indices must have at least one dimension, got a scalar",
        ),
        (
            lambda: load_spread(torch.ones(2, 2)),
            "counts must be a (E,) tensor of counts >= 0, got (2, 2)",
        ),
        (
            lambda: load_spread(torch.tensor([1.0, -1.0])),
            "counts must be a (E,) tensor of counts >= 0, got (2,)",
        ),
        (
            lambda: load_spread(torch.zeros(3)),
            "counts must hold at least one routed token (all zero: 0 / 0)",
        ),
        (
            lambda: select_experts(torch.ones(1, 2, 3), 1, bias=torch.zeros(2)),
            "bias must have shape (E,) = (3,)",
        ),
        (
            lambda: update_expert_bias(torch.zeros(1, 2), torch.ones(1, 2)),
            "bias and counts must have one shape (E,), got (1, 2) and (1, 2)",
        ),
        (
            lambda: mtp_labels(torch.tensor(3), 1),
            "labels must have at least 1 dimension (..., T), got a scalar",
        ),
        (
            lambda: mtp_losses([], _LABELS),
            "logits_per_depth must hold at least one depth, got an empty list",
        ),
    ],
)
def test_a_wrong_shape_or_value_is_named(call, message):
    """A wrong shape or value raises a ValueError naming the argument and printing its shape."""
    raises_exactly(ValueError, message, call)


@pytest.mark.parametrize(
    "scores",
    [
        torch.tensor([[[0.5, -0.1, 0.6]]]),  # a negative affinity, the token's sum still > 0
        torch.tensor([[[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]]]),  # one token sums to 0
    ],
    ids=["negative", "zero-sum-token"],
)
def test_scores_must_be_affinities_with_a_positive_sum(scores):
    """Each score >= 0 and each token's sum > 0, checked token by token."""
    chosen = torch.zeros(*scores.shape[:2], 1, dtype=torch.long)  # (B, T, 1)
    raises_exactly(
        ValueError,
        "scores must be affinities >= 0 (sigmoid outputs), each token's sum > 0",
        lambda: sequence_aux_loss(scores, chosen),
    )


def test_a_zero_affinity_is_allowed():
    """A score of exactly 0 is a valid affinity: E * (1 * 1/2) summed is alpha * 3/2 here."""
    scores = torch.tensor([[[1.0, 1.0, 0.0]]], dtype=torch.float64)  # (1, 1, 3)
    out = sequence_aux_loss(scores, torch.tensor([[[0]]]), alpha=1.0)
    assert float(out) == pytest.approx(3 * 0.5)


# ---------------------------------------------------------------------- boundaries and results


def test_one_expert_is_a_valid_router():
    """num_experts=1 (the minimum): every token to it, and the Mixtral loss is 1."""
    assert expert_counts(torch.tensor([[0], [0]]), 1).tolist() == [2.0]
    assert float(load_balancing_loss_func((torch.zeros(2, 1),), 1, 1)) == pytest.approx(1.0)


def test_expert_counts_takes_one_token_as_a_1_dim_tensor():
    """``(K,)`` is one token's K experts."""
    assert expert_counts(torch.tensor([0, 2]), 3).tolist() == [1.0, 0.0, 1.0]


def test_expert_counts_masks_tokens_of_a_b_t_k_batch():
    """``(B, T, K)`` with a ``(B, T)`` mask: padding's K assignments are not counted."""
    chosen = torch.tensor([[[0, 1], [1, 2], [2, 3]]])  # (1, 3, 2)
    counts = expert_counts(chosen, 4, torch.tensor([[1, 1, 0]]))
    assert counts.tolist() == [1.0, 2.0, 1.0, 0.0]


def test_the_default_top_k_is_transformers_2():
    """``top_k`` defaults to 2, as in transformers' Mixtral ``load_balancing_loss_func``."""
    layers = tuple(torch.randn(6, 4, generator=gen(s)) for s in range(2))  # 2 x (N, E)
    ours = load_balancing_loss_func(layers, 4)
    assert float(ours) == pytest.approx(float(hf_lb(layers, 4)), rel=1e-6)
    assert float(ours) == pytest.approx(float(load_balancing_loss_func(layers, 4, 2)), rel=1e-7)
    assert float(ours) != pytest.approx(float(load_balancing_loss_func(layers, 4, 3)))


def test_expert_fractions_default_top_k_is_2():
    """By default each token counts for 2 experts: ``f`` sums to 2, ``P`` to 1."""
    f, p = expert_fractions((torch.randn(5, 4, generator=gen(3)),), 4)
    assert float(f.sum()) == pytest.approx(2.0)
    assert float(p.sum()) == pytest.approx(1.0)


def test_switch_counts_every_expert_even_the_unused_last():
    """E comes from the probabilities: no token to the last expert still makes f (G, E)."""
    probs = torch.tensor([[[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]]])  # (1, 2, 3)
    out = switch_load_balancing_loss(probs, torch.tensor([[0, 1]]))
    assert float(out) == pytest.approx(3 * (0.5 * 0.375 + 0.5 * 0.375))


@pytest.mark.parametrize(
    ("logits", "shape"),
    [(torch.zeros(4), ()), (torch.zeros(2, 3, 4), (2, 3))],
    ids=["1-dim", "3-dim"],
)
def test_logsumexp_error_reduces_the_last_dim_only(logits, shape):
    """A ``(V,)`` row gives a 0-dim error; ``(B, T, V)`` gives ``(B, T)``, float32."""
    out = logsumexp_error(logits)
    assert out.shape == shape
    assert out.dtype == torch.float32


def test_bamba_z_loss_takes_2_dim_logits():
    """``(T, V)`` is enough: the mean of ``log(V)^2`` over T for zero logits."""
    out = bamba_z_loss(torch.zeros(3, 4), z_loss_coefficient=1.0)
    assert float(out) == pytest.approx(math.log(4) ** 2)


def test_update_expert_bias_keeps_the_bias_dtype():
    """float64 counts do not promote a float32 bias."""
    out = update_expert_bias(torch.zeros(2), torch.tensor([1.0, 3.0], dtype=torch.float64), 0.5)
    assert out.dtype == torch.float32
    assert out.tolist() == [0.5, -0.5]


def test_mtp_labels_takes_one_row():
    """``(T,)`` labels are one row, shifted by ``depth``."""
    assert mtp_labels(torch.tensor([1, 2, 3]), 1).tolist() == [2, 3, -100]
    assert mtp_labels(torch.tensor([1, 2, 3]), 2, ignore_index=-1).tolist() == [3, -1, -1]
