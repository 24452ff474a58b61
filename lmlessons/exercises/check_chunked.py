"""Checker for the ``chunked_cross_entropy`` exercise: the loss of an output layer computed
``chunk_size`` rows at a time, never holding the ``(N, V)`` logits, in the forward pass *or* for
the backward pass.

Memory is checked twice. First the largest tensor of the forward pass: a ``TorchDispatchMode``
(:class:`LargestTensor`) sees each ATen operation's outputs and records the size of the storage
behind them (a view of a big tensor counts as the big tensor); no tensor may hold more than
``chunk_size * V`` values, the logits of one chunk. The hidden cases keep ``N * H`` and ``V * H``
below that, so hidden states, the weight and their gradients never trip it.

Then the peak of forward plus backward (:class:`lmlessons.course.memory.TensorPeak`: every
tensor created, from its creation until it is freed, exact on every machine), against the dense
loss ``F.cross_entropy(hidden @ weight.T, labels)`` measured the same way. Chunking alone does not
pass: plain autograd saves each chunk's log-softmax for the backward pass, so after the loop all
chunks' softmaxes, ``N * V`` values, are alive at once, about a third of the dense peak. Design
decision: the peak must stay under a quarter of the dense peak on 96 rows in 12 chunks, which a
loss that keeps nothing per chunk meets with a wide margin (about 1/10), in either of two ways: a
``torch.autograd.Function`` per chunk that saves its inputs only and recomputes the chunk's logits
in ``backward`` (the reference solution; ``torch.utils.checkpoint`` per chunk does the same, but
its first call imports ``torch._dynamo``, which takes seconds), or one that computes the gradients
chunk by chunk in the forward pass (:func:`lmlessons.linear_cross_entropy`). The memory check
comes last: a learner first makes the loss right, then small.

Hidden cases, in order: 1. 43 rows in chunks of 8 (the last one partial), 30% ignored: no tensor
larger than a chunk's logits, the value, the gradients for ``hidden`` and ``weight``; 2. a chunk
whose rows are all ignored; 3. every row ignored (0, not NaN); 4. ``chunk_size`` 1 and larger than
N; 5. ``num_items_in_batch`` as an int and a tensor; 6. 96 rows in chunks of 8: the peak of
forward plus backward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

from lmlessons._checks import IGNORE_INDEX
from lmlessons.course.memory import TensorPeak, WatchMode, tensor_peak_bytes
from lmlessons.exercises._cases import gen
from lmlessons.exercises._loss_checks import (
    LossCall,
    as_loss,
    check_empty,
    check_num_items,
    close,
    explain_ce,
)
from lmlessons.exercises._runner import Mistake, Runner

SIGNATURE = (
    "chunked_cross_entropy(hidden, weight, labels, *, chunk_size, num_items_in_batch=None) "
    "-> loss   # hidden (N, H), weight (V, H), labels (N,)"
)
N, H, V, CHUNK = 43, 4, 53, 8
PEAK_ROWS = 96  # hidden case 6: 12 chunks of CHUNK rows
PEAK_SHARE = 0.25  # forward + backward may peak at this share of the dense loss's peak


class LargestTensor(WatchMode):
    """Records the largest storage (in elements) behind any tensor an operation returns."""

    def __init__(self) -> None:
        super().__init__()
        self.numel: int = 0
        self.shape: tuple[int, ...] = ()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.element_size() > 0:
                n = t.untyped_storage().nbytes() // t.element_size()
                if n > self.numel:
                    self.numel, self.shape = n, tuple(t.shape)
        return out


class _ChunkedCall(LossCall):
    """A :class:`LossCall` that always passes this case's ``chunk_size``."""

    def __init__(self, run: Runner, chunk_size: int) -> None:
        super().__init__(run, ["hidden", "weight", "labels"])
        self.chunk_size = chunk_size

    def __call__(
        self, args: Sequence[torch.Tensor], case: str, **kwargs: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return super().__call__(args, case, chunk_size=self.chunk_size, **kwargs)


def reference(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """The full computation in float64: ``cross_entropy(hidden @ weight.T, labels)``."""
    total = F.cross_entropy(hidden.double() @ weight.double().T, labels, reduction="sum")
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


def _inputs(seed: int, ignored: float, rows: int = N) -> list[torch.Tensor]:
    g = gen(seed)
    hidden = torch.randn(rows, H, generator=g)  # (N, H)
    weight = torch.randn(V, H, generator=g)  # (V, H)
    labels = torch.randint(V, (rows,), generator=g)  # (N,)
    labels[torch.rand(rows, generator=g) < ignored] = IGNORE_INDEX
    labels[-2] = 7  # the last, partial chunk has a target
    return [hidden, weight, labels]


def _describe(args: list[torch.Tensor], chunk_size: int, label: str) -> str:
    labels = args[2]
    n = int((labels != IGNORE_INDEX).sum())
    return (
        f"{label} (hidden {tuple(args[0].shape)}, weight {tuple(args[1].shape)}, {n} of "
        f"{labels.numel()} labels not -100, chunk_size={chunk_size})"
    )


def _check_memory(sizes: LargestTensor, args: list[torch.Tensor], chunk: int, case: str) -> None:
    if sizes.numel <= chunk * V:
        return
    rows = int((args[2] != IGNORE_INDEX).sum())
    what = (
        f"On {case}, your function created a tensor of {sizes.numel:,} values (shape {sizes.shape})"
    )
    if sizes.numel >= rows * V:
        raise Mistake(
            "builds_full_logits",
            "builds the logits of every row at once",
            f"{what}: the logits of all {rows if sizes.numel < N * V else N} rows. That is "
            f"exactly what a chunked loss avoids (with V = 32,000 and 8,192 rows it is 1 GiB). "
            f"Compute `hidden[start:start + chunk_size] @ weight.T`, one ({chunk}, {V}) chunk at "
            "a time, inside the loop.",
        )
    raise Mistake(
        "chunk_too_large",
        "a chunk holds more rows than `chunk_size`",
        f"{what}, more than one chunk's logits ({chunk} x {V} = {chunk * V:,}). Slice "
        "`chunk_size` rows at a time: `for start in range(0, N, chunk_size)`.",
    )


def _chunk_stats(args: list[torch.Tensor], chunk: int) -> list[tuple[float, int, bool]]:
    """``(sum of CE, targets, is full)`` for each chunk of rows, in float64."""
    hidden, weight, labels = args
    out = []
    for start in range(0, N, chunk):
        y = labels[start : start + chunk]
        logits = hidden[start : start + chunk].double() @ weight.double().T
        s = float(F.cross_entropy(logits, y, reduction="sum")) if bool((y >= 0).any()) else 0.0
        out.append((s, int((y != IGNORE_INDEX).sum()), y.numel() == chunk))
    return out


def _diagnose(got: float, expected: float, args: list[torch.Tensor], chunk: int, case: str) -> None:
    stats = _chunk_stats(args, chunk)
    total, count = sum(s for s, _, _ in stats), sum(n for _, n, _ in stats)
    means = [s / n for s, n, _ in stats if n > 0]
    fewest, most = min(n for _, n, _ in stats if n), max(n for _, n, _ in stats)
    full_chunks = [(s, n) for s, n, full in stats if full]
    kept = sum(n for _, n in full_chunks)
    head = f"On {case}, your loss is {got:.4f}; expected {expected:.4f}"
    candidates = [
        (
            "averages_chunk_means",
            sum(means) / len(means),
            "averages the chunks' means",
            f"{head}, the mean over all {count} targets. {got:.4f} is the mean of the "
            f"{len(means)} chunks' means, which weighs a chunk with {fewest} target(s) like one "
            f"with {most}: the mean of means again. Add up each chunk's *sum* "
            '(`reduction="sum"`) and divide once, at the end.',
        ),
        (
            "drops_last_chunk",
            sum(s for s, _ in full_chunks) / max(kept, 1),
            "the last, partial chunk is dropped",
            f"{head}. Your loss leaves out the last {N % chunk} rows: {N} rows in chunks of "
            f"{chunk} end with a partial chunk. `range(0, N, chunk_size)` and slicing "
            "`[start:start + chunk_size]` cover it.",
        ),
        (
            "drops_last_chunk",
            sum(s for s, _ in full_chunks) / count,
            "the last, partial chunk is dropped",
            f"{head}. Your loss leaves out the last {N % chunk} rows (their sum is missing): use "
            "`range(0, N, chunk_size)` and slice `[start:start + chunk_size]`.",
        ),
        (
            "counts_ignored_tokens",
            total / N,
            "divides by every row, ignored ones included",
            f"{head} = (sum over the {count} targets) / {N} (all rows). Rows labelled -100 "
            "carry no loss and must not count in the denominator: divide by "
            "`(labels != -100).sum()`.",
        ),
        (
            "sum_not_mean",
            total,
            "returns the sum, not the mean",
            f"{head}: {got:.4f} is the sum over targets. Divide it by the number of targets "
            f"({count}) unless `num_items_in_batch` is given.",
        ),
    ]
    for code, value, title, why in candidates:
        if close(got, value) and not close(value, expected):
            raise Mistake(code, title, why)


def _check_grads(
    loss: torch.Tensor, leaves: list[torch.Tensor], args: list[torch.Tensor], case: str
) -> None:
    if not loss.requires_grad:
        raise Mistake(
            "detached",
            "the loss is not connected to `hidden` and `weight`",
            f"On {case}, the returned loss has no gradient, so `loss.backward()` cannot train "
            "anything. Did you call `.item()`, `.detach()` or `torch.tensor(...)` on the way?",
        )
    ref_leaves = [a.double().requires_grad_(True) for a in args[:2]]
    ref_grads = torch.autograd.grad(reference(ref_leaves[0], ref_leaves[1], args[2]), ref_leaves)
    grads = torch.autograd.grad(loss, leaves[:2], allow_unused=True)
    for name, grad, ref in zip(("hidden", "weight"), grads, ref_grads):
        grad = torch.zeros_like(ref) if grad is None else grad.double()
        if not torch.allclose(grad, ref, atol=1e-5, rtol=1e-4):
            raise Mistake(
                f"wrong_{name}_gradient",
                f"the gradient with respect to `{name}` is wrong",
                f"On {case}, the value is right but the gradient with respect to `{name}` is "
                f"not (largest difference {float((grad - ref).abs().max()):.2e}). Part of the "
                f"computation is detached: `{name}.detach()`, `.data`, or a chunk built "
                "outside autograd (`torch.no_grad()`, NumPy).",
            )


def _check_case(
    run: Runner, args: list[torch.Tensor], chunk: int, label: str, *, memory: bool = True
) -> _ChunkedCall:
    """One call: the largest tensor (if ``memory``), the value, then both gradients."""
    case = _describe(args, chunk, label)
    call = _ChunkedCall(run, chunk)
    with LargestTensor() as sizes:
        loss, leaves = call(args, case)
    if memory:
        _check_memory(sizes, args, chunk, case)
    got, expected = float(loss.detach()), float(reference(*args))
    if not math.isfinite(got):
        empty = [
            s // chunk
            for s in range(0, N, chunk)
            if not bool((args[2][s : s + chunk] != IGNORE_INDEX).any())
        ]
        if empty:
            raise Mistake(
                "nan_on_ignored_chunk",
                f"the loss is {got} when a chunk has no target",
                f"On {case}, your loss is {got}. Chunk {empty[0]} has no target (all its labels "
                'are -100): its mean (`F.cross_entropy(..., reduction="mean")`) is 0 / 0 = NaN, '
                'and one NaN poisons the whole sum. Use `reduction="sum"` per chunk (0 for an '
                "empty chunk) and divide once at the end.",
            )
        raise Mistake("wrong_value", f"the loss is {got}", f"On {case}, your loss is {got}.")
    if not close(got, expected):
        _diagnose(got, expected, args, chunk, case)
        raise Mistake(
            "wrong_value",
            "wrong loss value",
            f"On {case}, your loss is {got:.6f}; expected {expected:.6f}, the mean "
            "cross-entropy of `hidden @ weight.T` over the rows whose label is not -100.",
        )
    _check_grads(loss, leaves, args, case)
    return call


def _check_peak(run: Runner) -> None:
    """Hidden case 6: the peak of forward plus backward against the dense loss's."""
    args = _inputs(93, ignored=0.2, rows=PEAK_ROWS)
    case = _describe(args, CHUNK, "hidden case 6")
    h, w, labels = (a.clone().requires_grad_(a.is_floating_point()) for a in args)
    dense = tensor_peak_bytes(lambda: F.cross_entropy(h @ w.T, labels), [h, w, labels])
    leaves = [args[0].clone().requires_grad_(), args[1].clone().requires_grad_()]
    with TensorPeak([*leaves, labels]) as peak:
        out = run.call(*leaves, labels, case=case, explain=explain_ce, chunk_size=CHUNK)
        loss = as_loss(out, case)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    del grads
    if peak.peak_bytes <= PEAK_SHARE * dense:
        return
    chunks = -(-PEAK_ROWS // CHUNK)
    raise Mistake(
        "keeps_chunks_for_backward",
        "autograd keeps every chunk's softmax for the backward pass",
        f"On {case}, forward plus backward peaked at {peak.peak_bytes:,} bytes of new tensors, "
        f"{peak.peak_bytes / dense:.0%} of the dense loss's peak ({dense:,} bytes for "
        "`F.cross_entropy(hidden @ weight.T, labels)`, measured the same way). Each chunk's "
        f"logits are freed after its loss, but autograd saves the chunk's log-softmax ({CHUNK} x "
        f"{V}) for the backward pass: after the loop all {chunks} chunks' softmaxes, the whole "
        f"({PEAK_ROWS}, {V}), are alive at once. Keep nothing per chunk: write a "
        "`torch.autograd.Function` that saves only its inputs and recomputes the chunk's logits "
        "in `backward` (hint 3), or wrap each chunk's loss in "
        "`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`, which does the same.",
    )


def check_chunked_cross_entropy(run: Runner) -> None:
    """Run the hidden cases in order; the first failure raises its :class:`Mistake`."""
    args = _inputs(91, ignored=0.3)
    call = _check_case(run, args, CHUNK, "hidden case 1")
    run.ok(f"no tensor larger than one chunk's logits ({CHUNK} x {V}); never the (N, V) logits")
    run.ok("the mean over labels that are not -100, the last partial chunk included")
    run.ok("the gradients with respect to `hidden` and `weight` equal the full computation's")
    empty_chunk = _inputs(92, ignored=0.2)
    empty_chunk[2][CHUNK : 2 * CHUNK] = IGNORE_INDEX  # the second chunk has no target
    _check_case(run, empty_chunk, CHUNK, "hidden case 2 (rows 8..15 are all -100)")
    run.ok("a chunk without any target adds 0 (not NaN)")
    nothing = [args[0], args[1], torch.full_like(args[2], IGNORE_INDEX)]
    check_empty(
        run,
        call,
        nothing,
        _describe(nothing, CHUNK, "hidden case 3 (every label is -100)"),
        "nan_when_no_targets",
        "every label is -100",
    )
    for chunk in (1, 64):
        _check_case(run, args, chunk, f"hidden case 4 (chunk_size={chunk})", memory=False)
    run.ok("any `chunk_size`: 1 row per chunk, or one chunk for all rows")
    count = int((args[2] != IGNORE_INDEX).sum())
    total = float(reference(*args)) * count
    check_num_items(
        run, call, args, _describe(args, CHUNK, "hidden case 5"), total, count, 13, reference
    )
    _check_peak(run)
    run.ok(
        f"forward plus backward peak under {PEAK_SHARE:.0%} of the dense loss's: no chunk's "
        "softmax is kept for the backward pass"
    )
