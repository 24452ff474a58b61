"""What the loss checkers share: calling a learner's loss safely, independent float64 values to
compare with, and the checks every loss exercise runs.

:data:`REFERENCES` names the loss each checker compares with: the course's own (the tests hold
them against transformers' ``ForMaskedLMLoss``, ``ForCausalLMLoss`` and ``BertForPreTraining``).
Every check also covers: a scalar tensor connected to the logits with the reference's gradient,
inputs left unchanged, 0 (not NaN) when there is nothing to predict, and
``num_items_in_batch`` (sum / count, the gradient-accumulation fix).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import gen
from lmlessons.exercises._runner import Mistake, Runner
from lmlessons.losses import bert_pretraining_loss, clm_loss, mlm_loss

#: The reference each checker compares a learner's loss with: the course's losses, which
#: ``tests/test_exercises.py`` checks against transformers' ``ForMaskedLMLoss``,
#: ``ForCausalLMLoss`` and ``BertForPreTraining``'s loss.
REFERENCES: dict[str, Callable[..., torch.Tensor]] = {
    "mlm_loss": mlm_loss,
    "clm_loss": clm_loss,
    "bert_pretraining_loss": bert_pretraining_loss,
}

#: A known mistake: (code, the value it gives, title, explanation).
Candidate = tuple[str, float, str, str]

GRAD_ACCUM_NOTE = (
    "Why it matters: with gradient accumulation, each micro-batch's loss is divided by the number "
    "of target tokens in the *whole* step, so that the micro-batch losses add up to the full-batch "
    "mean. Averaging per-micro-batch means instead weighs a micro-batch with 1 target token like "
    "one with 99 (transformers' Trainer had exactly this bug until October 2024)."
)


def close(got: float, expected: float) -> bool:
    return math.isfinite(got) and abs(got - expected) <= 1e-4 * max(1.0, abs(expected))


def explain_ce(exc: BaseException) -> tuple[str, str] | None:
    text = str(exc)
    if "leaf Variable that requires grad" in text or "a view of a leaf Variable" in text:
        return (
            "modifies_input",
            "You wrote into an argument in place (e.g. `logits[...] = ...` or `labels[...] = "
            "...`). Build new tensors instead; the caller still needs its inputs.",
        )
    if "Expected target size" in text or "Expected input batch_size" in text:
        return (
            "class_dim",
            "`F.cross_entropy` wants scores of shape (N, V) and targets of shape (N,) (or the "
            "class dimension second). Flatten: `logits.reshape(-1, logits.size(-1))` and "
            "`labels.reshape(-1)`.",
        )
    if "out of bounds" in text or "-100" in text:
        return (
            "minus100_not_ignored",
            "The labels hold -100 at positions that are not targets; -100 is not a class id. Let "
            "`F.cross_entropy` skip them (`ignore_index=-100`, its default) or keep only positions "
            "with `labels != -100`.",
        )
    if "view size is not compatible" in text:
        return (
            "raised_exception",
            "A sliced tensor is not contiguous: use `.reshape(...)` instead of `.view(...)`.",
        )
    return None


def explain_empty(exc: BaseException) -> tuple[str, str] | None:
    known = explain_ce(exc)
    if known is not None:
        return known
    return (
        "fails_when_nothing_masked",
        "This batch has no target at all (every label is -100). It happens in real training "
        "(short sequences, 15% masking) and must give a loss of 0 that still backpropagates, not "
        "an error.",
    )


def as_loss(out: Any, case: str) -> torch.Tensor:
    if isinstance(out, (tuple, list)):
        raise Mistake(
            "returns_tuple",
            "returns a tuple, not the loss",
            f"On {case}, your function returned a {type(out).__name__} of {len(out)} items. "
            "Return only the loss, a 0-dim tensor (`loss.backward()` and the training loop need "
            "it alone; compute statistics such as the number of targets elsewhere).",
        )
    if not isinstance(out, torch.Tensor):
        extra = (
            " (`.item()` turns the loss into a Python number and cuts it off from the graph)"
            if isinstance(out, (int, float))
            else ""
        )
        raise Mistake(
            "not_a_tensor",
            "the loss is not a tensor",
            f"On {case}, your function returned a {type(out).__name__}{extra}. Return a 0-dim "
            "tensor so that `loss.backward()` works.",
        )
    if out.dim() != 0:
        raise Mistake(
            "not_scalar",
            "the loss is not a single number",
            f"On {case}, your function returned a tensor of shape {tuple(out.shape)}. Reduce it "
            "to one 0-dim tensor: the mean over target tokens (did you use `reduction='none'`?).",
        )
    if not out.dtype.is_floating_point:
        raise Mistake(
            "wrong_dtype", "the loss is not a float", f"On {case}, the loss has dtype {out.dtype}."
        )
    return out


class LossCall:
    """Calls a learner's loss on copies of the inputs and checks they come back unchanged."""

    def __init__(self, run: Runner, names: Sequence[str]) -> None:
        self.run = run
        self.names = names

    def __call__(
        self,
        args: Sequence[torch.Tensor],
        case: str,
        *,
        explain: Callable[[BaseException], tuple[str, str] | None] = explain_ce,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        leaves = [
            a.clone().requires_grad_(True) if a.is_floating_point() else a.clone() for a in args
        ]
        out = self.run.call(*leaves, case=case, explain=explain, **kwargs)
        for name, leaf, original in zip(self.names, leaves, args):
            if not torch.equal(leaf.detach(), original):
                n = int((leaf.detach() != original).sum())
                raise Mistake(
                    "modifies_input",
                    f"modified `{name}` in place",
                    f"On {case}, `{name}` changed during the call ({n} entries differ), e.g. "
                    "`labels[labels == -100] = 0`. Never write into the arguments: the caller "
                    "reuses them (the same labels serve the next micro-batch or the evaluation).",
                )
        return as_loss(out, case), leaves


def token_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-position cross-entropy in float64, 0 where the target is -100.

    ``logits`` ``(..., V)``, ``targets`` ``(...)``."""
    logp = logits.double().log_softmax(-1)
    safe = targets.clamp(min=0)
    ce = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(targets != IGNORE_INDEX, ce, torch.zeros_like(ce))


def shift_targets(labels: torch.Tensor, k: int) -> torch.Tensor:
    """targets[:, t] = labels[:, t + k] (-100 where t + k is outside)."""
    out = torch.full_like(labels, IGNORE_INDEX)
    T = labels.shape[-1]
    if k >= 0:
        out[..., : T - k] = labels[..., k:]
    else:
        out[..., -k:] = labels[..., : T + k]
    return out


def per_row_mean(ce: torch.Tensor, targets: torch.Tensor) -> float:
    counts = (targets != IGNORE_INDEX).sum(-1)
    rows = counts > 0
    return float((ce.sum(-1)[rows] / counts[rows]).mean())


def first_match(got: float, expected: float, candidates: list[Candidate]) -> None:
    for code, value, title, why in candidates:
        if close(got, value) and not close(value, expected):
            raise Mistake(code, title, why)


def require_grad(
    run: Runner,
    loss: torch.Tensor,
    leaves: list[torch.Tensor],
    reference: tuple[torch.Tensor, torch.Tensor],
    case: str,
) -> None:
    if not loss.requires_grad:
        raise Mistake(
            "detached",
            "the loss is not connected to the logits",
            f"On {case}, the returned loss has no gradient (`requires_grad` is False), so "
            "`loss.backward()` cannot train anything. Did you call `.item()`, `.detach()`, "
            "`torch.tensor(...)` or NumPy on the way?",
        )
    (grad,) = torch.autograd.grad(loss, leaves[0])
    (ref_grad,) = torch.autograd.grad(*reference)
    if not torch.allclose(grad.double(), ref_grad.double(), atol=1e-5, rtol=1e-4):
        raise Mistake(
            "wrong_gradient",
            "the loss has the right value but the wrong gradient",
            f"On {case}, the value is right but its gradient with respect to the logits is not. "
            "Part of the computation is probably detached (`.detach()`, `.data`, or a constant "
            "built from the logits' values).",
        )
    run.ok("returns a 0-dim tensor that backpropagates to the logits with the right gradient")


def reference_loss(
    fn: Callable[..., torch.Tensor], logits: torch.Tensor, *rest: Any, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference loss on a fresh leaf copy of ``logits``: ``(loss, leaf)``."""
    leaf = logits.clone().requires_grad_(True)
    return fn(leaf, *rest, **kwargs), leaf


def check_value_and_grad(
    run: Runner,
    call: LossCall,
    args: list[torch.Tensor],
    case: str,
    reference_fn: Callable[..., torch.Tensor],
    diagnose: Callable[[float, float], Mistake],
    ok: str,
) -> None:
    """The learner's loss on ``args`` has the reference's value (reported as ``ok``), then its
    gradient (:func:`require_grad`); a wrong value raises ``diagnose(got, expected)``."""
    loss, leaves = call(args, case)
    reference = reference_loss(reference_fn, *args)
    got, expected = float(loss.detach()), float(reference[0].detach())
    if not close(got, expected):
        raise diagnose(got, expected)
    run.ok(ok)
    require_grad(run, loss, leaves, reference, case)


def check_empty(
    run: Runner, call: LossCall, args: list[torch.Tensor], case: str, code: str, what: str
) -> None:
    loss, leaves = call(args, case, explain=explain_empty)
    got = float(loss.detach())
    if not math.isfinite(got):
        raise Mistake(
            code,
            f"NaN when {what}",
            f"On {case}, your loss is {got}. A mean over zero targets is 0 / 0 = NaN "
            "(`F.cross_entropy(..., reduction='mean')` does exactly that), and one NaN loss "
            "destroys the weights at the next optimizer step. Sum the per-token losses and "
            "divide by `max(count, 1)`, so an empty batch gives 0.",
        )
    if abs(got) > 1e-6:
        raise Mistake(
            "empty_not_zero",
            f"the loss is not 0 when {what}",
            f"On {case}, your loss is {got:.4f}, but there is no target to predict: it must be 0.",
        )
    if not loss.requires_grad:
        raise Mistake(
            "empty_detached",
            f"the loss does not backpropagate when {what}",
            f"On {case}, your function returned a constant 0 with no gradient, so the training "
            "loop's `loss.backward()` fails on this batch. Return a 0 that depends on the "
            "logits, e.g. the sum over (no) target tokens divided by `max(count, 1)`.",
        )
    (grad,) = torch.autograd.grad(loss, leaves[0], allow_unused=True)
    if grad is not None and bool((grad != 0).any()):
        raise Mistake(
            "empty_not_zero",
            f"the gradient is not 0 when {what}",
            f"On {case}, there is nothing to predict, yet your loss has a non-zero gradient.",
        )
    run.ok(f"0 (not NaN), still backpropagating, when {what}")


def num_items_mistake(
    what: str, got: float, expected: float, total: float, count: int, n_items: int
) -> Mistake:
    """The mistake behind a wrong value with ``num_items_in_batch=n_items``."""
    mean = total / count
    first_match(
        got,
        expected,
        [
            (
                "ignores_num_items_in_batch",
                mean,
                "`num_items_in_batch` is ignored",
                f"On {what}, your loss is {got:.4f}, the plain mean over this micro-batch "
                f"({mean:.4f}). With `num_items_in_batch` given, return the *sum* of the "
                f"per-token losses divided by it: {total:.4f} / {n_items} = "
                f"{expected:.4f}.\n\n{GRAD_ACCUM_NOTE}",
            ),
            (
                "num_items_divides_mean",
                mean / n_items,
                "divides the mean, not the sum, by `num_items_in_batch`",
                f"On {what}, your loss is {got:.6f} = mean / num_items_in_batch. Divide the "
                f"*sum* of the per-token losses: {total:.4f} / {n_items} = {expected:.4f}.",
            ),
        ],
    )
    return Mistake(
        "wrong_num_items_value",
        "wrong value with `num_items_in_batch`",
        f"On {what}, your loss is {got:.6f}; expected sum / num_items_in_batch = {total:.4f} / "
        f"{n_items} = {expected:.6f}.\n\n{GRAD_ACCUM_NOTE}",
    )


def check_num_items(
    run: Runner,
    call: LossCall,
    args: list[torch.Tensor],
    case: str,
    total: float,
    count: int,
    extra: int,
    reference_fn: Callable[..., torch.Tensor],
) -> None:
    """``num_items_in_batch = count + extra``, as an int and as a 0-dim tensor: the sum of the
    per-token losses (``total``) divided by it."""
    n_items = count + extra
    expected = float(reference_fn(*args, num_items_in_batch=n_items))
    what = f"{case} with `num_items_in_batch={n_items}` (this micro-batch has {count} targets)"
    loss, _ = call(args, what, num_items_in_batch=n_items)
    got = float(loss.detach())
    if not close(got, expected):
        raise num_items_mistake(what, got, expected, total, count, n_items)
    what_t = f"{case} with `num_items_in_batch=torch.tensor({n_items})`"
    loss, _ = call(args, what_t, num_items_in_batch=torch.tensor(n_items))
    if not close(float(loss.detach()), expected):
        raise Mistake(
            "wrong_num_items_value",
            "wrong value when `num_items_in_batch` is a tensor",
            f"On {what_t}, your loss is {float(loss.detach()):.6f}; expected {expected:.6f}. The "
            "Trainer passes the count as a 0-dim tensor: accept both an int and a tensor.",
        )
    run.ok(
        "with `num_items_in_batch`: sum over targets / count, so micro-batch losses add up to the "
        "full-batch loss"
    )


def perturb_ignored(
    run: Runner,
    call: LossCall,
    args: list[torch.Tensor],
    counted: torch.Tensor,
    got: float,
    case: str,
    *,
    code: str,
    title: str,
    why: str,
) -> None:
    """Change the logits where ``counted`` is False; if the loss moves, raise ``code``."""
    logits = args[0]
    noise = torch.randn(logits.shape, generator=gen(99)) * 3.0
    changed = torch.where(counted.unsqueeze(-1), logits, logits + noise)
    loss, _ = call([changed, *args[1:]], case + ", scores changed at positions that must not count")
    if not close(float(loss.detach()), got):
        raise Mistake(code, title, f"On {case}: {why}")
