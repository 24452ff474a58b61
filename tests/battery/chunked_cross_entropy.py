"""Battery for ``chunked_cross_entropy`` (lesson 07): the output layer's loss, chunk by chunk.

The statement a learner sees: ``hidden`` ``(N, H)``, ``weight`` ``(V, H)``, ``labels`` ``(N,)``
(-100 where no loss is taken, already shifted); the mean cross-entropy of ``hidden @ weight.T``
over the labels that are not -100, without ever building the ``(N, V)`` logits: loop over
``chunk_size`` rows at a time (the last chunk may be shorter); every target token weighs the same
(a chunk may have no target); with ``num_items_in_batch`` the sum divided by it; keep nothing of
a chunk for the backward pass (a ``torch.autograd.Function`` that recomputes the chunk's logits in
``backward``, ``torch.utils.checkpoint``, or gradients computed in the forward pass).

The value mistakes are the checker's catalogue (``known`` in ``check_chunked.py``), the
structural ones ``battery/_structural.py``'s; here: memory, gradients, NaN and other ways in.
Every attempt takes ``(hidden, weight, labels, *, chunk_size, num_items_in_batch=None)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from battery._attempt import correct, wrong

IGNORE = -100


def _softmax_minus_one_hot(logits, y, bug=None):
    """d(sum of CE)/d logits: softmax - one_hot(y), 0 on rows labelled -100. ``logits`` (C, V).
    ``bug="clamp"``: rows labelled -100 are scored as class 0 instead."""
    grad = logits.softmax(-1)  # (C, V)
    keep = y != IGNORE  # (C,)
    rows = torch.arange(y.shape[0]) if bug == "clamp" else keep.nonzero().squeeze(1)
    grad[rows, y[rows].clamp(min=0)] -= 1.0
    if bug != "clamp":
        grad[~keep] = 0.0
    return grad


class _Recompute(torch.autograd.Function):
    """Summed cross-entropy of the rows ``h``: saves its inputs only; forward takes ``rows`` at a
    time (None: all), backward recomputes the logits of all of ``h`` at once. ``bug``: "clamp"
    (see :func:`_softmax_minus_one_hot`) or "no_grad_output" (backward forgets it)."""

    @staticmethod
    def forward(ctx, h, weight, y, rows=None, bug=None):  # (C, H), (V, H), (C,)
        ctx.save_for_backward(h, weight, y)
        ctx.bug = bug
        rows = rows or max(h.shape[0], 1)
        parts = zip(h.split(rows), y.split(rows))
        return sum(
            (F.cross_entropy(a @ weight.T, b, reduction="sum") for a, b in parts), h.new_zeros(())
        )

    @staticmethod
    def backward(ctx, grad_output):
        h, weight, y = ctx.saved_tensors
        grad = _softmax_minus_one_hot(h @ weight.T, y, ctx.bug)  # (C, V)
        grad = grad if ctx.bug == "no_grad_output" else grad * grad_output
        return grad @ weight, grad.T @ h, None, None, None


def _divide(total, labels, num_items_in_batch):
    """``total`` / ``num_items_in_batch``, else / the targets (at least 1)."""
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / max(int((labels != IGNORE).sum()), 1)


def _total(hidden, weight, labels, chunk_size, bug=None):
    """The summed cross-entropy, right but for ``bug``: a :class:`_Recompute` per chunk."""
    parts = zip(hidden.split(chunk_size), labels.split(chunk_size))
    return torch.stack([_Recompute.apply(h, weight, y, None, bug) for h, y in parts]).sum()


def _chunked(hidden, weight, labels, chunk_size, num_items_in_batch=None, bug=None):
    """The loss, right but for ``bug``: :func:`_total` divided once, at the end."""
    return _divide(_total(hidden, weight, labels, chunk_size, bug), labels, num_items_in_batch)


def _plain(hidden, weight, labels, chunk_size, num_items_in_batch=None):
    """The loss chunk by chunk under plain autograd, which keeps every chunk's softmax."""
    total = sum(
        F.cross_entropy(h @ weight.T, y, reduction="sum")
        for h, y in zip(hidden.split(chunk_size), labels.split(chunk_size))
    )
    return _divide(total, labels, num_items_in_batch)


# ---------------------------------------------------------------- wrong attempts: memory


