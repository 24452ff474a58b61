"""The router losses of a mixture of experts (MoE), and balancing without a loss.

A router scores every token against ``num_experts`` experts; the token goes to its ``top_k``
best. Left alone, a few experts get most tokens. Two numbers per expert ``e`` say how unevenly:

* ``f[e]``: the share of tokens routed to ``e`` (:func:`expert_counts` over the token count);
* ``P[e]``: the mean probability the router gives ``e`` (a differentiable stand-in for ``f``).

1. :func:`load_balancing_loss_func`: ``num_experts * sum(f * P)``, transformers' Mixtral loss
   (and its copies in Qwen2-MoE, Qwen3-MoE, OLMoE, ...), with ``f`` and ``P`` averaged over the
   layers *before* the product (:func:`expert_fractions`); ``per_layer=True`` is the mean of
   each layer's own loss. ``f`` counts top-k assignments, so even routing gives ``top_k``.
2. :func:`switch_load_balancing_loss` and :func:`router_z_loss_func`: the Switch Transformer's
   two router losses (even routing gives 1; the z-loss keeps the router logits small).
3. :func:`expert_counts` and :func:`load_spread`: how uneven a batch's routing is.
4. DeepSeek-V3's balancing: a bias, added to the scores only to pick the experts
   (:func:`select_experts`), nudged after each step by :func:`update_expert_bias`; and a small
   sequence-wise loss (:func:`sequence_aux_loss`; :func:`batch_aux_loss` is the same over the
   whole batch at once).

Shapes: ``N = B * T`` tokens, ``E = num_experts`` experts, ``K = top_k``, ``L`` layers.
Line numbers refer to transformers 5.23.0.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from lmlessons._checks import (
    check_float_tensor,
    check_int,
    check_int_tensor,
    check_real,
    check_same_shape,
)

__all__ = [
    "DEEPSEEK_BIAS_UPDATE_SPEED",
    "DEEPSEEK_SEQUENCE_AUX_ALPHA",
    "LoadSpread",
    "expert_counts",
    "expert_fractions",
    "load_balancing_loss_func",
    "switch_load_balancing_loss",
    "router_z_loss_func",
    "load_spread",
    "select_experts",
    "update_expert_bias",
    "sequence_aux_loss",
    "batch_aux_loss",
]

DEEPSEEK_BIAS_UPDATE_SPEED = 1e-3  # DeepSeek-V3's gamma (paper, Section 4.2)
DEEPSEEK_SEQUENCE_AUX_ALPHA = 1e-4  # DeepSeek-V3's alpha (paper, Section 4.2)


class LoadSpread(NamedTuple):
    """How uneven the per-expert token counts are (:func:`load_spread`)."""

    cv: float  # coefficient of variation: std / mean of the counts (0 = perfectly even)
    max_over_mean: float  # the busiest expert's count over the mean count (1 = even)


# --- validation (private: the shapes and ranges this module needs) ---------------------------


def _check_top_k(top_k: object, num_experts: int) -> int:
    top_k = check_int("top_k", top_k, minimum=1)
    if top_k > num_experts:
        raise ValueError(f"top_k must be at most num_experts={num_experts}, got {top_k}")
    return top_k


def _check_mask(attention_mask: object, num_tokens: int, what: str) -> torch.Tensor:
    """A tensor of 0 and 1 with ``num_tokens`` elements (``(B, T)`` for ``B * T`` tokens) and at
    least one 1, returned flat as float32 ``(N,)``."""
    if not isinstance(attention_mask, torch.Tensor):
        got = type(attention_mask).__name__
        raise TypeError(f"attention_mask must be a torch.Tensor of 0 and 1, got {got}")
    if attention_mask.numel() != num_tokens:
        raise ValueError(
            f"attention_mask must have one entry per token of {what} ({num_tokens}), got shape "
            f"{tuple(attention_mask.shape)}"
        )
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 and 1 (1 = a real token)")
    if not bool(attention_mask.any()):
        raise ValueError("attention_mask must keep at least one token (all padding: 0 / 0)")
    return attention_mask.reshape(-1).float()  # (N,)


def _check_gate_logits(gate_logits: object, num_experts: int) -> tuple[torch.Tensor, ...]:
    """A non-empty tuple of ``(N, E)`` float tensors, one per layer, all of one shape."""
    if not isinstance(gate_logits, tuple):
        raise TypeError(
            "gate_logits must be a tuple of per-layer (B*T, num_experts) tensors (transformers' "
            f"function silently returns 0 for anything else), got {type(gate_logits).__name__}"
        )
    if len(gate_logits) == 0:
        raise ValueError("gate_logits must hold at least one layer, got an empty tuple")
    layers = tuple(check_float_tensor(f"gate_logits[{i}]", g) for i, g in enumerate(gate_logits))
    for i, layer in enumerate(layers):
        if layer.dim() != 2 or layer.shape[1] != num_experts or layer.shape != layers[0].shape:
            raise ValueError(
                f"gate_logits[{i}] must have shape (B*T, num_experts={num_experts}), the shape of "
                f"gate_logits[0] {tuple(layers[0].shape)}, got {tuple(layer.shape)}"
            )
    return layers


def _check_indices(name: str, value: object, num_experts: int) -> torch.Tensor:
    """Expert ids in ``[0, num_experts)``, at least one dimension, returned as torch.long."""
    indices = check_int_tensor(name, value)
    if indices.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension, got a scalar")
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= num_experts):
        raise ValueError(f"{name} must hold expert ids in [0, {num_experts}); found ids outside it")
    return indices.long()  # one_hot needs int64 (transformers casts too)


def _check_scores(scores: object, expert_indices: object) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek's affinities ``(B, T, E)`` (>= 0, each token's sum > 0) and the chosen experts
    ``(B, T, K)``."""
    scores = check_float_tensor("scores", scores, min_ndim=3)
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape (B, T, E), got {tuple(scores.shape)}")
    if bool((scores < 0).any()) or not bool((scores.sum(-1) > 0).all()):
        raise ValueError("scores must be affinities >= 0 (sigmoid outputs), each token's sum > 0")
    indices = _check_indices("expert_indices", expert_indices, scores.shape[-1])
    if indices.dim() != 3 or indices.shape[:2] != scores.shape[:2]:
        raise ValueError(
            f"expert_indices must have shape (B, T, K) = {tuple(scores.shape[:2])} + (K,), got "
            f"{tuple(indices.shape)}"
        )
    _check_top_k(indices.shape[-1], scores.shape[-1])
    return scores, indices


