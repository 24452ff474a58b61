"""Checkers for the loss exercises: ``mlm_loss``, ``clm_loss`` and ``bert_pretraining_loss``.

The reference is the package itself (``lmlessons.mlm_loss`` etc., tested to equal transformers).
When a value is off, the checker compares it with the values that known mistakes produce
(dividing by every position, not shifting, shifting twice, ignoring the weights, ...) and names
the one that matches. If none does, it perturbs the scores at positions that must not count and
watches whether the learner's loss moves. Every check also covers: a scalar tensor connected to
the logits, inputs left unchanged, 0 (not NaN) when there is nothing to predict, and
``num_items_in_batch`` (sum / count, the gradient-accumulation fix).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons.exercises._cases import IGNORE, clm_labels, gen, mlm_labels, random_logits
from lmlessons.exercises._runner import Mistake, Runner

MLM_SIGNATURE = "mlm_loss(logits, labels, *, num_items_in_batch=None) -> loss"
CLM_SIGNATURE = "clm_loss(logits, labels, *, num_items_in_batch=None) -> loss   # labels unshifted"
BERT_SIGNATURE = (
    "bert_pretraining_loss(mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, "
    "nsp_weight=1.0) -> loss"
)

GRAD_ACCUM_NOTE = (
    "Why it matters: with gradient accumulation, each micro-batch's loss is divided by the number "
    "of target tokens in the *whole* step, so that the micro-batch losses add up to the full-batch "
    "mean. Averaging per-micro-batch means instead weighs a micro-batch with 1 target token like "
    "one with 99 (transformers' Trainer had exactly this bug until October 2024)."
)


def _close(got: float, expected: float) -> bool:
    return math.isfinite(got) and abs(got - expected) <= 1e-4 * max(1.0, abs(expected))


def _explain_ce(exc: BaseException) -> tuple[str, str] | None:
    text = str(exc)
    if "leaf Variable that requires grad" in text or "a view of a leaf Variable" in text:
        return (
            "modifies_input",
            "You wrote into an argument in place (e.g. `logits[...] = ...` or `labels[...] = ...`). "
            "Build new tensors instead; the caller still needs its inputs.",
        )
    if "Expected target size" in text or "Expected input batch_size" in text:
        return (
            "class_dim",
            "`F.cross_entropy` wants scores of shape (N, V) and targets of shape (N,) (or the class "
            "dimension second). Flatten: `logits.reshape(-1, logits.size(-1))` and `labels.reshape(-1)`.",
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


def _explain_empty(exc: BaseException) -> tuple[str, str] | None:
    known = _explain_ce(exc)
    if known is not None:
        return known
    return (
        "fails_when_nothing_masked",
        "This batch has no target at all (every label is -100). It happens in real training (short "
        "sequences, 15% masking) and must give a loss of 0 that still backpropagates, not an error.",
    )


def _as_loss(out: Any, case: str) -> torch.Tensor:
    if isinstance(out, (tuple, list)):
        raise Mistake(
            "returns_tuple",
            "returns a tuple, not the loss",
            f"On {case}, your function returned a {type(out).__name__} of {len(out)} items. Return only the "
            "loss, a 0-dim tensor (the seed file returned `(loss, info)`; statistics belong elsewhere).",
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
            f"On {case}, your function returned a {type(out).__name__}{extra}. Return a 0-dim tensor so "
            "that `loss.backward()` works.",
        )
    if out.dim() != 0:
        raise Mistake(
            "not_scalar",
            "the loss is not a single number",
            f"On {case}, your function returned a tensor of shape {tuple(out.shape)}. Reduce it to one "
            "0-dim tensor: the mean over target tokens (did you use `reduction='none'`?).",
        )
    if not out.dtype.is_floating_point:
        raise Mistake(
            "wrong_dtype", "the loss is not a float", f"On {case}, the loss has dtype {out.dtype}."
        )
    return out


class _LossCall:
    """Calls a learner's loss on copies of the inputs and checks they come back unchanged."""

    def __init__(self, run: Runner, names: Sequence[str]) -> None:
        self.run = run
        self.names = names

    def __call__(
        self,
        args: Sequence[torch.Tensor],
        case: str,
        *,
        explain: Callable[[BaseException], tuple[str, str] | None] = _explain_ce,
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
        return _as_loss(out, case), leaves


def _token_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-position cross-entropy in float64, 0 where the target is -100. ``(..., V)``, ``(...)``."""
    logp = logits.double().log_softmax(-1)
    safe = targets.clamp(min=0)
    ce = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(targets != IGNORE, ce, torch.zeros_like(ce))


def _shift(labels: torch.Tensor, k: int) -> torch.Tensor:
    """targets[:, t] = labels[:, t + k] (-100 where t + k is outside)."""
    out = torch.full_like(labels, IGNORE)
    T = labels.shape[-1]
    if k >= 0:
        out[..., : T - k] = labels[..., k:]
    else:
        out[..., -k:] = labels[..., : T + k]
    return out


def _per_row_mean(ce: torch.Tensor, targets: torch.Tensor) -> float:
    counts = (targets != IGNORE).sum(-1)
    rows = counts > 0
    return float((ce.sum(-1)[rows] / counts[rows]).mean())


def _first_match(
    got: float, expected: float, candidates: list[tuple[str, float, str, str]]
) -> None:
    for code, value, title, why in candidates:
        if _close(got, value) and not _close(value, expected):
            raise Mistake(code, title, why)


def _require_grad(
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
            f"On {case}, the value is right but its gradient with respect to the logits is not. Part of "
            "the computation is probably detached (`.detach()`, `.data`, or a constant built from the "
            "logits' values).",
        )
    run.ok("returns a 0-dim tensor that backpropagates to the logits with the right gradient")


def _reference(
    fn: Callable[..., torch.Tensor], logits: torch.Tensor, *rest: Any, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The package's loss on a fresh leaf copy of ``logits``: ``(loss, leaf)``."""
    leaf = logits.clone().requires_grad_(True)
    return fn(leaf, *rest, **kwargs), leaf


def _check_empty(
    run: Runner, call: _LossCall, args: list[torch.Tensor], case: str, code: str, what: str
) -> None:
    loss, leaves = call(args, case, explain=_explain_empty)
    got = float(loss.detach())
    if not math.isfinite(got):
        raise Mistake(
            code,
            f"NaN when {what}",
            f"On {case}, your loss is {got}. A mean over zero targets is 0 / 0 = NaN "
            "(`F.cross_entropy(..., reduction='mean')` does exactly that), and one NaN loss destroys "
            "the weights at the next optimizer step. Sum the per-token losses and divide by "
            "`max(count, 1)`, so an empty batch gives 0.",
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
            f"On {case}, your function returned a constant 0 with no gradient, so the training loop's "
            "`loss.backward()` fails on this batch. Return a 0 that depends on the logits, e.g. the "
            "sum over (no) target tokens divided by `max(count, 1)`.",
        )
    (grad,) = torch.autograd.grad(loss, leaves[0], allow_unused=True)
    if grad is not None and bool((grad != 0).any()):
        raise Mistake(
            "empty_not_zero",
            f"the gradient is not 0 when {what}",
            f"On {case}, there is nothing to predict, yet your loss has a non-zero gradient.",
        )
    run.ok(f"0 (not NaN), still backpropagating, when {what}")


def _check_num_items(
    run: Runner,
    call: _LossCall,
    args: list[torch.Tensor],
    case: str,
    total: float,
    count: int,
    extra: int,
    reference_fn: Callable[..., torch.Tensor],
) -> None:
    n_items = count + extra
    expected = float(reference_fn(*args, num_items_in_batch=n_items))
    assert _close(expected, total / n_items)  # the package's own contract
    what = f"{case} with `num_items_in_batch={n_items}` (this micro-batch has {count} targets)"
    loss, _ = call(args, what, num_items_in_batch=n_items)
    got = float(loss.detach())
    if not _close(got, expected):
        mean = total / count
        _first_match(
            got,
            expected,
            [
                (
                    "ignores_num_items_in_batch",
                    mean,
                    "`num_items_in_batch` is ignored",
                    f"On {what}, your loss is {got:.4f}, the plain mean over this micro-batch "
                    f"({mean:.4f}). With `num_items_in_batch` given, return the *sum* of the per-token "
                    f"losses divided by it: {total:.4f} / {n_items} = {expected:.4f}.\n\n{GRAD_ACCUM_NOTE}",
                ),
                (
                    "num_items_divides_mean",
                    mean / n_items,
                    "divides the mean, not the sum, by `num_items_in_batch`",
                    f"On {what}, your loss is {got:.6f} = mean / num_items_in_batch. Divide the *sum* of the "
                    f"per-token losses: {total:.4f} / {n_items} = {expected:.4f}.",
                ),
            ],
        )
        raise Mistake(
            "wrong_num_items_value",
            "wrong value with `num_items_in_batch`",
            f"On {what}, your loss is {got:.6f}; expected sum / num_items_in_batch = {total:.4f} / "
            f"{n_items} = {expected:.6f}.\n\n{GRAD_ACCUM_NOTE}",
        )
    what_t = f"{case} with `num_items_in_batch=torch.tensor({n_items})`"
    loss, _ = call(args, what_t, num_items_in_batch=torch.tensor(n_items))
    if not _close(float(loss.detach()), expected):
        raise Mistake(
            "wrong_num_items_value",
            "wrong value when `num_items_in_batch` is a tensor",
            f"On {what_t}, your loss is {float(loss.detach()):.6f}; expected {expected:.6f}. The "
            "Trainer passes the count as a 0-dim tensor: accept both an int and a tensor.",
        )
    run.ok(
        "with `num_items_in_batch`: sum over targets / count, so micro-batch losses add up to the full-batch loss"
    )


# ----------------------------------------------------------------------------------- mlm_loss


def check_mlm_loss(run: Runner) -> None:
    import lmlessons

    V, B, T = 23, 4, 9
    logits = random_logits(31, (B, T, V))  # (B, T, V)
    labels = mlm_labels(32, B, T, V, per_row=[3, 1, 5, 2])  # (B, T), 11 targets
    count = int((labels != IGNORE).sum())
    case = f"hidden case 1 (logits {tuple(logits.shape)}, labels with {count} targets and -100 at the other {B * T - count} positions)"
    call = _LossCall(run, ["logits", "labels"])
    loss, leaves = call([logits, labels], case)
    reference = _reference(lmlessons.mlm_loss, logits, labels)
    expected, got = float(reference[0].detach()), float(loss.detach())
    ce = _token_ce(logits, labels)
    total = float(ce.sum())
    if not _close(got, expected):
        _first_match(
            got,
            expected,
            [
                (
                    "counts_unmasked_positions",
                    total / labels.numel(),
                    "divides by every position, not by the masked ones",
                    f"On {case}, your loss is {got:.4f} = (sum over the {count} targets) / {labels.numel()} "
                    f"(all positions). The unmasked positions carry no loss, so they must not count in the "
                    f"denominator either: the mean over the {count} targets is {expected:.4f}. Counting "
                    "them multiplies the loss (and its gradient) by the masking rate: 6.7 times too small at "
                    "15%.",
                ),
                (
                    "minus100_not_ignored",
                    float(_token_ce(logits, labels.clamp(min=0)).mean()),
                    "positions labelled -100 were counted as targets",
                    f"On {case}, your loss is {got:.4f}: it treats the -100 positions as targets of class 0. "
                    "Only positions with `labels != -100` are predicted; `F.cross_entropy` skips -100 by "
                    "itself (`ignore_index=-100`) if you pass the labels unchanged.",
                ),
                (
                    "per_row_mean",
                    _per_row_mean(ce, labels),
                    "averages per-sequence means",
                    f"On {case}, your loss is {got:.4f}, the mean of per-sequence means. Every target token "
                    f"must weigh the same: average over all {count} targets of the batch at once ({expected:.4f}).",
                ),
                (
                    "sum_not_mean",
                    total,
                    "returns the sum, not the mean",
                    f"On {case}, your loss is {got:.4f}, the sum over targets. Return the mean over the "
                    f"{count} targets ({expected:.4f}) unless `num_items_in_batch` is given.",
                ),
                (
                    "nll_without_log_softmax",
                    float(
                        -(
                            logits.double()
                            .gather(-1, labels.clamp(min=0).unsqueeze(-1))
                            .squeeze(-1)
                        )[labels != IGNORE].mean()
                    ),
                    "`nll_loss` applied to raw scores",
                    f"On {case}, your loss is {got:.4f}: `F.nll_loss` expects log-probabilities. Apply "
                    "`log_softmax` first, or use `F.cross_entropy`, which does both.",
                ),
            ],
        )
        _perturb_ignored(
            run,
            call,
            [logits, labels],
            labels != IGNORE,
            got,
            case,
            code="uses_unmasked_positions",
            title="the scores at unmasked positions change the loss",
            why="Your loss changes when only the scores at positions labelled -100 change. Those "
            "positions are not predicted; only positions with `labels != -100` may count.",
        )
        raise Mistake(
            "wrong_value",
            "wrong loss value",
            f"On {case}, your loss is {got:.6f}; expected {expected:.6f}, the mean cross-entropy over the "
            f"{count} positions whose label is not -100.",
        )
    run.ok("equals the mean cross-entropy over positions whose label is not -100")
    _require_grad(run, loss, leaves, reference, case)
    empty = torch.full_like(labels, IGNORE)
    _check_empty(
        run,
        call,
        [logits, empty],
        "hidden case 2 (every label is -100: nothing was masked)",
        "nan_when_nothing_masked",
        "nothing is masked",
    )
    _check_num_items(run, call, [logits, labels], case, total, count, 17, lmlessons.mlm_loss)


def _perturb_ignored(
    run: Runner,
    call: _LossCall,
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
    if not _close(float(loss.detach()), got):
        raise Mistake(code, title, f"On {case}: {why}")


# ----------------------------------------------------------------------------------- clm_loss


def check_clm_loss(run: Runner) -> None:
    import lmlessons

    V, B, T = 19, 4, 10
    logits = random_logits(41, (B, T, V))  # (B, T, V)
    labels = clm_labels(42, V, lengths=[10, 7, 4, 9], length=T, prompt={3: 3})  # (B, T) unshifted
    targets = _shift(labels, 1)  # (B, T)
    count = int((targets != IGNORE).sum())
    case = (
        f"hidden case 1 (logits {tuple(logits.shape)}, unshifted labels = input ids with -100 on right "
        f"padding and on a 3-token prompt; {count} next-token targets)"
    )
    call = _LossCall(run, ["logits", "labels"])
    loss, leaves = call([logits, labels], case)
    reference = _reference(lmlessons.clm_loss, logits, labels)
    expected, got = float(reference[0].detach()), float(loss.detach())
    ce = _token_ce(logits, targets)
    total = float(ce.sum())

    def mean_with_shift(k: int) -> float:
        t = _shift(labels, k)
        return float(_token_ce(logits, t).sum() / (t != IGNORE).sum())

    if not _close(got, expected):
        _first_match(
            got,
            expected,
            [
                (
                    "not_shifted",
                    mean_with_shift(0),
                    "the labels are not shifted",
                    f"On {case}, your loss is {got:.4f}: position t is scored against `labels[:, t]`, its own "
                    "input token, which a causal model can simply copy. The logits at position t predict "
                    "the *next* token: score `logits[:, :-1]` against `labels[:, 1:]` "
                    "(transformers' `ForCausalLMLoss` shifts inside, so the caller passes "
                    f"`labels = input_ids.clone()`). Expected {expected:.4f}.",
                ),
                (
                    "shifted_twice",
                    mean_with_shift(2),
                    "the labels are shifted twice",
                    f"On {case}, your loss is {got:.4f}: position t is scored against the token two steps "
                    "ahead. The labels you receive are *unshifted* (`input_ids.clone()` with -100 on "
                    "padding); shift once, inside the loss. Pre-shifting the labels *and* shifting in the "
                    f"loss trains next-next-token prediction. Expected {expected:.4f}.",
                ),
                (
                    "shifted_wrong_way",
                    mean_with_shift(-1),
                    "the labels are shifted the wrong way",
                    f"On {case}, your loss is {got:.4f}: position t is scored against the *previous* token. "
                    f"Pair `logits[:, :-1]` with `labels[:, 1:]`. Expected {expected:.4f}.",
                ),
                (
                    "counts_padding_positions",
                    total / (B * (T - 1)),
                    "divides by every position, padding included",
                    f"On {case}, your loss is {got:.4f} = (sum over the {count} targets) / {B * (T - 1)} "
                    "(all shifted positions). Positions whose target is -100 (padding, the prompt) must "
                    f"not count in the denominator: the mean over the {count} targets is {expected:.4f}.",
                ),
                (
                    "counts_padding_positions",
                    total / (B * T),
                    "divides by every position, padding included",
                    f"On {case}, your loss is {got:.4f} = (sum over the {count} targets) / {B * T} (all "
                    "positions). Positions without a target (-100 after the shift, and the last position) "
                    f"must not count: the mean over the {count} targets is {expected:.4f}.",
                ),
                (
                    "not_ignoring_padding",
                    float(_token_ce(logits[:, :-1], labels.clamp(min=0)[:, 1:]).mean()),
                    "padding is not ignored",
                    f"On {case}, your loss is {got:.4f}: the -100 positions (padding, prompt) were scored as "
                    "class 0. Positions labelled -100 must not count; `F.cross_entropy` skips them itself "
                    f"(`ignore_index=-100`). Expected {expected:.4f}.",
                ),
                (
                    "per_row_mean",
                    _per_row_mean(ce, targets),
                    "averages per-sequence means",
                    f"On {case}, your loss is {got:.4f}, the mean of per-sequence means; every target token "
                    f"must weigh the same ({expected:.4f}).",
                ),
                (
                    "sum_not_mean",
                    total,
                    "returns the sum, not the mean",
                    f"On {case}, your loss is {got:.4f}, the sum over targets; return the mean ({expected:.4f}).",
                ),
            ],
        )
        # which positions does the learner's loss depend on?
        has_target = targets != IGNORE  # (B, T)
        last_only = torch.zeros_like(has_target)
        last_only[:, :-1] = True  # everything but the last column counts as "may count"
        _perturb_ignored(
            run,
            call,
            [logits, labels],
            last_only,
            got,
            case,
            code="not_shifted",
            title="the last position is scored, so the labels are not shifted",
            why="your loss changes when only the scores at the *last* position change, but the "
            "last position has no next token to predict. Score `logits[:, :-1]` against "
            "`labels[:, 1:]`.",
        )
        _perturb_ignored(
            run,
            call,
            [logits, labels],
            has_target,
            got,
            case,
            code="not_ignoring_padding",
            title="padding is not ignored",
            why="your loss changes when only the scores at positions whose next token is "
            "-100 (padding, prompt) change. Those positions must not count; keep -100 in the "
            "targets and let `F.cross_entropy` ignore them.",
        )
        raise Mistake(
            "wrong_value",
            "wrong loss value",
            f"On {case}, your loss is {got:.6f}; expected {expected:.6f}, the mean cross-entropy of "
            "`logits[:, :-1]` against `labels[:, 1:]` over targets that are not -100.",
        )
    run.ok(
        "shifts inside: position t is scored against `labels[:, t + 1]`; -100 (padding) is ignored"
    )
    _require_grad(run, loss, leaves, reference, case)
    only_first = torch.full_like(labels, IGNORE)
    only_first[:, 0] = labels[:, 0]  # position 0 is never a target after the shift
    _check_empty(
        run,
        call,
        [logits, only_first],
        "hidden case 2 (only position 0 has a label, so after the shift nothing is left to predict)",
        "nan_when_no_targets",
        "there is nothing to predict",
    )
    one = logits[:, :1].contiguous()
    _check_empty(
        run,
        call,
        [one, labels[:, :1].contiguous()],
        "hidden case 3 (sequences of length 1: no next token at all)",
        "nan_when_no_targets",
        "sequences have length 1",
    )
    _check_num_items(run, call, [logits, labels], case, total, count, 13, lmlessons.clm_loss)


# ------------------------------------------------------------------------ bert_pretraining_loss


def check_bert_pretraining_loss(run: Runner) -> None:
    import lmlessons

    V, B, T = 17, 4, 8
    mlm_logits = random_logits(51, (B, T, V))  # (B, T, V)
    nsp_logits = random_logits(52, (B, 2))  # (B, 2)
    mlm_lab = mlm_labels(53, B, T, V, per_row=[2, 3, 1, 2])  # (B, T)
    nsp_lab = torch.tensor([0, 1, 1, 0])  # (B,) 0 = IsNext
    count = int((mlm_lab != IGNORE).sum())
    ce = _token_ce(mlm_logits, mlm_lab)
    mlm = float(ce.sum()) / count
    nsp = float(F.cross_entropy(nsp_logits.double(), nsp_lab))
    nsp_swapped = float(F.cross_entropy(nsp_logits.double(), 1 - nsp_lab))
    mlm_all = float(ce.sum()) / mlm_lab.numel()
    call = _LossCall(run, ["mlm_logits", "nsp_logits", "mlm_labels", "nsp_labels"])
    args = [mlm_logits, nsp_logits, mlm_lab, nsp_lab]

    case = (
        f"hidden case 1 (mlm_logits {tuple(mlm_logits.shape)} with {count} masked targets, nsp_logits "
        f"{tuple(nsp_logits.shape)}, nsp_labels {nsp_lab.tolist()}, default weights)"
    )
    loss, leaves = call(args, case)
    reference = _reference(lmlessons.bert_pretraining_loss, mlm_logits, *args[1:])
    expected, got = float(reference[0].detach()), float(loss.detach())
    parts = f"MLM part {mlm:.4f}, NSP part {nsp:.4f}"
    w_mlm, w_nsp = 2.0, 0.25
    case_w = f"hidden case 2 (the same inputs with mlm_weight={w_mlm}, nsp_weight={w_nsp})"
    expected_w = float(lmlessons.bert_pretraining_loss(*args, mlm_weight=w_mlm, nsp_weight=w_nsp))
    formula = f"{w_mlm} * {mlm:.4f} + {w_nsp} * {nsp:.4f} = {expected_w:.4f}"
    normalised = (w_mlm * mlm + w_nsp * nsp) / (w_mlm + w_nsp)
    normalised_why = (
        f"On {case_w}, your loss is {normalised:.4f}, the weighted sum divided by mlm_weight + nsp_weight "
        f"(at the default weights that halves the sum). BERT's loss is the plain weighted sum: {formula}."
    )
    if not _close(got, expected):
        if _close(got, (mlm + nsp) / 2):  # an average, or a sum normalised by the weights?
            loss_w, _ = call(args, case_w, mlm_weight=w_mlm, nsp_weight=w_nsp)
            if _close(float(loss_w.detach()), normalised):
                raise Mistake(
                    "misweighted", "the weighted sum is normalised by the weights", normalised_why
                )
        _first_match(
            got,
            expected,
            [
                (
                    "averages_losses",
                    (mlm + nsp) / 2,
                    "averages the two losses instead of adding them",
                    f"On {case}, your loss is {got:.4f} = (MLM + NSP) / 2 ({parts}). BERT adds them: "
                    f"`mlm_weight * MLM + nsp_weight * NSP` = {expected:.4f} (Google's run_pretraining.py, "
                    "transformers' `BertForPreTraining`).",
                ),
                (
                    "swapped_nsp_labels",
                    mlm + nsp_swapped,
                    "the NSP labels are read the wrong way round",
                    f"On {case}, your NSP part is {nsp_swapped:.4f}, the loss for *swapped* labels. In BERT and "
                    "transformers, `next_sentence_label` 0 means IsNext (B follows A) and 1 NotNext; use "
                    "the labels as given, with class 0 = IsNext (d2l.ai uses the opposite convention).",
                ),
                (
                    "mlm_counts_unmasked_positions",
                    mlm_all + nsp,
                    "the MLM part divides by every position",
                    f"On {case}, your MLM part is {mlm_all:.4f} = sum over the {count} targets / {mlm_lab.numel()} "
                    f"positions. Average over the masked positions only ({parts}).",
                ),
                (
                    "missing_nsp",
                    mlm,
                    "the NSP loss is missing",
                    f"On {case}, your loss equals the MLM part alone ({parts}). Add the NSP loss: "
                    "cross-entropy of `nsp_logits` (B, 2) against `nsp_labels`.",
                ),
                (
                    "missing_mlm",
                    nsp,
                    "the MLM loss is missing",
                    f"On {case}, your loss equals the NSP part alone ({parts}). Add the MLM loss.",
                ),
            ],
        )
        raise Mistake(
            "wrong_value",
            "wrong loss value",
            f"On {case}, your loss is {got:.6f}; expected MLM + NSP = {expected:.6f} ({parts}).",
        )
    run.ok(
        "default weights: MLM mean over masked positions + NSP cross-entropy (0 = IsNext), as `BertForPreTraining`"
    )
    _require_grad(run, loss, leaves, reference, case)

    loss, _ = call(args, case_w, mlm_weight=w_mlm, nsp_weight=w_nsp)
    got = float(loss.detach())
    if not _close(got, expected_w):
        _first_match(
            got,
            expected_w,
            [
                (
                    "unweighted",
                    mlm + nsp,
                    "the weights are ignored",
                    f"On {case_w}, your loss is {got:.4f} = MLM + NSP, as if both weights were 1. Multiply "
                    f"each part by its weight: {formula}.",
                ),
                (
                    "misweighted",
                    w_nsp * mlm + w_mlm * nsp,
                    "the weights are swapped",
                    f"On {case_w}, your loss is {got:.4f} = nsp_weight * MLM + mlm_weight * NSP. Expected {formula}.",
                ),
                (
                    "misweighted",
                    normalised,
                    "the weighted sum is normalised by the weights",
                    normalised_why,
                ),
                (
                    "misweighted",
                    w_mlm * mlm + nsp,
                    "`nsp_weight` is ignored",
                    f"On {case_w}, your loss is {got:.4f} = mlm_weight * MLM + NSP. Expected {formula}.",
                ),
                (
                    "misweighted",
                    mlm + w_nsp * nsp,
                    "`mlm_weight` is ignored",
                    f"On {case_w}, your loss is {got:.4f} = MLM + nsp_weight * NSP. Expected {formula}.",
                ),
                (
                    "averages_losses",
                    (w_mlm * mlm + w_nsp * nsp) / 2,
                    "averages the two weighted losses instead of adding them",
                    f"On {case_w}, your loss is {got:.4f}, half the weighted sum. Expected {formula}.",
                ),
            ],
        )
        raise Mistake(
            "misweighted",
            "wrong value with non-default weights",
            f"On {case_w}, your loss is {got:.6f}; expected mlm_weight * MLM + nsp_weight * NSP = {formula}.",
        )
    run.ok("weights: `mlm_weight * MLM + nsp_weight * NSP`")

    empty = torch.full_like(mlm_lab, IGNORE)
    case_e = "hidden case 3 (no masked token in the batch: every MLM label is -100)"
    loss, leaves = call([mlm_logits, nsp_logits, empty, nsp_lab], case_e, explain=_explain_empty)
    got = float(loss.detach())
    if not math.isfinite(got):
        raise Mistake(
            "nan_when_nothing_masked",
            "NaN when nothing is masked",
            f"On {case_e}, your loss is {got}. The MLM part must be 0 when there is no masked token (a "
            "mean over zero targets is 0 / 0 = NaN with `reduction='mean'`), so the total is just the "
            f"NSP part ({nsp:.4f}). One NaN loss destroys the weights at the next step.",
        )
    if not _close(got, nsp):
        raise Mistake(
            "empty_not_zero",
            "the MLM part is not 0 when nothing is masked",
            f"On {case_e}, your loss is {got:.4f}; with no masked token it must equal the NSP part, {nsp:.4f}.",
        )
    run.ok("no masked token: the total is the NSP part, never NaN")
