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

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, gen, random_logits
from lmlessons.exercises._framework import (
    Case,
    Mistake,
    Runner,
    close,
    first_difference,
    known_mistakes,
    known_outputs,
)
from lmlessons.exercises._loss_checks import as_loss, explain_ce, named, shift
from lmlessons.exercises._threads import MismatchedAllReduce, ranks
from lmlessons.losses import clm_loss

SIGNATURE = (
    "rank_loss(logits, labels, *, all_reduce, world_size) -> loss   # labels unshifted; "
    "all_reduce(tensor) returns the sum over ranks"
)


@dataclass(frozen=True)
class RankRow:
    """A row of :data:`GENERATED`: the number of ranks (each with 1 to 4 sequences of 2 to 8
    tokens, a vocabulary of 2 to 11), the probability of a -100 label, and the ranks whose
    labels are all -100."""

    ranks: int
    ignored: float
    empty_ranks: tuple[int, ...] = ()


#: The generated cases, in order.
GENERATED = [
    RankRow(1, 0.0),
    RankRow(2, 1 / 3, empty_ranks=(1,)),
    RankRow(3, 2 / 3),
    RankRow(4, 0.0, empty_ranks=(3,)),
    RankRow(1, 1 / 3),
    RankRow(2, 2 / 3, empty_ranks=(1,)),
    RankRow(3, 0.0),
    RankRow(4, 1 / 3, empty_ranks=(3,)),
    RankRow(1, 2 / 3),
    RankRow(2, 0.0, empty_ranks=(1,)),
    RankRow(3, 1 / 3),
    RankRow(4, 2 / 3, empty_ranks=(0, 1, 2, 3)),  # no target on any rank
]


def _explain(exc: BaseException) -> str | None:
    if isinstance(exc, MismatchedAllReduce):
        return "mismatched_all_reduce"
    if isinstance(exc, TypeError) and "all_reduce takes a tensor" in str(exc):
        return "all_reduce_needs_tensor"
    if "process group" in str(exc):
        return "uses_torch_distributed"
    return explain_ce(exc)


def _case(label: str, logits: list[torch.Tensor], labels: list[torch.Tensor]) -> Case:
    counts = [int((shift(lab, 1) != IGNORE_INDEX).sum()) for lab in labels]
    shapes = [tuple(lab.shape) for lab in labels]
    text = f"{label} ({len(labels)} ranks, labels of shapes {shapes}, {counts} targets after the "
    return Case(f"{text}shift)", (logits, labels))


def _hidden(label: str, lengths: list[list[int]], seed: int) -> Case:
    """Rank r holds sequences of ``lengths[r]`` tokens (of 8), the first with a 2-token prompt."""
    logits = [random_logits(seed + r, (len(ls), 8, 13)) for r, ls in enumerate(lengths)]
    labels = [clm_labels(seed + 100 + r, 13, ls, 8, {0: 2}) for r, ls in enumerate(lengths)]
    return _case(label, [lg.requires_grad_() for lg in logits], labels)


def _generated() -> list[Case]:
    """The cases of :data:`GENERATED`."""
    g = gen(73)
    out = []
    for i, row in enumerate(GENERATED):
        V = int(torch.randint(2, 12, (), generator=g))
        sizes = torch.randint(1, 5, (row.ranks, 2), generator=g) * torch.tensor(
            [1, 2]
        )  # (B_r, T_r)
        logits = [torch.randn(b, t, V, generator=g) * 1.5 for b, t in sizes.tolist()]
        labels = [torch.randint(V, lg.shape[:2], generator=g) for lg in logits]
        for r, lab in enumerate(labels):
            lab[torch.rand(lab.shape, generator=g) < row.ignored] = IGNORE_INDEX
            if r in row.empty_ranks:
                lab[:] = IGNORE_INDEX
        out.append(_case(f"generated case {i + 1}", [lg.requires_grad_() for lg in logits], labels))
    return out


# --------------------------------------------------------------------------- known mistakes
# Small wrong implementations, each with its mistake code, run as ranks like the learner's; a
# wrong average of the ranks' losses is named by the entry whose average it equals (a
# docstring's ``{W}``, ``{before}``, ``{shifted}``, ``{positions}``: the case's, over all ranks).

known = known_mistakes("rank_loss")


def _targets(labels: torch.Tensor) -> torch.Tensor:
    return F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]  # (B, T): labels[:, t + 1]


def _local_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    flat = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    return F.cross_entropy(flat, targets.reshape(-1), reduction="sum")


def _local_count(targets: torch.Tensor) -> torch.Tensor:
    return (targets != IGNORE_INDEX).sum()  # () a tensor, as all_reduce needs


@known("divides_by_local_count")
def averages_the_rank_means(logits, labels, *, all_reduce, world_size):
    """The mean of the ranks' own means."""
    targets = _targets(labels)
    count = _local_count(targets)
    mean = _local_sum(logits, targets) / count.clamp(min=1)
    all_reduce(count)  # called, as required, but the result is not used
    return mean  # (world_size * mean) / world_size: the mean of the ranks' means