@wrong("builds_full_logits")
def dense_logits(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """One F.cross_entropy on hidden @ weight.T: the whole (N, V) logits."""
    total = F.cross_entropy(hidden @ weight.T, labels, reduction="sum")  # (N, V) at once
    return _divide(total, labels, num_items_in_batch)


@wrong("builds_full_logits")
def chunked_forward_dense_backward(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Chunked forward, but backward recomputes the whole (N, V) logits at once."""
    total = _Recompute.apply(hidden, weight, labels, chunk_size)
    return _divide(total, labels, num_items_in_batch)


@wrong("keeps_chunks_for_backward")
def plain_autograd_loop(hidden, weight, labels, **kwargs):
    """Chunk loop under plain autograd: every chunk's softmax is kept for the backward pass."""
    return _plain(hidden, weight, labels, **kwargs)


@wrong("chunk_too_large")
def torch_chunk_count(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """hidden.chunk(chunk_size) makes chunk_size chunks of N / chunk_size rows, not chunks of
    chunk_size rows."""
    parts = zip(hidden.chunk(chunk_size), labels.chunk(chunk_size))  # the number of chunks
    total = torch.stack([_Recompute.apply(h, weight, y) for h, y in parts]).sum()
    return _divide(total, labels, num_items_in_batch)


@wrong("chunk_too_large")
def hard_coded_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """A hard-coded chunk of 16 rows, whatever chunk_size says."""
    return _plain(hidden, weight, labels, 16, num_items_in_batch)


# ---------------------------------------------------------------- wrong attempts: gradients


@wrong("wrong_gradient")
def ignored_rows_get_gradient(hidden, weight, labels, **kwargs):
    """Right value, but backward scores rows labelled -100 as class 0, so they get a gradient."""
    return _chunked(hidden, weight, labels, bug="clamp", **kwargs)


@wrong("wrong_gradient")
def forgets_grad_output(hidden, weight, labels, **kwargs):
    """Backward ignores grad_output: the division by the count never reaches the gradients."""
    return _chunked(hidden, weight, labels, bug="no_grad_output", **kwargs)


@wrong("wrong_gradient")
def detaches_the_weight(hidden, weight, labels, **kwargs):
    """Chunks with weight.detach() ('it is a parameter, not an activation'): no gradient for it."""
    return _plain(hidden, weight.detach(), labels, **kwargs)


# ---------------------------------------------------------------- wrong attempts: values


@wrong("nan_on_ignored_chunk")
def sum_as_mean_times_count(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Each chunk's sum as mean * count: NaN for a chunk without a target."""
    parts = zip(hidden.split(chunk_size), labels.split(chunk_size))
    total = sum(F.cross_entropy(h @ weight.T, y) * (y != IGNORE).sum() for h, y in parts)
    return _divide(total, labels, num_items_in_batch)


@wrong("nan_when_no_targets")
def unguarded_count(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Divides by the target count without a guard: NaN when every label is -100."""
    total = _total(hidden, weight, labels, chunk_size)
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != IGNORE).sum()  # 0 / 0 when every label is -100


@wrong("not_a_tensor")
def python_zero_when_empty(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Skips chunks without targets and sums a Python list: every label -100 gives the float 0.0,
    not a tensor."""
    parts = zip(hidden.split(chunk_size), labels.split(chunk_size))
    kept = [_Recompute.apply(h, weight, y) for h, y in parts if bool((y != IGNORE).any())]
    return _divide(sum(kept), labels, num_items_in_batch)  # sum([]) is the int 0


@wrong(says="chunk_size=8), the loss is 5.03572; expected 5.71753")
def skips_a_row_per_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Slices [s, s + chunk_size - 1): the last row of every chunk is skipped."""
    parts = [
        _Recompute.apply(hidden[s : s + chunk_size - 1], weight, labels[s : s + chunk_size - 1])
        for s in range(0, hidden.shape[0], chunk_size)
    ]  # end is off by one
    return _divide(torch.stack(parts).sum(), labels, num_items_in_batch)


@wrong("delegates_to_course", says="lmlessons.linear_ce.linear_cross_entropy")
def the_course_linear_cross_entropy(hidden, weight, labels, **kwargs):
    """Calls the course's own chunked loss: nothing written."""
    import lmlessons

    return lmlessons.linear_cross_entropy(hidden, weight, labels, **kwargs)


# ---------------------------------------------------------------- correct attempts


@correct
def recompute_in_backward(hidden, weight, labels, **kwargs):
    """An autograd.Function per chunk that recomputes in backward."""
    return _chunked(hidden, weight, labels, **kwargs)


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


@correct
def target_rows_first(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Target rows gathered first (BERT's gather_indexes), then chunks of them that recompute."""
    rows = (labels != IGNORE).nonzero().squeeze(1)  # (M,)
    h, y = hidden.index_select(0, rows), labels.index_select(0, rows)  # (M, H), (M,)
    total = hidden.sum() * 0.0  # 0 that backpropagates when no row has a target
    for s in range(0, rows.shape[0], chunk_size):
        total = total + _Recompute.apply(h[s : s + chunk_size], weight, y[s : s + chunk_size])
    return _divide(total, labels, num_items_in_batch)
