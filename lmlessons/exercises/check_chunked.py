"""Checker for ``chunked_cross_entropy``, the output layer's loss ``chunk_size`` rows at a time,
in the runner's pattern (:mod:`._framework`): cases and diagnoses only.

Cases: 1. 43 rows in chunks of 8: no tensor above one chunk's logits or an input (:mod:`._memory`),
the value, the gradients; 2. a chunk without target; 3. none; 4. ``chunk_size`` 2, 1 and 64;
5. ``num_items_in_batch``; 6. 16 seeded cases; 7. the peak of forward plus backward on 96 rows:
plain autograd keeps every chunk's softmax (a third of the dense peak), a loss keeping nothing per
chunk a tenth; design decision: a quarter. A wrong value is compared with what the known mistakes
(the catalogue below, and ``mlm_loss``'s averaging mistakes) give on the same case.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.course.memory import tensor_peak_bytes
from lmlessons.exercises._cases import gen
from lmlessons.exercises._framework import Case, Catalogue, Mistake, Runner
from lmlessons.exercises._loss_checks import (
    LOSS_BATCHES,
    NUM_ITEMS_OK,
    as_loss,
    batches,
    check_loss,
    empty_ok,
    mlm_outputs,
    named,
    token_fields,
    with_num_items,
)
from lmlessons.exercises._memory import watch

SIGNATURE = (
    "chunked_cross_entropy(hidden, weight, labels, *, chunk_size, num_items_in_batch=None) "
    "-> loss   # hidden (N, H), weight (V, H), labels (N,)"
)
N = 43  # rows of hidden case 1
H = 4  # hidden size
V = 53  # vocabulary
CHUNK = 8  # chunk_size of hidden case 1
#: The catalogued mistakes of ``mlm_loss`` this loss can make too (:func:`.mlm_outputs`).
AVERAGING = {
    "per_row_mean",
    "sum_not_mean",
    "skips_target_zero",
    "nll_without_log_softmax",
    "class_dim",
}
PEAK_ROWS = 96  # rows of the memory case
PEAK_SHARE = 0.25  # forward + backward peak at most this share of the dense peak


def _case(label: str, seed: int, rows: int, chunk: int) -> Case:
    g = gen(seed)
    hidden = torch.randn(rows, H, generator=g).requires_grad_()  # (N, H)
    weight = torch.randn(V, H, generator=g).requires_grad_()  # (V, H)
    labels = torch.randint(V, (rows,), generator=g)  # (N,)
    labels[torch.rand(rows, generator=g) < 0.3] = IGNORE_INDEX
    labels[-2] = 7  # the last, partial chunk has a target
    labels[1] = 0  # id 0 is one too
    text = f"{label} (hidden {(rows, H)}, weight {(V, H)}, {int((labels >= 0).sum())} of {rows}"
    text += f" labels not -100, one of id 0, chunk_size={chunk})"
    return Case(text, (hidden, weight, labels), {"chunk_size": chunk})


def _hand_written() -> list[Case]:
    """Hidden cases 1 to 4: 43 rows in chunks of 8; a chunk of -100; every label -100; the
    rows of case 1 in chunks of 2, 1 and 64."""
    first = replace(
        _case("hidden case 1", 91, N, CHUNK),
        ok=(
            f"no tensor larger than one chunk's logits ({CHUNK} x {V}); never the (N, V) logits",
            "the mean over labels that are not -100, the last partial chunk included",
            "the gradients with respect to `hidden` and `weight` equal the full computation's",
        ),
    )
    hidden, weight, labels = first.args
    gap = torch.where(torch.arange(N) // CHUNK == 1, IGNORE_INDEX, labels)  # (N,) a chunk of -100
    rows = [  # (label, labels, chunk_size, what a pass verifies)
        ("2 (rows 8..15 are all -100)", gap, CHUNK, "a chunk without any target adds 0 (not NaN)"),
        (
            "3 (every label is -100)",
            torch.full_like(labels, IGNORE_INDEX),  # (N,)
            CHUNK,
            empty_ok("every label is -100"),
        ),
        ("4 (chunk_size=2)", labels, 2, ""),
        ("4 (chunk_size=1)", labels, 1, ""),
        (
            "4 (chunk_size=64)",
            labels,
            64,
            "any `chunk_size`: 1 row per chunk, or one chunk for all rows",
        ),
    ]
    return [first] + [
        Case(f"hidden case {label}", (hidden, weight, y), {"chunk_size": c}, ok=ok)
        for label, y, c, ok in rows
    ]


def _generated() -> list[Case]:
    """16 seeded cases: the labels of :data:`._loss_checks.LOSS_BATCHES`, flattened, random
    hidden states; a row's ``empty_first_row`` empties the first chunk."""
    g = gen(97)
    out = []
    for i, (row, (logits, labels)) in enumerate(zip(LOSS_BATCHES, batches(95, 16))):
        labels = labels.reshape(-1)  # (N,)
        rows = labels.numel()
        chunk = int(torch.randint(1, rows + 4, (), generator=g))
        if row.empty_first_row:
            labels[:chunk] = IGNORE_INDEX  # the first chunk without target
        kwargs = {"chunk_size": chunk}
        if row.num_items:
            kwargs["num_items_in_batch"] = int((labels != IGNORE_INDEX).sum()) + i
        hidden = torch.randn(rows, H, generator=g).requires_grad_()  # (N, H)
        weight = torch.randn(logits.shape[-1], H, generator=g).requires_grad_()  # (V, H)
        text = f"generated case {i + 1} (hidden {(rows, H)}, weight {tuple(weight.shape)}, "
        text += f"labels {labels.tolist()}{''.join(f', {k}={v}' for k, v in kwargs.items())})"
        out.append(Case(text, (hidden, weight, labels), kwargs))
    return out


