"""Battery for ``load_balancing_loss_func`` (lesson 14): what learners write for Mixtral's router
balancing loss.

The statement a learner sees: ``gate_logits`` is a tuple of ``(B*T, num_experts)`` router logits,
one per layer; ``f[e]`` is expert e's share of the tokens' top-k choices, ``P[e]`` its mean router
probability, both over the real tokens (``attention_mask`` ``(B, T)``, 0 on padding) of all
layers together; the loss is ``num_experts * sum(f * P)``, a 0-dim tensor (``top_k`` for even
routing).

The value mistakes are the checker's catalogue (``check_load_balancing.py``), the structural ones
``_structural.py``'s; here are the mistakes a catalogue by value cannot hold (NaN, shapes, no
graph), other ways to a catalogued mistake, correct attempts in other styles and delegations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import correct, wrong


def _weights(gate_logits, attention_mask, n):
    """``(L, N)``: each layer's mask (ones without one)."""
    if attention_mask is None:
        return torch.ones(len(gate_logits), n)
    return attention_mask.reshape(1, -1).float().expand(len(gate_logits), -1)


# ---------------------------------------------------------------- wrong attempts


@wrong("not_scalar")
def per_expert_terms(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Returns num_experts * f * P per expert, without the sum."""
    probs = torch.cat(gate_logits).softmax(-1)
    w = _weights(gate_logits, attention_mask, gate_logits[0].shape[0]).reshape(-1, 1)
    routed = F.one_hot(probs.topk(top_k, -1).indices, num_experts).sum(1)
    return num_experts * ((routed * w).sum(0) / w.sum()) * ((probs * w).sum(0) / w.sum())


@wrong("detached")
def probabilities_detached(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Takes the softmax of the detached logits (`.detach()` to pick the experts, reused for P)."""
    probs = torch.cat(gate_logits).detach().softmax(-1)
    w = _weights(gate_logits, attention_mask, gate_logits[0].shape[0]).reshape(-1, 1)
    routed = F.one_hot(probs.topk(top_k, -1).indices, num_experts).sum(1)
    return num_experts * (((routed * w).sum(0) / w.sum()) * ((probs * w).sum(0) / w.sum())).sum()


@wrong("mask_misaligned")
def mask_expanded_per_token(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Concatenates the layers and expands the mask with `reshape(-1, 1).expand(-1, L)`."""
    L = len(gate_logits)
    probs = torch.cat(gate_logits).softmax(-1)
    routed = F.one_hot(probs.topk(top_k, -1).indices, num_experts).sum(1).float()
    if attention_mask is None:
        return num_experts * (routed.mean(0) * probs.mean(0)).sum()
    w = attention_mask.reshape(-1, 1).expand(-1, L).reshape(-1, 1).float()
    return num_experts * (((routed * w).sum(0) / w.sum()) * ((probs * w).sum(0) / w.sum())).sum()


# ---------------------------------------------------------------- correct attempts


@correct
def accumulates_layer_by_layer(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Sums counts and probabilities layer by layer with scatter_add, divides at the end
    (transformers 5's way)."""
    counts = torch.zeros(num_experts)
    prob_sum = torch.zeros(num_experts)
    total = 0.0
    n = gate_logits[0].shape[0]
    mask = torch.ones(n) if attention_mask is None else attention_mask.reshape(-1).float()
    for layer in gate_logits:
        probs = layer.softmax(dim=-1)
        chosen = probs.topk(top_k, dim=-1).indices
        counts = counts.scatter_add(0, chosen.reshape(-1), mask.repeat_interleave(top_k))
        prob_sum = prob_sum + (probs.float() * mask[:, None]).sum(0)
        total = total + mask.sum()
    return num_experts * ((counts / total) * (prob_sum / total)).sum()


@correct
def expanded_mask_like_older_transformers(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Concatenates the layers and expands the mask to (L, B, T, K, E), as transformers 4 did."""
    logits = torch.cat(gate_logits, dim=0)
    routing_weights = F.softmax(logits, dim=-1)
    _, selected = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected, num_experts)  # (L*N, K, E)
    if attention_mask is None:
        tokens_per_expert = expert_mask.float().mean(0)  # (K, E)
        router_prob = routing_weights.mean(0)
    else:
        B, T = attention_mask.shape
        L = logits.shape[0] // (B * T)
        m = attention_mask[None, :, :, None, None].expand(L, B, T, top_k, num_experts)
        m = m.reshape(-1, top_k, num_experts).float()
        tokens_per_expert = (expert_mask.float() * m).sum(0) / m.sum(0)
        pm = attention_mask[None, :, :, None].expand(L, B, T, num_experts).reshape(-1, num_experts)
        router_prob = (routing_weights * pm).sum(0) / pm.sum(0)
    return num_experts * (tokens_per_expert * router_prob.unsqueeze(0)).sum()


@correct
def stacked_einsum(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Stacks the layers into (L, N, E) and weighs with einsum."""
    probs = torch.stack(gate_logits).float().softmax(-1)  # (L, N, E)
    chosen = F.one_hot(probs.topk(top_k, -1).indices, num_experts).sum(-2).float()  # (L, N, E)
    w = _weights(gate_logits, attention_mask, probs.shape[1])  # (L, N)
    f = torch.einsum("lne,ln->e", chosen, w) / w.sum()
    p = torch.einsum("lne,ln->e", probs, w) / w.sum()
    return num_experts * torch.dot(f, p)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.moe.load_balancing_loss_func")
def the_course_loss(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Calls the course's own load_balancing_loss_func: nothing written."""
    from lmlessons.moe import load_balancing_loss_func

    return load_balancing_loss_func(gate_logits, num_experts, top_k, attention_mask)


@wrong("delegates_to_course", says="lmlessons.moe.expert_fractions")
def the_course_fractions(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Takes f and P from the course's expert_fractions and multiplies them."""
    from lmlessons.moe import expert_fractions

    f, p = expert_fractions(gate_logits, num_experts, top_k, attention_mask)
    return num_experts * (f * p).sum()
