"""Checker for ``rank_loss``: the causal-LM loss of one data-parallel rank, the target count
all-reduced over ranks (transformers' ``average_tokens_across_devices``), in the runner's pattern
(:mod:`._framework`): cases and diagnoses only. The ranks are threads with a summing
``all_reduce`` (:func:`._threads.ranks`, the ``via`` of every call).

DDP averages the ranks' gradients, so rank r must return ``W * sum_r / n`` (``sum_r`` its token
losses, ``n`` the targets of all ranks): then the ranks' mean is the full-batch loss and each
rank's gradient, divided by ``W``, the full-batch gradient of its logits. The reference of rank r
is ``W * clm_loss(logits_r, labels_r, num_items_in_batch=n)``. Cases: 1. 2 ranks, short and long
sequences; 2. 3 uneven ranks, one without target; 3. 4 ranks; 4. 1 rank; 5. 12 seeded cases (1 to
4 ranks of different lengths, ranks without target, targets of id 0, every rank empty).
"""

from __future__ import annotations

from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, gen, random_logits
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner, close, first_difference
from lmlessons.exercises._loss_checks import as_loss, ce_over, explain_ce, named, shift
from lmlessons.exercises._threads import MismatchedAllReduce, ranks
from lmlessons.losses import clm_loss

SIGNATURE = (
    "rank_loss(logits, labels, *, all_reduce, world_size) -> loss   # labels unshifted; "
    "all_reduce(tensor) returns the sum over ranks"
)


def _explain(exc: BaseException) -> str | None:
    if isinstance(exc, MismatchedAllReduce):
        return "mismatched_all_reduce"
    if isinstance(exc, TypeError) and "all_reduce takes a tensor" in str(exc):
        return "all_reduce_needs_tensor"
    if "process group" in str(exc):
        return "uses_torch_distributed"
    return explain_ce(exc)


def _counts(labels: list[torch.Tensor]) -> list[int]:
    """Each rank's targets after the shift."""
    return [int((shift(lab, 1) != IGNORE_INDEX).sum()) for lab in labels]


def _case(label: str, logits: list[torch.Tensor], labels: list[torch.Tensor], ok: Any = "") -> Case:
    shapes = [tuple(lab.shape) for lab in labels]
    text = f"{label} ({len(labels)} ranks, labels of shapes {shapes}, {_counts(labels)} targets"
    return Case(f"{text} after the shift)", (logits, labels), ok=ok)


def _hidden(label: str, lengths: list[list[int]], seed: int, ok: Any = "") -> Case:
    """Rank r holds sequences of ``lengths[r]`` tokens (of 8), the first with a 2-token prompt."""
    logits = [random_logits(seed + r, (len(ls), 8, 13)) for r, ls in enumerate(lengths)]
    labels = [clm_labels(seed + 100 + r, 13, ls, 8, {0: 2}) for r, ls in enumerate(lengths)]
    return _case(label, [lg.requires_grad_() for lg in logits], labels, ok)


def _generated() -> list[Case]:
    """12 seeded cases: case i has ``i % 4 + 1`` ranks (each with 1 to 4 sequences of 2 to 8
    tokens, a vocabulary of 2 to 11), -100 labels with probability ``i % 3 / 3``, the last rank
    of an even number of ranks without target, and case 12 no target on any rank."""
    g = gen(73)
    out = []
    for i in range(12):
        W, ignored = i % 4 + 1, i % 3 / 3
        empty = range(W) if i == 11 else [W - 1] if W % 2 == 0 else []
        V = int(torch.randint(2, 12, (), generator=g))
        sizes = torch.randint(1, 5, (W, 2), generator=g) * torch.tensor([1, 2])  # (B_r, T_r)
        logits = [torch.randn(b, t, V, generator=g) * 1.5 for b, t in sizes.tolist()]
        labels = [torch.randint(V, lg.shape[:2], generator=g) for lg in logits]
        for r, lab in enumerate(labels):
            lab[torch.rand(lab.shape, generator=g) < ignored] = IGNORE_INDEX
            if r in empty:
                lab[:] = IGNORE_INDEX
        out.append(_case(f"generated case {i + 1}", [lg.requires_grad_() for lg in logits], labels))
    return out


# --------------------------------------------------------------------------- known mistakes
# Small wrong implementations, each with its mistake code, run as ranks like the learner's; a
# wrong average of the ranks' losses is named by the entry whose average it equals (a
# docstring's ``{W}``, ``{before}``, ``{shifted}``, ``{positions}``: the case's, over all ranks).
# Each is the cross-entropy of the shifted labels over some count (:func:`._loss_checks.ce_over`).

known = Catalogue("rank_loss")


def _count(targets: torch.Tensor) -> torch.Tensor:
    return (targets != IGNORE_INDEX).sum()  # () a tensor, as all_reduce needs


@known("divides_by_local_count")
def averages_the_rank_means(logits, labels, *, all_reduce, world_size):
    """The mean of the ranks' own means."""
    all_reduce(_count(shift(labels, 1)))  # called, as required, but the result is not used
    return ce_over(logits, shift(labels, 1))  # (world_size * mean) / world_size


@known("divides_by_local_count")
def own_count(logits, labels, *, all_reduce, world_size):
    """World_size * the mean of the ranks' own means."""
    return world_size * ce_over(logits, shift(labels, 1))  # never calls all_reduce


@known("missing_world_size")
def forgets_world_size(logits, labels, *, all_reduce, world_size):
    """The full-batch loss / world_size {W}."""
    targets = shift(labels, 1)
    return ce_over(logits, targets, all_reduce(_count(targets)))