# --- Mixtral's loss (transformers' load_balancing_loss_func) -------------------------------


def expert_counts(
    expert_indices: torch.Tensor, num_experts: int, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Tokens routed to each expert, ``(E,)`` float: the top-k assignments of the unmasked tokens.

    ``expert_indices``: ``(..., K)``, the ``K`` experts chosen for each token (``(N, K)`` or
    ``(B, T, K)``); ``attention_mask``: one 0 or 1 per token (``(B, T)``), 0 = padding, not
    counted. A token counts once for each of its ``K`` experts, so the counts sum to ``K`` times
    the number of tokens.
    """
    num_experts = check_int("num_experts", num_experts, minimum=1)
    indices = _check_indices("expert_indices", expert_indices, num_experts)
    chosen = indices.reshape(-1, indices.shape[-1])  # (N, K)
    weight = torch.ones(chosen.shape[0], device=chosen.device)  # (N,)
    if attention_mask is not None:
        weight = _check_mask(attention_mask, chosen.shape[0], "expert_indices")  # (N,)
    routed = F.one_hot(chosen, num_experts).float()  # (N, K, E): 1 at each chosen expert
    return (routed * weight[:, None, None]).sum(dim=(0, 1))  # (E,)


def _layer_fractions(
    logits: torch.Tensor, top_k: int, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's ``(f, P)``, each ``(E,)``, over the tokens with ``weight`` 1."""
    probs = logits.softmax(dim=-1)  # (N, E), in the logits' dtype as upstream
    chosen = probs.topk(top_k, dim=-1).indices  # (N, K)
    kept = weight.sum()  # number of real tokens
    f = expert_counts(chosen, logits.shape[-1], weight) / kept  # (E,), sums to top_k
    p = (probs.float() * weight[:, None]).sum(dim=0) / kept  # (E,), sums to 1
    return f, p


def expert_fractions(
    gate_logits: tuple[torch.Tensor, ...],
    num_experts: int,
    top_k: int = 2,
    attention_mask: torch.Tensor | None = None,
    *,
    per_layer: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f, P)``: the two factors of :func:`load_balancing_loss_func`, over the unmasked tokens.

    ``f[e]``: top-k assignments to expert ``e`` per token (not divided by ``top_k``: ``f`` sums
    to ``top_k``); ``P[e]``: the mean router probability of ``e`` (sums to 1). Each is ``(E,)``,
    averaged over the layers (every layer routes the same tokens), as transformers accumulates
    them (``modeling_mixtral.py:514-539``); ``per_layer=True``: ``(L, E)``, one row per layer.
    The router probabilities are the softmax of each layer's logits, the experts their top-k.
    """
    num_experts = check_int("num_experts", num_experts, minimum=1)
    layers = _check_gate_logits(gate_logits, num_experts)
    top_k = _check_top_k(top_k, num_experts)
    num_tokens = layers[0].shape[0]
    weight = torch.ones(num_tokens, device=layers[0].device)  # (N,)
    if attention_mask is not None:
        weight = _check_mask(attention_mask, num_tokens, "gate_logits[0]")  # (N,)
    pairs = [_layer_fractions(layer, top_k, weight) for layer in layers]
    f = torch.stack([pair[0] for pair in pairs])  # (L, E)
    p = torch.stack([pair[1] for pair in pairs])  # (L, E)
    return (f, p) if per_layer else (f.mean(dim=0), p.mean(dim=0))  # (L, E) or (E,)


def load_balancing_loss_func(
    gate_logits: tuple[torch.Tensor, ...],
    num_experts: int,
    top_k: int = 2,
    attention_mask: torch.Tensor | None = None,
    *,
    per_layer: bool = False,
) -> torch.Tensor:
    """``num_experts * sum(f * P)`` (:func:`expert_fractions`): transformers' Mixtral
    ``load_balancing_loss_func`` (``modeling_mixtral.py:474``), a 0-dim float32 tensor.

    ``gate_logits``: a tuple of one ``(B*T, E)`` tensor per layer (the ``router_logits`` of a
    model called with ``output_router_logits=True``); ``attention_mask``: ``(B, T)``, padding
    not counted. ``f`` and ``P`` are averaged over the layers before their product. The loss
    is ``top_k`` when routing is even (``f = top_k / E``, ``P = 1 / E``) and at most
    ``num_experts`` (every token to the same experts, one of them with certainty). Only ``P``
    carries a gradient: the top-k choice is not differentiable.

    ``per_layer=True``: the mean over layers of each layer's own loss, which differs (by
    ``E`` times the covariance over layers of ``f`` and ``P``). A tuple is required, where
    transformers returns 0 for anything else; an all-padding mask is an error, not NaN.
    """
    f, p = expert_fractions(gate_logits, num_experts, top_k, attention_mask, per_layer=per_layer)
    return num_experts * (f * p).sum(dim=-1).mean()  # (E,) or (L, E) -> ()


# --- the Switch Transformer's losses ----------------------------------------------------------


def switch_load_balancing_loss(
    router_probs: torch.Tensor, expert_indices: torch.Tensor
) -> torch.Tensor:
    """The Switch Transformer's balancing loss: transformers'
    ``switch_transformers.load_balancing_loss_func`` (``modeling_switch_transformers.py:900``).

    ``router_probs``: ``(G, T, E)``, each token's probabilities over the experts, in groups
    (rows); ``expert_indices``: ``(G, T)`` (top-1) or ``(G, T, K)``. Per group, ``f[e]`` is the
    share of tokens sent to ``e`` (a token counts once, whatever ``K``) and ``P[e]`` the mean
    probability; the loss is ``E * sum(f * P)`` averaged over the groups: 1 for even top-1
    routing. No mask: every token counts.
    """
    probs = check_float_tensor("router_probs", router_probs, min_ndim=3)
    if probs.dim() != 3:
        raise ValueError(f"router_probs must have shape (G, T, E), got {tuple(probs.shape)}")
    num_experts = probs.shape[-1]
    indices = _check_indices("expert_indices", expert_indices, num_experts)
    if indices.dim() == 2:
        indices = indices.unsqueeze(-1)  # (G, T, 1)
    if indices.dim() != 3 or indices.shape[:2] != probs.shape[:2]:
        raise ValueError(
            f"expert_indices must have shape (G, T) or (G, T, K) with (G, T) = "
            f"{tuple(probs.shape[:2])}, got {tuple(expert_indices.shape)}"
        )
    routed = F.one_hot(indices, num_experts).amax(dim=-2).float()  # (G, T, E): 1 if sent to e
    f = routed.mean(dim=1)  # (G, E)
    p = probs.mean(dim=1)  # (G, E)
    return (num_experts * (f * p).sum(dim=-1)).mean()  # (G,) -> ()


def router_z_loss_func(
    router_logits: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The router z-loss: the mean over tokens of ``logsumexp(router_logits)**2``.

    ``router_logits``: ``(G, T, E)``. Without a mask it equals transformers' Switch
    ``router_z_loss_func`` (``modeling_switch_transformers.py:880``), which divides by every
    token, padding included; with ``attention_mask`` (``(G, T)``) only the real tokens count.
    Small logits make it small: it keeps the router's softmax out of its saturated range.
    """
    logits = check_float_tensor("router_logits", router_logits, min_ndim=3)
    if logits.dim() != 3:
        raise ValueError(f"router_logits must have shape (G, T, E), got {tuple(logits.shape)}")
    z_squared = torch.logsumexp(logits, dim=-1) ** 2  # (G, T), in the logits' dtype as upstream
    if attention_mask is None:
        return z_squared.mean()  # sum / (G * T)
    weight = _check_mask(attention_mask, z_squared.numel(), "router_logits[..., 0]")  # (N,)
    return (z_squared.reshape(-1) * weight).sum() / weight.sum()  # (N,) -> ()


