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

from lmlessons._checks import IGNORE_INDEX
from lmlessons.exercises._cases import clm_labels, gen, random_logits
from lmlessons.exercises._framework import Case, Mistake, Runner, close, first_difference
from lmlessons.exercises._loss_checks import as_loss, explain_ce, named, shift, token_ce
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


def _diagnose(case: Case, got: float, full: float) -> Mistake | None:
    logits = [t.detach() for t in case.args[0]]
    labels = case.args[1]
    W = len(labels)
    targets = [shift(lab, 1) for lab in labels]
    sums = [float(token_ce(lg, t).sum()) for lg, t in zip(logits, targets)]
    counts = [int((t != IGNORE_INDEX).sum()) for t in targets]
    local = [s / max(c, 1) for s, c in zip(sums, counts)]
    S = sum(sums)
    before = sum(int((lab != IGNORE_INDEX).sum()) for lab in labels)
    shifted = sum(lab.shape[0] * (lab.shape[1] - 1) for lab in labels)
    rows = sum(lab.shape[0] for lab in labels)
    unshifted = sum(float(token_ce(lg, lab).sum()) for lg, lab in zip(logits, labels))
    known = [
        ("divides_by_local_count", "the mean of the ranks' own means", sum(local) / W),
        ("divides_by_local_count", "world_size * the mean of the ranks' own means", sum(local)),
        ("missing_world_size", f"the full-batch loss / world_size {W}", full / W),
        ("missing_world_size", f"the full-batch loss / world_size² {W * W}", full / W**2),
        (
            "counts_before_shift",
            f"the sum / the {before} labels not -100 before the shift",
            S / max(before, 1),
        ),
        (
            "counts_padding_positions",
            f"the sum / all {shifted} shifted positions",
            S / max(shifted, 1),
        ),
        (
            "counts_padding_positions",
            f"the sum / all {shifted + rows} positions",
            S / (shifted + rows),
        ),
        ("not_shifted", "position t scored against `labels[:, t]`", unshifted / max(before, 1)),
    ]
    return named(case, got, full, known, "the mean of the ranks' losses")


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