# --------------------------------------------------------------------------- known mistakes
# Each works chunk by chunk under plain autograd; a docstring's numbers are the case's
# (:func:`._loss_checks.token_fields`).

known = Catalogue("chunked_cross_entropy")


def _loss(hidden: Any, weight: Any, labels: Any, chunk_size: int, n: Any, count: Any = None) -> Any:
    """The summed cross-entropy, chunk by chunk, / ``n``; else / ``count`` (default: the
    targets), at least 1."""
    parts = zip(hidden.split(chunk_size), labels.split(chunk_size))
    total = sum(
        (F.cross_entropy(h @ weight.T, y, reduction="sum") for h, y in parts), hidden.new_zeros(())
    )
    count = int((labels != IGNORE_INDEX).sum()) if count is None else count
    return total / n if n is not None else total / max(count, 1)


@known("averages_chunk_means")
def mean_of_chunk_means(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """The mean of the chunks' means."""
    parts = zip(hidden.split(chunk_size), labels.split(chunk_size))
    means = [_loss(h, weight, y, chunk_size, None) for h, y in parts if (y != IGNORE_INDEX).any()]
    if num_items_in_batch is not None or not means:
        return _loss(hidden, weight, labels, chunk_size, num_items_in_batch)
    return torch.stack(means).mean()


@known("drops_last_chunk")
def full_chunks_only(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """The mean over the full chunks only."""
    full = labels.shape[0] // chunk_size * chunk_size  # the last, shorter chunk is lost
    return _loss(hidden[:full], weight, labels[:full], chunk_size, num_items_in_batch)


@known("drops_last_chunk")
def full_chunks_over_every_target(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """The full chunks' sum / all targets."""
    full = labels.shape[0] // chunk_size * chunk_size
    count = int((labels != IGNORE_INDEX).sum())
    return _loss(hidden[:full], weight, labels[:full], chunk_size, num_items_in_batch, count)


@known("counts_padding_positions")
def divides_by_every_row(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """The sum / all {positions} rows."""
    return _loss(hidden, weight, labels, chunk_size, num_items_in_batch, labels.shape[0])


@known("ignores_num_items_in_batch")
def ignores_num_items(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """The mean over this batch's {count} targets."""
    return _loss(hidden, weight, labels, chunk_size, None)


@known("num_items_divides_mean")
def num_items_divides_the_mean(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """That mean ({mean:.4f}) divided by {n}."""
    mean = _loss(hidden, weight, labels, chunk_size, None)
    return mean if num_items_in_batch is None else mean / num_items_in_batch


def _diagnose(case: Case, got: float, expected: float) -> Mistake | None:
    """``nan_on_ignored_chunk``, or the known mistake ``got`` equals."""
    hidden, weight, labels = (a.detach() for a in case.args)
    keep = (labels != IGNORE_INDEX).split(case.kwargs["chunk_size"])
    if not math.isfinite(got) and any(k.any() for k in keep) and not all(k.any() for k in keep):
        return Mistake("nan_on_ignored_chunk", f"On {case.label}, the loss is {got}.")
    n = case.kwargs.get("num_items_in_batch")
    n = None if n is None else int(n)
    logits = (hidden @ weight.T).unsqueeze(0)  # (1, N, V)
    fields = token_fields(logits, labels[None], 0, n)
    candidates = known.outputs(case, float, **fields)
    return named(case, got, expected, candidates + mlm_outputs(logits, labels[None], AVERAGING, n))


def _memory(run: Runner, case: Case, *, backward: bool = False) -> int:
    """No tensor larger than one chunk's logits (or an input): the logits of all rows are
    ``builds_full_logits``, more rows ``chunk_too_large``. Returns the peak bytes."""
    via, seen = watch(backward)
    as_loss(case, run.call(case, via=via))
    rows, hidden_size = case.args[0].shape
    chunk = case.kwargs["chunk_size"]
    what = f"On {case.label}, your function made a tensor of {seen.numel:,} values {seen.shape}"
    what += " in the forward or backward pass" if backward else ""
    if seen.numel >= rows * V and chunk < rows:
        raise Mistake("builds_full_logits", f"{what}: the logits of all {rows} rows.")
    if seen.numel > max(chunk * V, rows * hidden_size, V * hidden_size):
        raise Mistake("chunk_too_large", f"{what}, more than one chunk's logits ({chunk} x {V}).")
    return seen.peak


def _peak(run: Runner) -> None:
    """Forward plus backward on 96 rows peaks under a quarter of the dense loss's peak."""
    case = _case("the memory case", 93, PEAK_ROWS, CHUNK)
    h = case.args[0].detach().requires_grad_()
    w = case.args[1].detach().requires_grad_()
    labels = case.args[2]
    dense = tensor_peak_bytes(lambda: F.cross_entropy(h @ w.T, labels), [h, w, labels])
    peak = _memory(run, case, backward=True)
    what = f"{peak:,} bytes, {peak / dense:.0%} of the dense loss's {dense:,}"
    if peak > PEAK_SHARE * dense:
        raise Mistake("keeps_chunks_for_backward", f"On {case.label}, the peak was {what}.")


def _empty(case: Case) -> bool:
    """Every label of ``case`` is -100: nothing to predict."""
    return not bool((case.args[2] != IGNORE_INDEX).any())


def check_chunked_cross_entropy(run: Runner) -> None:
    hand_written = _hand_written()
    for case in hand_written:  # no tensor above one chunk's logits, then the value
        _memory(run, case)
        check_loss(run, case, empty=_empty(case), diagnose=_diagnose)
        run.passed_case(case)
    first = hand_written[0]
    for case in with_num_items(first, int((first.args[2] != IGNORE_INDEX).sum())):
        check_loss(run, case, diagnose=_diagnose)
    for case in _generated():
        check_loss(run, case, empty=_empty(case), diagnose=_diagnose)
    run.ok(NUM_ITEMS_OK)
    _peak(run)
    run.ok(
        f"forward plus backward peak under {PEAK_SHARE:.0%} of the dense loss's: no chunk's "
        "softmax is kept for the backward pass"
    )
