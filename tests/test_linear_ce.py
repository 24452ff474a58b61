"""linear_cross_entropy equals dense F.cross_entropy in value and gradients, without (N, V)
logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from lmlessons import clm_loss, linear_cross_entropy, mask_tokens, mlm_loss, shift_labels
from lmlessons.linear_ce import DEFAULT_CHUNK_SIZE

RTOL, ATOL = 1e-4, 1e-6


def make(
    n_rows=37,
    hidden=16,
    vocab=101,
    *,
    ignore=0.5,
    bias=True,
    shape3d=None,
    seed=0,
    dtype=torch.float32,
):
    g = torch.Generator().manual_seed(seed)
    lead = shape3d if shape3d is not None else (n_rows,)
    h = torch.randn(*lead, hidden, generator=g, dtype=dtype).requires_grad_()
    w = (0.3 * torch.randn(vocab, hidden, generator=g, dtype=dtype)).requires_grad_()
    b = torch.randn(vocab, generator=g, dtype=dtype).requires_grad_() if bias else None
    y = torch.randint(vocab, lead, generator=g)
    y[torch.rand(lead, generator=g) < ignore] = -100
    return h, w, b, y


def dense(h, w, b, y, num_items_in_batch=None):
    logits = F.linear(h, w, b).reshape(-1, w.shape[0])  # (N, V)
    if num_items_in_batch is None:
        return F.cross_entropy(logits, y.reshape(-1), ignore_index=-100)
    return (
        F.cross_entropy(logits, y.reshape(-1), ignore_index=-100, reduction="sum")
        / num_items_in_batch
    )


def loss_and_grads(fn, params):
    for p in params:
        p.grad = None
    loss = fn()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in params]


def assert_same(fn_a, fn_b, params, rtol=RTOL, atol=ATOL):
    la, ga = loss_and_grads(fn_a, params)
    lb, gb = loss_and_grads(fn_b, params)
    torch.testing.assert_close(la, lb, rtol=rtol, atol=atol)
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    return la


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 5, 16, 37, 1000])  # 5 and 16 do not divide the 37 rows
@pytest.mark.parametrize("ignore", [0.0, 0.5, 0.9])
def test_matches_dense_2d(bias, chunk_size, ignore):
    h, w, b, y = make(bias=bias, ignore=ignore)
    params = [p for p in (h, w, b) if p is not None]
    assert_same(
        lambda: linear_cross_entropy(h, w, y, bias=b, chunk_size=chunk_size),
        lambda: dense(h, w, b, y),
        params,
    )


def test_matches_dense_3d_and_grad_shapes():
    h, w, b, y = make(shape3d=(3, 11), hidden=8, vocab=50)
    assert_same(
        lambda: linear_cross_entropy(h, w, y, bias=b, chunk_size=4),
        lambda: dense(h, w, b, y),
        [h, w, b],
    )
    assert h.grad.shape == (3, 11, 8)


def test_ignored_rows_get_zero_gradient_and_labelled_rows_do_not():
    h, w, b, y = make(n_rows=20, ignore=0.5, seed=3)
    linear_cross_entropy(h, w, y, bias=b, chunk_size=3).backward()
    ignored = y == -100
    assert ignored.any() and (~ignored).any()
    assert torch.all(h.grad[ignored] == 0)
    assert torch.all(h.grad[~ignored].abs().sum(-1) > 0)


def test_mlm_labels_from_mask_tokens_equal_mlm_loss():
    g = torch.Generator().manual_seed(1)
    vocab, hidden = 120, 24
    ids = torch.randint(5, vocab, (4, 33), generator=g)
    _, labels = mask_tokens(
        ids, mask_token_id=4, vocab_size=vocab, mlm_probability=0.15, generator=g
    )
    assert 0 < int((labels != -100).sum()) < labels.numel()
    h, w, b, _ = make(shape3d=(4, 33), hidden=hidden, vocab=vocab, seed=2)
    assert_same(
        lambda: linear_cross_entropy(h, w, labels, bias=b, chunk_size=7),
        lambda: mlm_loss(F.linear(h, w, b), labels),
        [h, w, b],
    )


def test_clm_with_shift_labels_equals_clm_loss():
    g = torch.Generator().manual_seed(4)
    vocab = 90
    labels = torch.randint(vocab, (3, 17), generator=g)
    labels[0, 12:] = -100  # padding
    labels[2, 5:] = -100
    h, w, _, _ = make(shape3d=(3, 17), hidden=12, vocab=vocab, bias=False, seed=5)
    assert_same(
        lambda: linear_cross_entropy(h, w, shift_labels(labels), chunk_size=8),
        lambda: clm_loss(
            F.linear(h, w), labels
        ),  # shifts inside, like transformers' ForCausalLMLoss
        [h, w],
    )


def test_all_ignored_gives_zero_loss_and_zero_gradients():
    h, w, b, y = make(n_rows=9, ignore=1.0)
    assert torch.all(y == -100)
    loss = linear_cross_entropy(h, w, y, bias=b)
    assert loss.requires_grad
    assert loss.item() == 0.0 and not torch.isnan(loss)
    (loss * 3.0 + (h**2).sum() * 0).backward()  # still part of the graph
    for p in (h, w, b):
        assert p.grad is not None and torch.all(p.grad == 0)
    loss_n = linear_cross_entropy(h, w, y, bias=b, num_items_in_batch=7)
    assert loss_n.item() == 0.0


def test_single_row():
    h, w, b, y = make(n_rows=1, ignore=0.0)
    assert_same(lambda: linear_cross_entropy(h, w, y, bias=b), lambda: dense(h, w, b, y), [h, w, b])
    loss = linear_cross_entropy(h, w, y, bias=b).detach()
    expected = torch.logsumexp(h @ w.T + b, -1) - (h @ w.T + b)[0, y[0]]
    torch.testing.assert_close(loss, expected.detach().squeeze(0), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("count", [50, torch.tensor(50), 50.0, torch.tensor(50.0), 12.5])
def test_num_items_in_batch_is_sum_over_count(count):
    """An int, a float or a one-element tensor, as the losses of lmlessons.losses take it
    (transformers' Trainer passes a tensor, a float one when it divides by parallelism sizes)."""
    h, w, b, y = make(n_rows=30, ignore=0.3)
    n = float(count)
    assert_same(
        lambda: linear_cross_entropy(h, w, y, bias=b, num_items_in_batch=count, chunk_size=4),
        lambda: dense(h, w, b, y, num_items_in_batch=n),
        [h, w, b],
    )
    logits = F.linear(h, w, b).detach()
    torch.testing.assert_close(
        linear_cross_entropy(h, w, y, bias=b, num_items_in_batch=count).detach(),
        mlm_loss(logits, y, num_items_in_batch=count),
        rtol=RTOL,
        atol=ATOL,
    )


def test_gradient_accumulation_with_num_items_equals_full_batch():
    """Micro-batches of different sizes: sum of sum/total over micro-batches == full-batch mean."""
    h, w, b, y = make(n_rows=40, ignore=0.4, seed=7)
    total = int((y != -100).sum())
    splits = [(0, 3), (3, 30), (30, 40)]

    def accumulated():
        return sum(
            linear_cross_entropy(h[i:j], w, y[i:j], bias=b, num_items_in_batch=total, chunk_size=6)
            for i, j in splits
        )

    def mean_of_means():
        return sum(linear_cross_entropy(h[i:j], w, y[i:j], bias=b) for i, j in splits) / len(splits)

    full = assert_same(accumulated, lambda: dense(h, w, b, y), [h, w, b])
    assert abs(mean_of_means().item() - full.item()) > 1e-3  # the Oct 2024 bug really differs here


def test_backward_scales_with_upstream_gradient_and_no_grad_path():
    h, w, b, y = make(n_rows=25)
    params = [h, w, b]
    assert_same(
        lambda: 2.5 * linear_cross_entropy(h, w, y, bias=b, chunk_size=6),
        lambda: 2.5 * dense(h, w, b, y),
        params,
    )
    with torch.no_grad():
        value = linear_cross_entropy(h, w, y, bias=b, chunk_size=6)
    assert not value.requires_grad
    torch.testing.assert_close(value, dense(h, w, b, y).detach(), rtol=RTOL, atol=ATOL)


def test_only_some_inputs_require_grad():
    h, w, _, y = make(n_rows=12)
    w_frozen = w.detach()
    loss = linear_cross_entropy(h, w_frozen, y, bias=None)
    loss.backward()
    ref_h = h.detach().clone().requires_grad_()
    dense(ref_h, w_frozen, None, y).backward()
    torch.testing.assert_close(h.grad, ref_h.grad, rtol=RTOL, atol=ATOL)


def test_gradcheck_float64():
    h, w, b, y = make(n_rows=6, hidden=4, vocab=7, ignore=0.3, dtype=torch.float64, seed=11)
    assert torch.autograd.gradcheck(
        lambda a, c, d: linear_cross_entropy(a, c, y, bias=d, chunk_size=4), (h, w, b)
    )


def test_non_contiguous_hidden_states():
    h, w, b, y = make(shape3d=(9, 4), hidden=8, vocab=30)
    ht = (
        h.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    )  # (9, 4, 8), not contiguous
    assert not ht.is_contiguous()
    assert_same(
        lambda: linear_cross_entropy(ht, w, y, bias=b, chunk_size=5),
        lambda: dense(ht, w, b, y),
        [ht, w, b],
    )


def test_no_logits_sized_tensor_is_saved_for_backward():
    n, hidden, vocab = 64, 8, 500
    h, w, b, y = make(n_rows=n, hidden=hidden, vocab=vocab, ignore=0.0)
    saved: list[int] = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        linear_cross_entropy(h, w, y, bias=b, chunk_size=16)
    assert saved and max(saved) <= vocab * hidden < n * vocab
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        dense(h, w, b, y)
    assert max(saved) >= n * vocab  # the dense path does keep (N, V) tensors: the check can fail


def test_inputs_not_modified():
    h, w, b, y = make(n_rows=10)
    copies = [t.detach().clone() for t in (h, w, b, y)]
    linear_cross_entropy(h, w, y, bias=b, chunk_size=3).backward()
    for t, c in zip((h, w, b, y), copies):
        assert torch.equal(t.detach(), c)


def test_default_chunk_size_is_positive_int():
    assert isinstance(DEFAULT_CHUNK_SIZE, int) and DEFAULT_CHUNK_SIZE >= 1


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(hidden_states=[[1.0]]), TypeError, "hidden_states"),
        (dict(hidden_states=torch.ones(4, 8, dtype=torch.long)), TypeError, "hidden_states"),
        (dict(hidden_states=torch.ones(8)), ValueError, "hidden_states"),
        (dict(hidden_states=torch.ones(2, 2, 2, 8)), ValueError, "hidden_states"),
        (dict(weight=torch.ones(10, 7)), ValueError, "weight"),
        (dict(weight=torch.ones(10)), ValueError, "weight"),
        (dict(weight=torch.ones(10, 8, dtype=torch.float64)), TypeError, "weight"),
        (dict(weight="w"), TypeError, "weight"),
        (dict(labels=torch.zeros(5, dtype=torch.long)), ValueError, "labels"),
        (dict(labels=torch.zeros(4)), TypeError, "labels"),
        (dict(labels=torch.zeros(4, dtype=torch.bool)), TypeError, "labels"),
        (dict(labels=torch.tensor([0, 1, 10, -100])), ValueError, "labels"),
        (dict(labels=torch.tensor([0, 1, -1, -100])), ValueError, "labels"),
        (dict(bias=torch.ones(9)), ValueError, "bias"),
        (dict(bias=torch.ones(10, dtype=torch.float64)), TypeError, "bias"),
        (dict(bias=[0.0] * 10), TypeError, "bias"),
        (dict(chunk_size=0), ValueError, "chunk_size"),
        (dict(chunk_size=2.0), TypeError, "chunk_size"),
        (dict(chunk_size=True), TypeError, "chunk_size"),
        (dict(num_items_in_batch=0), ValueError, "num_items_in_batch"),
        (dict(num_items_in_batch=-3), ValueError, "num_items_in_batch"),
        (dict(num_items_in_batch=torch.tensor(0)), ValueError, "num_items_in_batch"),
        (dict(num_items_in_batch=True), TypeError, "num_items_in_batch"),
        (dict(num_items_in_batch="2"), TypeError, "num_items_in_batch"),
        (dict(num_items_in_batch=float("nan")), ValueError, "num_items_in_batch"),
        (dict(num_items_in_batch=torch.tensor([3, 4])), TypeError, "num_items_in_batch"),
    ],
)
def test_bad_inputs(kwargs, exc, match):
    args = dict(
        hidden_states=torch.ones(4, 8),
        weight=torch.ones(10, 8),
        labels=torch.tensor([0, 1, 2, -100]),
    )
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        linear_cross_entropy(
            args.pop("hidden_states"), args.pop("weight"), args.pop("labels"), **args
        )