# --- how uneven, and DeepSeek-V3's balancing --------------------------------------------------


def load_spread(counts: torch.Tensor) -> LoadSpread:
    """How uneven per-expert token counts ``(E,)`` are (:func:`expert_counts`): their
    coefficient of variation (population standard deviation over mean) and the busiest
    expert's count over the mean. Both are 0 and 1 for perfectly even routing."""
    counts = check_float_tensor("counts", counts)
    if counts.dim() != 1 or bool((counts < 0).any()):
        raise ValueError(f"counts must be a (E,) tensor of counts >= 0, got {tuple(counts.shape)}")
    mean = counts.double().mean()
    if not mean > 0:
        raise ValueError("counts must hold at least one routed token (all zero: 0 / 0)")
    std = counts.double().std(correction=0)
    return LoadSpread(cv=float(std / mean), max_over_mean=float(counts.double().max() / mean))


def select_experts(
    scores: torch.Tensor, top_k: int, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``top_k`` experts of each token, ``(..., E)`` -> ``(..., K)``, chosen on
    ``scores + bias`` (DeepSeek-V3's ``e_score_correction_bias``: it moves the choice only;
    the gate weights stay the scores). transformers' ``DeepseekV3TopkRouter`` with one expert
    group; order within a token's ``K`` follows the biased scores, highest first."""
    scores = check_float_tensor("scores", scores)
    top_k = _check_top_k(top_k, scores.shape[-1])
    if bias is not None:
        bias = check_float_tensor("bias", bias)
        if bias.shape != scores.shape[-1:]:
            raise ValueError(f"bias must have shape (E,) = {tuple(scores.shape[-1:])}")
        scores = scores + bias  # (..., E), broadcast over the tokens
    return scores.topk(top_k, dim=-1).indices  # (..., K)


def update_expert_bias(
    bias: torch.Tensor, counts: torch.Tensor, step: float = DEEPSEEK_BIAS_UPDATE_SPEED
) -> torch.Tensor:
    """DeepSeek-V3's balancing without a loss: a new bias ``bias + step * sign(mean - counts)``.

    After each step an overloaded expert (more tokens than the mean) loses ``step`` of bias, an
    underloaded one gains it, an expert at the mean keeps it. ``bias`` and ``counts`` are
    ``(E,)``; no gradient flows (transformers keeps the bias as a buffer and never updates it).
    """
    bias = check_float_tensor("bias", bias)
    counts = check_float_tensor("counts", counts)
    check_same_shape("bias", bias, "counts", counts, dims="(E,)", ndim=1)
    step = check_real("step", step, positive=True)
    error = counts.mean() - counts  # (E,): > 0 where the expert is underloaded
    return (bias + step * torch.sign(error)).detach().to(bias.dtype)  # (E,)


def sequence_aux_loss(
    scores: torch.Tensor,
    expert_indices: torch.Tensor,
    alpha: float = DEEPSEEK_SEQUENCE_AUX_ALPHA,
) -> torch.Tensor:
    """DeepSeek-V3's complementary sequence-wise balance loss, averaged over the sequences.

    ``scores``: ``(B, T, E)`` affinities (sigmoids, >= 0); ``expert_indices``: ``(B, T, K)``.
    For each sequence: ``f[e] = E / (K * T) * (tokens of the sequence sent to e)`` and ``P[e]``
    the mean over its tokens of the normalised score ``s[e] / sum(s)``; its loss is
    ``alpha * sum(f * P)`` (even routing: ``alpha``). Every sequence, not only the batch, must
    be balanced. At ``B = 1`` it equals :func:`batch_aux_loss`. The paper counts the top-K of
    the scores themselves: pass ``select_experts(scores, top_k)``, without the bias.
    """
    scores, indices = _check_scores(scores, expert_indices)
    alpha = check_real("alpha", alpha)
    num_experts, top_k, seq_len = scores.shape[-1], indices.shape[-1], scores.shape[1]
    routed = F.one_hot(indices, num_experts).float().sum(dim=2)  # (B, T, E): 1 if sent to e
    f = num_experts / (top_k * seq_len) * routed.sum(dim=1)  # (B, E)
    normalised = scores / scores.sum(dim=-1, keepdim=True)  # (B, T, E), each token sums to 1
    p = normalised.mean(dim=1)  # (B, E)
    return alpha * (f * p).sum(dim=-1).mean()  # (B,) -> ()


def batch_aux_loss(
    scores: torch.Tensor,
    expert_indices: torch.Tensor,
    alpha: float = DEEPSEEK_SEQUENCE_AUX_ALPHA,
) -> torch.Tensor:
    """:func:`sequence_aux_loss`'s formula over the whole batch at once: ``f`` and ``P`` over
    all ``N = B * T`` tokens, then one product: it balances the batch, not each sequence.
    Megatron-LM's ``aux_loss`` (``switch_load_balancing_loss_func`` with ``alpha`` its
    coefficient) is this formula; its ``seq_aux_loss`` is :func:`sequence_aux_loss`."""
    scores, indices = _check_scores(scores, expert_indices)
    alpha = check_real("alpha", alpha)
    num_experts, top_k = scores.shape[-1], indices.shape[-1]
    flat_scores = scores.reshape(-1, num_experts)  # (N, E)
    counts = expert_counts(indices, num_experts)  # (E,)
    f = num_experts * counts / (top_k * flat_scores.shape[0])  # (E,)
    p = (flat_scores / flat_scores.sum(dim=-1, keepdim=True)).mean(dim=0)  # (E,)
    return alpha * (f * p).sum()
