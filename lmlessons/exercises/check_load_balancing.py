"""Checker for ``load_balancing_loss_func`` (lesson 14), in the runner's pattern
(:mod:`lmlessons.exercises._framework`): cases and diagnoses only.

The reference is :func:`lmlessons.exercises.solutions_part4.load_balancing_loss_func`,
transformers' Mixtral ``load_balancing_loss_func`` (the core's
:func:`lmlessons.moe.load_balancing_loss_func`). Cases, in order (the first failure is reported;
each checks the value, then the gradient with respect to every layer's router logits): 1. one
layer, a mask of ones; 2. three layers, no mask; 3. ``top_k=1``; 4. right padding; 5. left padding
and a row of padding only, three layers; 6. float64 logits; 7. bfloat16 logits (no ties: any
softmax precision picks the same experts; the value within 2%); 8. a collapsed router; then 12
seeded batches (:func:`_generated`). A wrong loss is compared with what the known mistakes (the
catalogue below: small wrong implementations, each with its mistake code) give on the same case.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons.exercises._cases import gen
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner, close
from lmlessons.exercises._loss_checks import as_loss, named

SIGNATURE = (
    "load_balancing_loss_func(gate_logits, num_experts, top_k=2, attention_mask=None) -> loss"
    "   # gate_logits: a tuple of (B*T, num_experts) per layer; a 0-dim tensor"
)


def _case(label: str, layers: list[torch.Tensor], E: int, K: int, mask: Any, ok: Any = "") -> Case:
    """A case of router logits ``layers`` (each ``(B*T, E)``), labelled with its shape."""
    n, dtype = layers[0].shape[0], str(layers[0].dtype).replace("torch.", "")
    masked = "no mask" if mask is None else f"attention_mask {mask.int().tolist()}"
    what = f"{len(layers)} layer{'s' * (len(layers) > 1)} of {dtype} router logits"
    text = f"{label} ({what} ({n}, {E}), top_k={K}, {masked})"
    gate = tuple(layer.requires_grad_() for layer in layers)
    return Case(text, (gate, E, K, mask), ok=ok)


def _logits(seed: int, L: int, N: int, E: int, scale: float = 1.5) -> list[torch.Tensor]:
    g = gen(seed)
    return [torch.randn(N, E, generator=g) * scale for _ in range(L)]  # L x (N, E)


def _separated(seed: int, L: int, N: int, E: int) -> list[torch.Tensor]:
    """bfloat16 logits 0.5 apart within each token: no two probabilities tie in bfloat16."""
    g = gen(seed)
    return [
        torch.stack([torch.randperm(E, generator=g) * 0.5 for _ in range(N)]).bfloat16()
        for _ in range(L)
    ]


#: The hand-written cases 1 to 8: (router logits, num_experts, top_k, attention_mask rows or
#: None, what a pass verifies).
HAND_WRITTEN: list[tuple[Any, int, int, list[list[int]] | None, str | tuple[str, ...]]] = [
    (
        lambda: _logits(131, 1, 6, 4),
        4,
        2,
        [[1, 1, 1], [1, 1, 1]],
        (
            "`f[e]`: the share of the tokens' top-k choices that go to expert e (it sums to "
            "`top_k`); `P[e]`: the mean router probability (softmax over the experts)",
            "`num_experts * sum(f * P)`, a 0-dim tensor that backpropagates to every "
            "layer's router logits with the reference's gradient",
        ),
    ),
    (
        lambda: _logits(132, 3, 8, 4),
        4,
        2,
        None,
        "several layers: `f` and `P` over all the layers' tokens together, then one "
        "product (not the mean of each layer's loss)",
    ),
    (lambda: _logits(133, 2, 9, 5), 5, 1, None, "`top_k=1`"),
    (
        lambda: _logits(134, 2, 10, 4),
        4,
        2,
        [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]],
        "padding (`attention_mask` 0) counts neither in `f` nor in `P`, nor in their denominators",
    ),
    (
        lambda: _logits(135, 3, 12, 6),
        6,
        2,
        [[0, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]],
        "left padding and a row of padding only: the one `(B, T)` mask lines up with every "
        "layer's tokens",
    ),
    (
        lambda: [x.double() for x in _logits(136, 2, 6, 3)],
        3,
        2,
        [[1, 1, 0], [1, 1, 1]],
        "float64 router logits",
    ),
    (
        lambda: _separated(137, 2, 8, 4),
        4,
        2,
        None,
        "bfloat16 router logits (the softmax in bfloat16, as transformers, or upcast)",
    ),
    (
        lambda: [x + torch.tensor([6.0, 5.0, 0.0, 0.0]) for x in _logits(138, 2, 6, 4, 0.5)],
        4,
        2,
        None,
        "a collapsed router (every token to the same two experts) costs about `num_experts`",
    ),
]


def _hand_written() -> list[Case]:
    """The cases of :data:`HAND_WRITTEN` (see the module's docstring)."""
    return [
        _case(
            f"hidden case {i + 1}", make(), E, K, None if rows is None else torch.tensor(rows), ok
        )
        for i, (make, E, K, rows, ok) in enumerate(HAND_WRITTEN)
    ]


def _generated(n: int = 12) -> list[Case]:
    """``n`` seeded batches: L in 1..4 layers, E in 2..8 experts, top_k in 1..min(3, E), B in
    1..4, T in 1..6; a third without a mask, the others padded on the left or the right (rows of
    padding only among them, one real token at least), every fourth mask bool."""
    g = gen(139)
    cases = []
    for i in range(n):
        L, E = int(torch.randint(1, 5, (), generator=g)), int(torch.randint(2, 9, (), generator=g))
        K = int(torch.randint(1, min(3, E) + 1, (), generator=g))
        B, T = int(torch.randint(1, 5, (), generator=g)), int(torch.randint(1, 7, (), generator=g))
        layers = [torch.randn(B * T, E, generator=g) * 2.0 for _ in range(L)]  # L x (N, E)
        lengths = torch.randint(0, T + 1, (B,), generator=g)  # (B,)
        lengths[0] = max(int(lengths[0]), 1)
        mask = (torch.arange(T) < lengths[:, None]).long()  # (B, T): right padding
        mask = mask.flip(-1) if i % 2 else mask  # left padding
        mask = mask.bool() if i % 4 == 1 else mask
        cases.append(_case(f"generated case {i + 1}", layers, E, K, None if i % 3 == 0 else mask))
    ok = f"equal to transformers' Mixtral loss on {n} random batches (1 to 4 layers, top_k 1 to 3)"
    cases[-1] = replace(cases[-1], ok=ok)
    return cases


def cases() -> list[Case]:
    """Every case the checker runs, in order."""
    return _hand_written() + _generated()


# --------------------------------------------------------------------------- known mistakes
# ``_parts``' keywords make each entry's mistake.

known = Catalogue("load_balancing_loss_func")


def _parts(
    gate_logits,
    num_experts,
    top_k,
    attention_mask,
    *,
    use_mask=True,
    count_all=False,
    probs=lambda x: x.softmax(dim=-1),
    chosen=None,
    sparse=False,
    tile=torch.Tensor.repeat,
):
    """``(f, P)`` over the tokens of all layers, right unless told: ``use_mask=False`` counts
    the padding, ``count_all`` divides by every token, ``probs`` makes the router
    probabilities, ``chosen`` the experts counted in ``f`` (default: the top-k), ``sparse``
    keeps in ``P`` only the top-k probabilities, renormalised, ``tile`` repeats the mask for
    the layers."""
    logits = torch.cat(gate_logits).float()  # (L*N, E)
    p = probs(logits)  # (L*N, E)
    top = p.topk(top_k, dim=-1)
    picked = top.indices if chosen is None else chosen(p)  # (L*N, k)
    routed = F.one_hot(picked, num_experts).sum(dim=1).float()  # (L*N, E)
    if sparse:
        p = torch.zeros_like(p).scatter(-1, top.indices, top.values / top.values.sum(-1, True))
    weight = torch.ones(logits.shape[0])
    if attention_mask is not None and use_mask:
        weight = tile(attention_mask.reshape(-1).float(), len(gate_logits))  # (L*N,)
    tokens = torch.tensor(float(logits.shape[0])) if count_all else weight.sum()
    return (routed * weight[:, None]).sum(0) / tokens, (p * weight[:, None]).sum(0) / tokens


def _loss(*args, **kw):
    f, p = _parts(*args, **kw)
    return args[1] * (f * p).sum()


@known("router_padding_counted")
def ignores_the_mask(gate_logits, num_experts, top_k=2, attention_mask=None):
    """Every token counted, padding included."""
    return _loss(gate_logits, num_experts, top_k, attention_mask, use_mask=False)


@known("router_padding_in_denominator")
def masks_but_divides_by_all(gate_logits, num_experts, top_k=2, attention_mask=None):
    """The padding left out of the sums but counted in the denominators."""
    return _loss(gate_logits, num_experts, top_k, attention_mask, count_all=True)


@known("loss_per_layer")
def mean_of_layer_losses(gate_logits, num_experts, top_k=2, attention_mask=None):
    """The mean of the {L} layers' own losses."""
    losses = [_loss((x,), num_experts, top_k, attention_mask) for x in gate_logits]
    return torch.stack(losses).mean()


@known("layers_summed")
def sums_over_layers(gate_logits, num_experts, top_k=2, attention_mask=None):
    """`f` and `P` summed over the {L} layers, not averaged."""
    f, p = _parts(gate_logits, num_experts, top_k, attention_mask)
    return num_experts * (f * p).sum() * len(gate_logits) ** 2


@known("balanced_per_sequence")
def per_sequence_losses(gate_logits, num_experts, top_k=2, attention_mask=None):
    """The mean of each sequence's own loss."""
    B = 1 if attention_mask is None else attention_mask.shape[0]
    mask = torch.ones(B, gate_logits[0].shape[0] // B) if attention_mask is None else attention_mask
    rows = [
        _loss(tuple(x.view(B, -1, num_experts)[b] for x in gate_logits), num_experts, top_k, m)
        for b, m in enumerate(mask)
        if m.any()
    ]
    return torch.stack(rows).mean()


@known("f_divided_by_top_k")
def f_sums_to_one(gate_logits, num_experts, top_k=2, attention_mask=None):
    """`f` divided by `top_k` (it sums to 1)."""
    return _loss(gate_logits, num_experts, top_k, attention_mask) / top_k


@known("counts_first_choice_only")
def counts_the_argmax(gate_logits, num_experts, top_k=2, attention_mask=None):
    """`f` from each token's first choice only (`argmax`)."""
    first = lambda p: p.argmax(-1, keepdim=True)  # noqa: E731
    return _loss(gate_logits, num_experts, top_k, attention_mask, chosen=first)


@known("probs_renormalised_over_top_k")
def p_from_routing_weights(gate_logits, num_experts, top_k=2, attention_mask=None):
    """`P` from the routing weights (the top-k probabilities renormalised, 0 elsewhere)."""
    return _loss(gate_logits, num_experts, top_k, attention_mask, sparse=True)


@known("softmax_twice")
def softmax_of_softmax(gate_logits, num_experts, top_k=2, attention_mask=None):
    """With the softmax applied twice."""
    twice = lambda x: x.softmax(-1).softmax(-1)  # noqa: E731
    return _loss(gate_logits, num_experts, top_k, attention_mask, probs=twice)


@known("missing_num_experts")
def without_num_experts(gate_logits, num_experts, top_k=2, attention_mask=None):
    """`sum(f * P)` without the factor `num_experts` = {E}."""
    return _loss(gate_logits, num_experts, top_k, attention_mask) / num_experts


@known("mask_misaligned")
def mask_interleaved(gate_logits, num_experts, top_k=2, attention_mask=None):
    """The mask repeated token by token (`repeat_interleave`), not layer by layer."""
    return _loss(gate_logits, num_experts, top_k, attention_mask, tile=torch.repeat_interleave)


def _diagnose(case: Case, got: float, expected: float) -> Mistake | None:
    fields = {"L": len(case.args[0]), "E": case.args[1]}
    outputs = known.outputs(case, float, **fields)
    return named(case, got, expected, outputs)


def check_load_balancing_loss_func(run: Runner) -> None:
    for case in cases():
        expected = float(run.expected(case).detach())
        loss = as_loss(case, run.call(case))
        got = float(loss.detach())
        rtol = 2e-2 if case.args[0][0].dtype == torch.bfloat16 else 1e-4
        if not close(got, expected, rtol):
            detail = f"On {case.label}, the loss is {got:.6g}; expected {expected:.6g}."
            raise _diagnose(case, got, expected) or Mistake("wrong_value", detail)
        if rtol < 1e-2:
            run.gradients(case, loss, rtol=1e-3)
        run.passed_case(case)