@given(
    n_rows=st.integers(1, 40),
    hidden=st.integers(1, 12),
    vocab=st.integers(1, 60),
    chunk_size=st.integers(1, 50),
    ignore=st.sampled_from([0.0, 0.3, 0.8, 1.0]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
    use_count=st.booleans(),
)
@pytest.mark.slow
def test_property_matches_dense(n_rows, hidden, vocab, chunk_size, ignore, bias, seed, use_count):
    h, w, b, y = make(
        n_rows=n_rows, hidden=hidden, vocab=vocab, ignore=ignore, bias=bias, seed=seed
    )
    params = [p for p in (h, w, b) if p is not None]
    n_valid = int((y != -100).sum())
    count = n_valid + 3 if use_count else None

    def ours():
        return linear_cross_entropy(
            h, w, y, bias=b, chunk_size=chunk_size, num_items_in_batch=count
        )

    if n_valid == 0:  # F.cross_entropy gives NaN (0/0) here; ours gives 0 with zero gradients
        loss, grads = loss_and_grads(ours, params)
        assert float(loss) == 0.0 and all(torch.all(g == 0) for g in grads)
        return
    assert_same(ours, lambda: dense(h, w, b, y, num_items_in_batch=count), params)


def test_bfloat16_inputs_give_a_float32_loss_like_upcast_logits():
    h, w, _, y = make(n_rows=30, hidden=16, vocab=70, ignore=0.2)
    hb, wb = h.detach().bfloat16().requires_grad_(), w.detach().bfloat16().requires_grad_()
    loss = linear_cross_entropy(hb, wb, y, chunk_size=7)
    assert loss.dtype == torch.float32
    ref = F.cross_entropy(F.linear(hb, wb).float(), y, ignore_index=-100)  # transformers' upcast
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    loss.backward()
    assert hb.grad.dtype == torch.bfloat16 and wb.grad.dtype == torch.bfloat16
    ref_h = hb.detach().clone().requires_grad_()
    F.cross_entropy(F.linear(ref_h, wb.detach()).float(), y, ignore_index=-100).backward()
    torch.testing.assert_close(hb.grad.float(), ref_h.grad.float(), rtol=2e-2, atol=2e-3)
