"""Battery for ``chunked_cross_entropy`` (lesson 07): the output layer's loss, chunk by chunk.

The statement a learner sees: ``hidden`` ``(N, H)``, ``weight`` ``(V, H)``, ``labels`` ``(N,)``
(-100 where no loss is taken, already shifted); the mean cross-entropy of ``hidden @ weight.T``
over the labels that are not -100, without ever building the ``(N, V)`` logits: loop over
``chunk_size`` rows at a time (the last chunk may be shorter); every target token weighs the same
(a chunk may have no target); with ``num_items_in_batch`` the sum divided by it; keep nothing of
a chunk for the backward pass (a ``torch.autograd.Function`` that recomputes the chunk's logits in
``backward``, ``torch.utils.checkpoint``, or gradients computed in the forward pass).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import correct, wrong

IGNORE = -100


def _softmax_minus_one_hot(logits, y):
    """d(sum of CE)/d logits: softmax - one_hot(y), 0 on rows labelled -100. ``logits`` (C, V)."""
    grad = logits.softmax(-1)  # (C, V)
    keep = y != IGNORE  # (C,)
    rows = keep.nonzero().squeeze(1)
    grad[rows, y[rows]] -= 1.0
    grad[~keep] = 0.0
    return grad


class _ChunkSum(torch.autograd.Function):
    """Summed cross-entropy of one chunk; saves its inputs only, recomputes logits in backward."""

    @staticmethod
    def forward(ctx, h, weight, y):  # (C, H), (V, H), (C,)
        ctx.save_for_backward(h, weight, y)
        return F.cross_entropy(h @ weight.T, y, ignore_index=IGNORE, reduction="sum")

    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y = ctx.saved_tensors
        grad_logits = _softmax_minus_one_hot(h @ weight.T, y) * grad_output  # (C, V)
        return grad_logits @ weight, grad_logits.T @ h, None


def _chunk_sums(hidden, weight, labels, chunk_size, chunk=_ChunkSum):
    """The recomputing chunk sums, one per chunk of ``chunk_size`` rows."""
    return [
        chunk.apply(hidden[s : s + chunk_size], weight, labels[s : s + chunk_size])
        for s in range(0, hidden.shape[0], chunk_size)
    ]


def _divide(total, labels, num_items_in_batch):
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / max(int((labels != IGNORE).sum()), 1)


# ---------------------------------------------------------------- wrong attempts


@wrong("builds_full_logits")
def dense_logits(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """One F.cross_entropy on hidden @ weight.T: the whole (N, V) logits."""
    total = F.cross_entropy(hidden @ weight.T, labels, reduction="sum")  # (N, V) at once
    return _divide(total, labels, num_items_in_batch)


@wrong("keeps_chunks_for_backward")
def plain_autograd_loop(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Chunk loop under plain autograd: every chunk's softmax is kept for the backward pass."""
    total = hidden.new_zeros(())
    for s in range(0, hidden.shape[0], chunk_size):  # autograd keeps each chunk's softmax
        total = total + F.cross_entropy(
            hidden[s : s + chunk_size] @ weight.T, labels[s : s + chunk_size], reduction="sum"
        )
    return _divide(total, labels, num_items_in_batch)


class _ChunkMean(_ChunkSum):
    @staticmethod
    def forward(ctx, h, weight, y):
        ctx.save_for_backward(h, weight, y)
        n = max(int((y != IGNORE).sum()), 1)
        return F.cross_entropy(h @ weight.T, y, reduction="sum") / n

    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y = ctx.saved_tensors
        n = max(int((y != IGNORE).sum()), 1)
        grad_logits = _softmax_minus_one_hot(h @ weight.T, y) * grad_output / n
        return grad_logits @ weight, grad_logits.T @ h, None