@known("missing_world_size")
def divides_by_world_size(logits, labels, *, all_reduce, world_size):
    """The full-batch loss / world_size² {W2}."""
    targets = shift(labels, 1)
    return ce_over(logits, targets, all_reduce(_count(targets))) / world_size  # not * R


@known("counts_before_shift")
def counts_before_the_shift(logits, labels, *, all_reduce, world_size):
    """The sum / the {before} labels not -100 before the shift."""
    total = all_reduce(_count(labels))  # one target too many per row
    return world_size * ce_over(logits, shift(labels, 1), total)


@known("counts_padding_positions")
def counts_every_position(logits, labels, *, all_reduce, world_size):
    """The sum / all {shifted} shifted positions."""
    batch, length = labels.shape
    total = all_reduce(torch.tensor(batch * (length - 1)))  # padding and prompt counted
    return world_size * ce_over(logits, shift(labels, 1), total)


@known("counts_padding_positions")
def counts_every_unshifted_position(logits, labels, *, all_reduce, world_size):
    """The sum / all {positions} positions."""
    total = all_reduce(torch.tensor(labels.numel()))  # padding and the last position counted
    return world_size * ce_over(logits, shift(labels, 1), total)


@known("not_shifted")
def never_shifts(logits, labels, *, all_reduce, world_size):
    """Position t scored against `labels[:, t]`."""
    return world_size * ce_over(logits, labels, all_reduce(_count(labels)))


def _diagnose(case: Case, got: float, full: float) -> Mistake | None:
    labels = case.args[1]
    W = len(labels)
    fields = {
        "W": W,
        "W2": W * W,
        "before": sum(int((lab != IGNORE_INDEX).sum()) for lab in labels),
        "shifted": sum(lab.shape[0] * (lab.shape[1] - 1) for lab in labels),
        "positions": sum(lab.numel() for lab in labels),
    }
    found = known.outputs(case, _mean, ranks, **fields)
    return named(case, got, full, found, "the mean of the ranks' losses")


def _mean(losses: list[torch.Tensor]) -> float:
    return sum(float(loss.detach()) for loss in losses) / len(losses)


def _references(case: Case, n: int) -> list[tuple[float, torch.Tensor]]:
    """Each rank's right loss ``W * clm_loss(..., num_items_in_batch=n)`` and its gradient."""
    out = []
    for lg, lab in zip(*case.args):
        leaf = lg.detach().clone().requires_grad_()
        loss = len(case.args[1]) * clm_loss(leaf, lab, num_items_in_batch=max(n, 1))
        out.append((float(loss.detach()), torch.autograd.grad(loss, leaf)[0]))
    return out


def _average(case: Case, losses: list[torch.Tensor], n: int, full: float) -> None:
    """The mistake if the ranks' losses do not average to the full-batch loss ``full`` (``n``:
    the targets of all ranks): a known one, else NaN, not 0 or a wrong value."""
    got = _mean(losses)
    if close(got, full):
        return
    if got != got and 0 in _counts(case.args[1]):
        code = "nan_when_no_targets"
    else:
        code = "empty_not_zero" if n == 0 else "wrong_value"
    detail = f"On {case.label}, the ranks' losses average to {got:.6g}; expected {full:.6g}."
    raise _diagnose(case, got, full) or Mistake(code, detail)


def _run(run: Runner, case: Case) -> None:
    """The ranks' mean against the full-batch loss, then each rank's value and gradient."""
    out = run.call(case, via=ranks, explain=_explain)
    logits = run.last[0][0]
    n = sum(_counts(case.args[1]))
    losses = [as_loss(Case(f"{case.label}, rank {r}"), o) for r, o in enumerate(out)]
    refs = _references(case, n)
    for r, loss in enumerate(losses):  # a loss without graph trains nothing, whatever its value
        if loss.grad_fn is None:
            code = "empty_detached" if n == 0 else "detached"
            raise Mistake(code, f"On {case.label}, rank {r}'s loss has no graph to its logits.")
    _average(case, losses, n, sum(v for v, _ in refs) / len(refs))
    for r, (loss, (want, grad)) in enumerate(zip(losses, refs)):
        on = f"On {case.label}, rank {r}'s loss"
        value = float(loss.detach())
        if not close(value, want):
            raise Mistake("wrong_rank_loss", f"{on} is {value:.4f}; expected {want:.4f}.")
        (mine,) = torch.autograd.grad(loss, logits[r], allow_unused=True)
        mine = torch.zeros_like(grad) if mine is None else mine
        if not torch.allclose(mine, grad, atol=1e-6, rtol=1e-4):
            raise Mistake("wrong_gradient", f"{on}'s gradient: {first_difference(mine, grad)}.")


def check_rank_loss(run: Runner) -> None:
    first = (
        "2 ranks: the ranks' losses average to the full-batch loss",
        "each rank: world_size * its sum / the all-reduced count, with the full-batch gradient",
    )
    uneven = "3 uneven ranks, one without any target: every rank joins every `all_reduce`"
    cases = [
        _hidden("hidden case 1", [[3, 4], [8, 8]], 51, first),
        _hidden("hidden case 2", [[8], [1, 1], [5, 7, 6]], 61, uneven),
        _hidden("hidden case 3", [[2, 6], [8], [4, 4, 3], [7]], 71),
        _hidden("hidden case 4", [[5, 8, 3]], 81),
        *_generated(),
    ]
    for case in cases:
        _run(run, case)
        run.passed_case(case)
    run.ok("4 ranks, and 1 rank (the plain mean over targets)")