@known("divides_by_local_count")
def own_count(logits, labels, *, all_reduce, world_size):
    """World_size * the mean of the ranks' own means."""
    targets = _targets(labels)  # never calls all_reduce
    return world_size * _local_sum(logits, targets) / _local_count(targets).clamp(min=1)


@known("missing_world_size")
def forgets_world_size(logits, labels, *, all_reduce, world_size):
    """The full-batch loss / world_size {W}."""
    targets = _targets(labels)
    return _local_sum(logits, targets) / all_reduce(_local_count(targets)).clamp(min=1)


@known("missing_world_size")
def divides_by_world_size(logits, labels, *, all_reduce, world_size):
    """The full-batch loss / world_size² {W2}."""
    targets = _targets(labels)
    total = all_reduce(_local_count(targets))
    return _local_sum(logits, targets) / (total.clamp(min=1) * world_size)  # / R instead of * R


@known("counts_before_shift")
def counts_before_the_shift(logits, labels, *, all_reduce, world_size):
    """The sum / the {before} labels not -100 before the shift."""
    total = all_reduce((labels != IGNORE_INDEX).sum())  # one target too many per row
    return world_size * _local_sum(logits, _targets(labels)) / total.clamp(min=1)


@known("counts_padding_positions")
def counts_every_position(logits, labels, *, all_reduce, world_size):
    """The sum / all {shifted} shifted positions."""
    batch, length = labels.shape
    total = all_reduce(torch.tensor(batch * (length - 1)))  # padding and prompt counted
    return world_size * _local_sum(logits, _targets(labels)) / total


@known("counts_padding_positions")
def counts_every_unshifted_position(logits, labels, *, all_reduce, world_size):
    """The sum / all {positions} positions."""
    total = all_reduce(torch.tensor(labels.numel()))  # padding and the last position counted
    return world_size * _local_sum(logits, _targets(labels)) / total


@known("not_shifted")
def never_shifts(logits, labels, *, all_reduce, world_size):
    """Position t scored against `labels[:, t]`."""
    total = all_reduce(_local_count(labels))
    return world_size * _local_sum(logits, labels) / total.clamp(min=1)


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
    found = known_outputs("rank_loss", case, _mean, ranks, **fields)
    return named(case, got, full, found, "the mean of the ranks' losses")


def _mean(losses: list[torch.Tensor]) -> float:
    return sum(float(loss.detach()) for loss in losses) / len(losses)


def _average_code(got: float, n: int, labels: list[torch.Tensor]) -> str:
    """The code of a wrong average of the ranks' losses (``n``: the targets of all ranks)."""
    if got != got and any(not (shift(lab, 1) != IGNORE_INDEX).any() for lab in labels):
        return "nan_when_no_targets"
    if n == 0:
        return "empty_not_zero"
    return "wrong_value"


def _run(run: Runner, case: Case) -> None:
    """The ranks' mean against the full-batch loss, then each rank's value and gradient."""
    out = run.call(case, via=ranks, explain=_explain)
    logits, labels = run.last[0]
    W = len(labels)
    n = sum(int((shift(lab, 1) != IGNORE_INDEX).sum()) for lab in labels)
    losses = [as_loss(Case(f"{case.label}, rank {r}"), o) for r, o in enumerate(out)]
    refs = []
    for lg, lab in zip(*case.args):
        leaf = lg.detach().clone().requires_grad_()
        loss = W * clm_loss(leaf, lab, num_items_in_batch=max(n, 1))  # rank r's share
        refs.append((float(loss.detach()), torch.autograd.grad(loss, leaf)[0]))
    for r, loss in enumerate(losses):  # a loss without graph trains nothing, whatever its value
        if loss.grad_fn is None:
            code = "empty_detached" if n == 0 else "detached"
            raise Mistake(code, f"On {case.label}, rank {r}'s loss has no graph to its logits.")
    got = sum(float(loss.detach()) for loss in losses) / W
    full = sum(v for v, _ in refs) / W
    if not close(got, full):
        code = _average_code(got, n, labels)
        detail = f"On {case.label}, the ranks' losses average to {got:.6g}; expected {full:.6g}."
        raise _diagnose(case, got, full) or Mistake(code, detail)
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
    two = _hidden("hidden case 1", [[3, 4], [8, 8]], 51)
    uneven = _hidden("hidden case 2", [[8], [1, 1], [5, 7, 6]], 61)
    cases = [
        replace(
            two,
            ok=(
                "2 ranks: the ranks' losses average to the full-batch loss",
                "each rank: world_size * its sum / the all-reduced count, with the full-batch "
                "gradient",
            ),
        ),
        replace(
            uneven,
            ok="3 uneven ranks, one without any target: every rank joins every `all_reduce`",
        ),
        _hidden("hidden case 3", [[2, 6], [8], [4, 4, 3], [7]], 71),
        _hidden("hidden case 4", [[5, 8, 3]], 81),
        *_generated(),
    ]
    for case in cases:
        _run(run, case)
        run.passed_case(case)
    run.ok("4 ranks, and 1 rank (the plain mean over targets)")