@wrong("averages_chunk_means")
def mean_of_chunk_means(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Averages the chunks' means: tokens of sparse chunks weigh more."""
    means = _chunk_sums(hidden, weight, labels, chunk_size, chunk=_ChunkMean)
    return torch.stack(means).mean()  # a chunk with 1 target weighs as much as one with 50


@wrong("drops_last_chunk")
def drops_the_short_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Loops over N // chunk_size full chunks only: the last, shorter chunk is lost."""
    n_full = hidden.shape[0] // chunk_size * chunk_size  # the last, shorter chunk is lost
    parts = _chunk_sums(hidden[:n_full], weight, labels[:n_full], chunk_size)
    total = torch.stack(parts).sum() if parts else hidden.sum() * 0.0
    return _divide(total, labels, num_items_in_batch)


class _ChunkMeanTimesCount(_ChunkSum):
    @staticmethod
    def forward(ctx, h, weight, y):
        ctx.save_for_backward(h, weight, y)
        mean = F.cross_entropy(h @ weight.T, y)  # NaN for a chunk without a target
        return mean * (y != IGNORE).sum()


@wrong("nan_on_ignored_chunk")
def sum_as_mean_times_count(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Each chunk's sum as mean * count: NaN for a chunk without a target."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, chunk_size, _ChunkMeanTimesCount)).sum()
    return _divide(total, labels, num_items_in_batch)


@wrong("nan_when_no_targets")
def unguarded_count(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Divides by the target count without a guard: NaN when every label is -100."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, chunk_size)).sum()
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != IGNORE).sum()  # 0 / 0 when every label is -100


@wrong("ignores_num_items_in_batch")
def ignores_num_items(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Always the mean; num_items_in_batch never used."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, chunk_size)).sum()
    return _divide(total, labels, None)


@wrong("chunk_too_large")
def torch_chunk_count(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    # torch.chunk's second argument is the number of chunks, not the rows per chunk
    """hidden.chunk(chunk_size) makes chunk_size chunks of N / chunk_size rows, not chunks of
    chunk_size rows."""
    parts = [
        _ChunkSum.apply(h, weight, y)
        for h, y in zip(hidden.chunk(chunk_size), labels.chunk(chunk_size))
    ]
    return _divide(torch.stack(parts).sum(), labels, num_items_in_batch)


@wrong("builds_full_logits")
def fixed_chunk_size(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Ignores chunk_size and always uses 1024 rows."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, 1024)).sum()  # chunk_size unused
    return _divide(total, labels, num_items_in_batch)


class _ClampedTargets(_ChunkSum):
    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y = ctx.saved_tensors
        grad_logits = (h @ weight.T).softmax(-1)  # (C, V)
        grad_logits[torch.arange(y.shape[0]), y.clamp(min=0)] -= 1.0  # -100 rows get class 0
        grad_logits = grad_logits * grad_output
        return grad_logits @ weight, grad_logits.T @ h, None


@wrong("wrong_gradient")
def ignored_rows_get_gradient(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Right value, but backward scores rows labelled -100 as class 0, so they get a gradient."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, chunk_size, _ClampedTargets)).sum()
    return _divide(total, labels, num_items_in_batch)


class _NoGradOutput(_ChunkSum):
    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y = ctx.saved_tensors
        grad_logits = _softmax_minus_one_hot(h @ weight.T, y)  # grad_output forgotten
        return grad_logits @ weight, grad_logits.T @ h, None


@wrong("wrong_gradient")
def forgets_grad_output(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Backward ignores grad_output: the division by the count never reaches the gradients."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, chunk_size, _NoGradOutput)).sum()
    return _divide(total, labels, num_items_in_batch)  # the 1/count never reaches the gradients


@wrong("detached")
def under_no_grad(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Computes the loss under torch.no_grad(): the right number, no gradient."""
    with torch.no_grad():  # "no graph, no memory"
        total = sum(
            F.cross_entropy(
                hidden[s : s + chunk_size] @ weight.T, labels[s : s + chunk_size], reduction="sum"
            )
            for s in range(0, hidden.shape[0], chunk_size)
        )
    return _divide(total, labels, num_items_in_batch)


@wrong("counts_padding_positions")
def divides_by_every_row(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Divides by N, every row, instead of the target count."""
    total = torch.stack(_chunk_sums(hidden, weight, labels, chunk_size)).sum()
    return total / labels.shape[0] if num_items_in_batch is None else total / num_items_in_batch


@wrong("num_items_divides_mean")
def num_items_divides_the_mean(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """With num_items_in_batch divides the *mean* by it."""
    mean = _divide(torch.stack(_chunk_sums(hidden, weight, labels, chunk_size)).sum(), labels, None)
    return mean if num_items_in_batch is None else mean / num_items_in_batch


class _DenseBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size):
        ctx.save_for_backward(hidden, weight, labels)
        return sum(
            F.cross_entropy(
                hidden[s : s + chunk_size] @ weight.T, labels[s : s + chunk_size], reduction="sum"
            )
            for s in range(0, hidden.shape[0], chunk_size)
        )

    @staticmethod
    def backward(ctx, grad_output):
        hidden, weight, labels = ctx.saved_tensors
        grad_logits = _softmax_minus_one_hot(hidden @ weight.T, labels) * grad_output  # (N, V)
        return grad_logits @ weight, grad_logits.T @ hidden, None, None


@wrong("builds_full_logits")
def chunked_forward_dense_backward(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Chunked forward, but backward recomputes the whole (N, V) logits at once."""
    return _divide(
        _DenseBackward.apply(hidden, weight, labels, chunk_size), labels, num_items_in_batch
    )


@wrong("not_a_tensor")
def python_zero_when_empty(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Skips chunks without targets and sums a Python list: every label -100 gives the float 0.0,
    not a tensor."""
    parts = []
    for s in range(0, hidden.shape[0], chunk_size):
        y = labels[s : s + chunk_size]
        if bool((y != IGNORE).any()):  # skip chunks without targets
            parts.append(_ChunkSum.apply(hidden[s : s + chunk_size], weight, y))
    return _divide(sum(parts), labels, num_items_in_batch)  # sum([]) is the int 0


@wrong(says="chunk_size=8), the loss is 5.03572; expected 5.71753")
def skips_a_row_per_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Slices [s, s + chunk_size - 1): the last row of every chunk is skipped."""
    parts = [
        _ChunkSum.apply(hidden[s : s + chunk_size - 1], weight, labels[s : s + chunk_size - 1])
        for s in range(0, hidden.shape[0], chunk_size)
    ]  # end is off by one
    return _divide(torch.stack(parts).sum(), labels, num_items_in_batch)


@wrong("modifies_input")
def clamps_labels_in_place(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Right value and gradients, but clamps the caller's labels in place (-100 becomes 0)."""
    count = int((labels != IGNORE).sum())
    weights = (labels != IGNORE).to(hidden.dtype)  # (N,)
    labels.clamp_(min=0)  # in place, "so gather works"; -100 rows are zeroed by the weights
    total = hidden.new_zeros(())
    for s in range(0, hidden.shape[0], chunk_size):
        total = total + _WeightedChunk.apply(
            hidden[s : s + chunk_size],
            weight,
            labels[s : s + chunk_size],
            weights[s : s + chunk_size],
        )
    return total / (num_items_in_batch if num_items_in_batch is not None else max(count, 1))


class _WeightedChunk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, y, w):  # y has no -100: w is 0 on the ignored rows
        ctx.save_for_backward(h, weight, y, w)
        return (F.cross_entropy(h @ weight.T, y, reduction="none") * w).sum()

    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y, w = ctx.saved_tensors
        grad_logits = (h @ weight.T).softmax(-1)
        grad_logits[torch.arange(y.shape[0]), y] -= 1.0
        grad_logits = grad_logits * (w * grad_output).unsqueeze(1)
        return grad_logits @ weight, grad_logits.T @ h, None, None


# ---------------------------------------------------------------- correct attempts


@correct
def recompute_in_backward(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """An autograd.Function per chunk that recomputes in backward."""
    return _divide(
        torch.stack(_chunk_sums(hidden, weight, labels, chunk_size)).sum(),
        labels,
        num_items_in_batch,
    )


class _GradientsInForward(torch.autograd.Function):
    """Liger Kernel's idea: each chunk's gradient is computed in the forward pass and kept."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size, divisor):
        grad_hidden, grad_weight = torch.zeros_like(hidden), torch.zeros_like(weight)
        total = hidden.new_zeros(())
        for s in range(0, hidden.shape[0], chunk_size):
            h, y = hidden[s : s + chunk_size], labels[s : s + chunk_size]
            logits = h @ weight.T  # (C, V)
            total += F.cross_entropy(logits, y, ignore_index=IGNORE, reduction="sum")
            grad_logits = _softmax_minus_one_hot(logits, y) / divisor
            grad_hidden[s : s + chunk_size] = grad_logits @ weight
            grad_weight += grad_logits.T @ h
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total / divisor

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_output, grad_weight * grad_output, None, None, None


@correct
def gradients_in_forward(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """One autograd.Function, gradients computed in forward."""
    count = max(int((labels != IGNORE).sum()), 1)
    divisor = float(num_items_in_batch) if num_items_in_batch is not None else float(count)
    return _GradientsInForward.apply(hidden, weight, labels, chunk_size, divisor)


class _LogSumExpChunk(torch.autograd.Function):
    """Only the target rows, by logsumexp minus the target logit; backward recomputes."""

    @staticmethod
    def forward(ctx, h, weight, y):  # y has no -100 here
        ctx.save_for_backward(h, weight, y)
        logits = h @ weight.T  # (C, V)
        return (torch.logsumexp(logits, -1) - logits.gather(1, y.unsqueeze(1)).squeeze(1)).sum()

    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y = ctx.saved_tensors
        grad_logits = (h @ weight.T).softmax(-1)  # (C, V)
        grad_logits[torch.arange(y.shape[0]), y] -= 1.0
        grad_logits *= grad_output
        return grad_logits @ weight, grad_logits.T @ h, None


@correct
def target_rows_first(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Target rows gathered first, logsumexp chunks, recompute."""
    rows = (labels != IGNORE).nonzero().squeeze(1)  # (M,) BERT's gather_indexes
    h, y = hidden.index_select(0, rows), labels.index_select(0, rows)  # (M, H), (M,)
    total = hidden.sum() * 0.0
    for s in range(0, rows.shape[0], chunk_size):
        total = total + _LogSumExpChunk.apply(h[s : s + chunk_size], weight, y[s : s + chunk_size])
    return total / (num_items_in_batch if num_items_in_batch is not None else max(len(rows), 1))


# -------------------------------------------------- first drafts and other naive versions


@wrong("builds_full_logits")
def draft_as_written(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """A first draft: the full logits and the plain mean."""
    return F.cross_entropy(hidden @ weight.T, labels)


def _plain_chunk_sum(hidden, weight, labels, chunk_size):
    """The summed cross-entropy, chunk by chunk, under plain autograd."""
    total = hidden.new_zeros(())
    for s in range(0, hidden.shape[0], chunk_size):
        chunk = slice(s, s + chunk_size)
        total = total + F.cross_entropy(hidden[chunk] @ weight.T, labels[chunk], reduction="sum")
    return total


@wrong("chunk_too_large")
def hard_coded_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """A hard-coded chunk of 16 rows, whatever chunk_size says."""
    return _divide(_plain_chunk_sum(hidden, weight, labels, 16), labels, num_items_in_batch)


@wrong("wrong_gradient")
def detaches_the_weight(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Chunks with weight.detach() ('it is a parameter, not an activation'): no gradient for it."""
    total = _plain_chunk_sum(hidden, weight.detach(), labels, chunk_size)
    return _divide(total, labels, num_items_in_batch)


# ---------------------------------------------------------------- delegating to the course


@wrong("delegates_to_course", says="lmlessons.linear_ce.linear_cross_entropy")
def the_course_linear_cross_entropy(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Calls the course's own chunked loss: nothing written."""
    import lmlessons

    return lmlessons.linear_cross_entropy(
        hidden, weight, labels, chunk_size=chunk_size, num_items_in_batch=num_items_in_batch
    )


@wrong("delegates_to_course", says="reference solution")
def the_reference_solution(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Calls the reference solution that ships in the package."""
    from lmlessons.exercises.solutions import chunked_cross_entropy

    return chunked_cross_entropy(
        hidden, weight, labels, chunk_size=chunk_size, num_items_in_batch=num_items_in_batch
    )
