"""The z-loss, multi-token prediction and label smoothing (``lmlessons.zloss``, ``lmlessons.mtp``,
``lmlessons.smoothing``).

1. Oracles, against the installed transformers: each MTP depth equals ``ForCausalLMLoss`` with
   ``shift_labels``; ``label_smoothed_loss`` equals ``LabelSmoother`` (and its smoothing term
   ignores the -100 positions); ``bamba_z_loss`` is the term a tiny ``BambaForCausalLM`` (built
   from a config, nothing downloaded) adds to its loss, in float32 and in bfloat16.
2. Properties, against plain-Python loops (``math`` on floats, one position at a time), with
   rows without a target and depths longer than a row.
3. ``num_items_in_batch``: the micro-batch losses add up to the full batch's; Bamba's does not.
4. The error of logsumexp in bfloat16, within a bound.
5. Bad input: errors that name the argument.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given
from hypothesis import strategies as st
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.trainer_pt_utils import LabelSmoother

from lmlessons.mtp import mtp_labels, mtp_loss, mtp_losses, mtp_num_items
from lmlessons.shifting import shift_labels
from lmlessons.smoothing import label_smoothed_loss
from lmlessons.zloss import bamba_z_loss, logsumexp_error, z_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IGNORE = -100
TOL = dict(rtol=1e-5, atol=1e-6)

# ----------------------------------------------------------------------------- inputs


def _batch(seed: int, b: int, t: int, v: int, p_ignore: float = 0.3, depths: int = 1):
    """``(logits_per_depth, labels)``: ``depths`` float32 ``(b, t, v)`` logits and ``(b, t)``
    labels with about ``p_ignore`` of them -100."""
    g = torch.Generator().manual_seed(seed)
    logits = [torch.randn(b, t, v, generator=g) * 2 for _ in range(depths)]
    labels = torch.randint(0, v, (b, t), generator=g)
    labels[torch.rand(b, t, generator=g) < p_ignore] = IGNORE
    return logits, labels


batches = st.tuples(
    st.integers(0, 2**31 - 1),  # seed
    st.integers(1, 3),  # B
    st.integers(1, 6),  # T
    st.integers(2, 5),  # V
    st.sampled_from([0.0, 0.3, 0.7, 1.0]),  # share of -100
)

# ----------------------------------------------------------------------------- references


def _lse(row: list[float]) -> float:
    top = max(row)
    return top + math.log(sum(math.exp(x - top) for x in row))


def _ref_mtp_labels(labels: list[list[int]], depth: int) -> list[list[int]]:
    return [
        [row[t + depth] if t + depth < len(row) else IGNORE for t in range(len(row))]
        for row in labels
    ]


def _ref_reduce(terms: list[float], count: float | None) -> float:
    """Sum over ``count`` (or the mean of the terms, 0 with none)."""
    if count is not None:
        return sum(terms) / count
    return sum(terms) / len(terms) if terms else 0.0


def _ref_depth_loss(logits, labels, depth, count=None) -> float:
    """Mean (or sum / count) of -log p(label[t + depth]) over positions with a target."""
    targets = _ref_mtp_labels(labels.tolist(), depth)
    rows = logits.tolist()
    terms = []
    for b, row in enumerate(targets):
        for t, y in enumerate(row):
            if y != IGNORE:
                terms.append(_lse(rows[b][t]) - rows[b][t][y])
    return _ref_reduce(terms, count)


def _ref_z_loss(logits, labels, coef, count=None) -> float:
    """``coef`` times the mean of lse^2 over the positions t with labels[t + 1] != -100."""
    rows, lab = logits.tolist(), labels.tolist()
    terms = [
        _lse(rows[b][t]) ** 2
        for b in range(len(lab))
        for t in range(len(lab[b]) - 1)
        if lab[b][t + 1] != IGNORE
    ]
    return coef * _ref_reduce(terms, count)


def _ref_smoothed(logits, labels, eps, shift, count=None) -> float:
    """(1 - eps) * nll + eps * mean over the vocabulary of -log p, at positions with a target."""
    rows, lab = logits.tolist(), labels.tolist()
    terms = []
    for b in range(len(lab)):
        for t in range(len(lab[b])):
            y = (lab[b][t + 1] if t + 1 < len(lab[b]) else IGNORE) if shift else lab[b][t]
            if y == IGNORE:
                continue
            lse = _lse(rows[b][t])
            uniform = sum(lse - x for x in rows[b][t]) / len(rows[b][t])
            terms.append((1 - eps) * (lse - rows[b][t][y]) + eps * uniform)
    return _ref_reduce(terms, count)


# ----------------------------------------------------------------------------- 1. oracles


@pytest.mark.parametrize("with_count", [False, True])
def test_each_mtp_depth_equals_for_causal_lm_loss_with_shift_labels(with_count: bool) -> None:
    logits, labels = _batch(0, b=3, t=7, v=11, depths=4)
    labels[1, :4] = IGNORE  # a row with a prompt
    counts = mtp_num_items(labels, 4) + 5 if with_count else None  # as if other micro-batches
    ours = mtp_losses(logits, labels, num_items_in_batch=counts)
    for d in range(1, 5):
        n = None if counts is None else counts[d - 1]
        upstream = ForCausalLMLoss(
            logits[d - 1], None, 11, num_items_in_batch=n, shift_labels=mtp_labels(labels, d)
        )
        torch.testing.assert_close(ours[d - 1], upstream, **TOL)
    assert len(set(ours.tolist())) == 4  # four different losses: each depth has its own targets


def test_for_causal_lm_loss_does_not_shift_given_shift_labels() -> None:
    """With ``shift_labels`` given, ``labels`` are not read (not shifted a second time), and
    depth 1 is the loss ``ForCausalLMLoss`` computes from the labels by itself."""
    (logits,), labels = _batch(1, b=2, t=6, v=9)
    pre = mtp_labels(labels, 1)
    garbage = torch.randint(0, 9, labels.shape)
    from_labels = ForCausalLMLoss(logits, labels, 9)
    torch.testing.assert_close(ForCausalLMLoss(logits, garbage, 9, shift_labels=pre), from_labels)
    torch.testing.assert_close(mtp_losses([logits], labels)[0], from_labels, **TOL)


def test_a_depth_without_targets_is_0_where_for_causal_lm_loss_is_nan() -> None:
    """Depth 6 on rows of 5 tokens: no target. ``ForCausalLMLoss`` (a mean over nothing) gives
    NaN; ``mtp_losses`` gives 0, which still backpropagates (zero gradients)."""
    logits, labels = _batch(2, b=2, t=5, v=7, p_ignore=0.0, depths=6)
    for x in logits:
        x.requires_grad_(True)
    upstream = ForCausalLMLoss(logits[5], None, 7, shift_labels=mtp_labels(labels, 6))
    assert torch.isnan(upstream)
    losses = mtp_losses(logits, labels)
    assert losses[5].item() == 0.0 and bool((losses[:4] > 0).all())
    losses.sum().backward()
    assert logits[5].grad is not None and not bool(logits[5].grad.any())


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("shift", [True, False])
@pytest.mark.parametrize("count", [None, 40])
def test_label_smoothed_loss_equals_label_smoother(epsilon, shift, count) -> None:
    (logits,), labels = _batch(3, b=3, t=6, v=13, p_ignore=0.4)
    labels[2] = IGNORE  # a row with no target
    smoother = LabelSmoother(epsilon=epsilon)
    upstream = smoother({"logits": logits}, labels, shift_labels=shift, num_items_in_batch=count)
    ours = label_smoothed_loss(
        logits, labels, epsilon=epsilon, shift=shift, num_items_in_batch=count
    )
    torch.testing.assert_close(ours, upstream, **TOL)


def test_label_smoother_ignores_the_minus_100_positions_in_both_terms() -> None:
    """Changing the logits where the label is -100 changes neither ``LabelSmoother``'s loss nor
    ours: the smoothing term (the mean of -log p over the vocabulary) is zeroed there and its
    denominator counts only the targets (times V). Without the shift, as for an MLM."""
    (logits,), labels = _batch(4, b=2, t=8, v=10, p_ignore=0.5)
    assume_ignored = labels == IGNORE
    assert bool(assume_ignored.any())
    other = logits.clone()
    other[assume_ignored] = 50 * torch.randn(int(assume_ignored.sum()), 10)
    smoother = LabelSmoother(epsilon=0.3)
    a = smoother({"logits": logits}, labels)
    torch.testing.assert_close(smoother({"logits": other}, labels), a)
    torch.testing.assert_close(label_smoothed_loss(other, labels, epsilon=0.3, shift=False), a)


def test_label_smoother_is_cross_entropy_with_label_smoothing() -> None:
    """The same loss as ``F.cross_entropy(..., label_smoothing=epsilon)``: the epsilon is spread
    over all V classes, the true one included."""
    (logits,), labels = _batch(5, b=2, t=7, v=6)
    smoother = LabelSmoother(epsilon=0.2)
    upstream = smoother({"logits": logits}, labels, shift_labels=True)
    plain = F.cross_entropy(
        logits[:, :-1].reshape(-1, 6), labels[:, 1:].reshape(-1), label_smoothing=0.2
    )
    torch.testing.assert_close(upstream, plain, **TOL)


def test_label_smoother_gives_nan_without_targets_and_ours_0() -> None:
    (logits,), labels = _batch(6, b=2, t=4, v=5, p_ignore=1.0)
    assert torch.isnan(LabelSmoother()({"logits": logits}, labels, shift_labels=True))
    assert label_smoothed_loss(logits, labels).item() == 0.0


def _tiny_bamba(z_loss_coefficient: float):
    from transformers import BambaConfig, BambaForCausalLM

    config = BambaConfig(
        vocab_size=37,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        mamba_n_heads=4,
        mamba_d_state=8,
        mamba_chunk_size=8,
        attn_layer_indices=[],
        z_loss_coefficient=z_loss_coefficient,
    )
    torch.manual_seed(0)
    model = BambaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(30)  # logits of a few units: log Z well away from log V
    return model


@pytest.fixture(scope="module")
def bamba_inputs():
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 37, (2, 6), generator=g)
    labels = ids.clone()
    labels[1, 3:] = IGNORE  # padding
    return ids, labels


def test_bamba_adds_bamba_z_loss_over_every_position(bamba_inputs) -> None:
    """``BambaForCausalLM``'s loss is ``ForCausalLMLoss`` plus :func:`bamba_z_loss`; the z-term
    is the same whatever the labels (padding and the last positions count), unlike ``z_loss``."""
    ids, labels = bamba_inputs
    model = _tiny_bamba(0.5)
    with torch.no_grad():
        padded = model(input_ids=ids, labels=labels, use_cache=False)
        full = model(input_ids=ids, labels=ids, use_cache=False)
    term = padded.loss - ForCausalLMLoss(padded.logits, labels, 37)
    torch.testing.assert_close(term, bamba_z_loss(padded.logits, z_loss_coefficient=0.5), **TOL)
    torch.testing.assert_close(full.loss - ForCausalLMLoss(full.logits, ids, 37), term, **TOL)
    counted = z_loss(padded.logits, labels, z_loss_coefficient=0.5)
    assert abs(counted.item() - term.item()) > 1e-3 * term.item()
    # With the step's count, the cross-entropy is a sum over it; the z-term stays a mean.
    with torch.no_grad():
        step = model(input_ids=ids, labels=labels, use_cache=False, num_items_in_batch=100)
    summed = ForCausalLMLoss(step.logits, labels, 37, num_items_in_batch=100)
    torch.testing.assert_close(step.loss - summed, term, **TOL)


def test_bamba_computes_logsumexp_in_the_logits_dtype(bamba_inputs) -> None:
    """In bfloat16 the model's z-term is :func:`bamba_z_loss` on its bfloat16 logits, not the
    same mean computed with a float32 logsumexp."""
    ids, labels = bamba_inputs
    model = _tiny_bamba(0.5).to(torch.bfloat16)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels, use_cache=False)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    term = (out.loss - ForCausalLMLoss(out.logits, labels, 37)).item()
    ours = bamba_z_loss(out.logits, z_loss_coefficient=0.5).item()
    in_float32 = 0.5 * out.logits.float().logsumexp(-1).pow(2).mean().item()
    assert abs(term - ours) <= 1e-6 * term
    assert abs(term - in_float32) > 100 * abs(term - ours) + 1e-7 * term


def test_transformers_mtp_model_drafts_but_cannot_compute_a_loss() -> None:
    """transformers 5.23's ``MtpModel`` (``modeling_layers.py``, used by ``generate``'s MTP
    candidate generator) drafts one token per MTP layer; given ``labels`` it raises a TypeError
    (its loss starts as None and is added to), so it offers no MTP training loss."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    from transformers.modeling_layers import MtpModel

    config = DeepseekV3Config(
        vocab_size=37,
        hidden_size=16,
        intermediate_size=32,
        moe_intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=None,
        kv_lora_rank=8,
        qk_rope_head_dim=4,
        qk_nope_head_dim=4,
        v_head_dim=4,
        num_mtp_layers=1,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    main = DeepseekV3ForCausalLM(config).eval()
    mtp = MtpModel(main, 1).eval()
    ids = torch.randint(0, 37, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hidden = main(input_ids=ids, output_hidden_states=True).hidden_states[-1]  # (2, 6, 16)
        kwargs = dict(
            input_ids=ids,
            last_hidden_states=hidden,
            attention_mask=None,
            position_ids=torch.arange(6).expand(2, 6),
            mtp_cache=None,
        )
        drafted, drafted_logits, loss = mtp(**kwargs)
        assert drafted.shape == (2, 1) and drafted_logits.shape == (2, 1, 37) and loss is None
        with pytest.raises(TypeError, match="NoneType"):
            mtp(**kwargs, labels=ids)


# ----------------------------------------------------------------------------- 2. properties


@given(batches, st.integers(1, 8))
def test_mtp_labels_shift_each_row_by_depth(batch, depth: int) -> None:
    seed, b, t, v, p = batch
    _, labels = _batch(seed, b, t, v, p)
    out = mtp_labels(labels, depth)
    assert out.tolist() == _ref_mtp_labels(labels.tolist(), depth)
    assert torch.equal(labels, _batch(seed, b, t, v, p)[1])  # not modified
    assert torch.equal(mtp_labels(labels, 1, ignore_index=-1), shift_labels(labels, -1))
    counts = mtp_num_items(labels, depth)
    expected = [
        sum(y != IGNORE for row in _ref_mtp_labels(labels.tolist(), d) for y in row)
        for d in range(1, depth + 1)
    ]
    assert counts.tolist() == expected
    assert counts.tolist() == sorted(expected, reverse=True)  # a deeper head: fewer targets


@given(batches, st.integers(1, 4), st.booleans())
def test_mtp_losses_match_a_loop(batch, depths: int, with_count: bool) -> None:
    seed, b, t, v, p = batch
    logits, labels = _batch(seed, b, t, v, p, depths=depths)
    counts = (mtp_num_items(labels, depths) + 1).tolist() if with_count else None
    ours = mtp_losses(logits, labels, num_items_in_batch=counts)
    expected = [
        _ref_depth_loss(logits[d - 1], labels, d, None if counts is None else counts[d - 1])
        for d in range(1, depths + 1)
    ]
    torch.testing.assert_close(ours, torch.tensor(expected), **TOL)
    torch.testing.assert_close(mtp_loss(logits, labels, num_items_in_batch=counts), ours.mean())
    if depths >= 2:
        weighted = mtp_loss(logits, labels, num_items_in_batch=counts, mtp_weight=0.3)
        torch.testing.assert_close(weighted, ours[0] + 0.3 * ours[1:].mean())


@given(batches, st.sampled_from([0.0, 1e-4, 0.5]), st.booleans())
def test_z_loss_matches_a_loop(batch, coef: float, with_count: bool) -> None:
    seed, b, t, v, p = batch
    (logits,), labels = _batch(seed, b, t, v, p)
    count = 17 if with_count else None
    expected = _ref_z_loss(logits, labels, coef, count)
    ours = z_loss(logits, labels, z_loss_coefficient=coef, num_items_in_batch=count)
    assert math.isclose(ours.item(), expected, rel_tol=1e-5, abs_tol=1e-7)


@given(batches)
def test_bamba_z_loss_matches_a_loop_over_every_position(batch) -> None:
    seed, b, t, v, p = batch
    (logits,), _ = _batch(seed, b, t, v, p)
    rows = logits.tolist()
    expected = 0.5 * sum(_lse(r) ** 2 for row in rows for r in row) / (b * t)
    ours = bamba_z_loss(logits, z_loss_coefficient=0.5).item()
    assert math.isclose(ours, expected, rel_tol=1e-5, abs_tol=1e-6)


@given(batches, st.sampled_from([0.0, 0.1, 1.0]), st.booleans(), st.booleans())
def test_label_smoothed_loss_matches_a_loop(batch, eps: float, shift: bool, with_count) -> None:
    seed, b, t, v, p = batch
    (logits,), labels = _batch(seed, b, t, v, p)
    count = 9 if with_count else None
    expected = _ref_smoothed(logits, labels, eps, shift, count)
    ours = label_smoothed_loss(logits, labels, epsilon=eps, shift=shift, num_items_in_batch=count)
    assert math.isclose(ours.item(), expected, rel_tol=1e-5, abs_tol=1e-6)


# ----------------------------------------------------------------------------- 3. micro-batches


def _split(x: torch.Tensor, cut: int) -> list[torch.Tensor]:
    return [x[:cut], x[cut:]]


@given(batches, st.integers(1, 3))
def test_micro_batch_losses_add_up_to_the_full_batch(batch, depths: int) -> None:
    """Rows split into two micro-batches, each loss given the full batch's count(s): their sum
    is the full batch's mean loss. For MTP each depth has its own count."""
    seed, b, t, v, p = batch
    assume(b >= 2)
    logits, labels = _batch(seed, b, t, v, p, depths=depths)
    counts = mtp_num_items(labels, depths)
    assume(bool((counts > 0).all()))
    n = int(counts[0])  # depth 1: the targets of clm_loss, z_loss and the smoothed loss
    for cut in range(1, b):
        parts = list(zip(*[_split(x, cut) for x in [labels, *logits]], strict=True))
        z = sum(
            z_loss(lg[0], lab, z_loss_coefficient=0.1, num_items_in_batch=n) for lab, *lg in parts
        )
        torch.testing.assert_close(z, z_loss(logits[0], labels, z_loss_coefficient=0.1), **TOL)
        s = sum(label_smoothed_loss(lg[0], lab, num_items_in_batch=n) for lab, *lg in parts)
        torch.testing.assert_close(s, label_smoothed_loss(logits[0], labels), **TOL)
        m = sum(mtp_loss(lg, lab, num_items_in_batch=counts) for lab, *lg in parts)
        torch.testing.assert_close(m, mtp_loss(logits, labels), **TOL)


def test_bamba_z_loss_adds_one_mean_per_micro_batch() -> None:
    """Bamba's z-term has no ``num_items_in_batch`` (and reads no labels): two equal micro-batches
    add two means, twice the full batch's."""
    (logits,), _ = _batch(8, b=4, t=5, v=7)
    halves = bamba_z_loss(logits[:2]) + bamba_z_loss(logits[2:])
    torch.testing.assert_close(halves, 2 * bamba_z_loss(logits), **TOL)


# ----------------------------------------------------------------------------- 4. bfloat16


@pytest.mark.parametrize(("vocab", "offset"), [(97, 0.0), (4096, 0.0), (512, 30.0)])
def test_logsumexp_in_bfloat16_is_off_by_at_most_about_one_unit_in_the_last_place(
    vocab: int, offset: float
) -> None:
    """bfloat16 keeps 8 significant bits, so one unit in the last place of ``log Z`` is
    ``2**-7 * |log Z|`` at most. The error stays within that bound (plus ``2**-7`` for ``log Z``
    near 0) and is not 0: on average above a hundredth of it."""
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(256, vocab, generator=g) * 2 + offset
    err = logsumexp_error(logits)
    ref = logits.bfloat16().float().logsumexp(-1)
    assert err.shape == (256,) and err.dtype == torch.float32
    assert bool((err.abs() <= 2**-7 * ref.abs() + 2**-7).all())
    assert err.abs().mean().item() > 1e-2 * 2**-7 * ref.abs().mean().item()
    assert not bool(logsumexp_error(logits, dtype=torch.float32).any())  # same dtype: no error


# ----------------------------------------------------------------------------- 5. bad input


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda x, y: z_loss(x.long(), y), TypeError, "logits"),
        (lambda x, y: z_loss(x, y, z_loss_coefficient=-1.0), ValueError, "z_loss_coefficient"),
        (lambda x, y: z_loss(x, y, num_items_in_batch=0), ValueError, "num_items_in_batch"),
        (lambda x, y: z_loss(x, y[:, :-1]), ValueError, "labels"),
        (lambda x, y: bamba_z_loss(y), TypeError, "logits"),
        (lambda x, y: logsumexp_error(x, dtype=torch.long), TypeError, "dtype"),
        (lambda x, y: mtp_labels(y, 0), ValueError, "depth"),
        (lambda x, y: mtp_labels(y.float(), 1), TypeError, "labels"),
        (lambda x, y: mtp_num_items(y, 0), ValueError, "num_depths"),
        (lambda x, y: mtp_losses(x, y), TypeError, "logits_per_depth"),
        (lambda x, y: mtp_losses([], y), ValueError, "logits_per_depth"),
        (lambda x, y: mtp_losses([x, x[:, :-1]], y), ValueError, "logits_per_depth[1]"),
        (lambda x, y: mtp_losses([x, x], y, num_items_in_batch=[3]), ValueError, "num_items"),
        (lambda x, y: mtp_loss([x], y, mtp_weight=0.3), ValueError, "mtp_weight"),
        (lambda x, y: mtp_loss([x, x], y, mtp_weight=-1), ValueError, "mtp_weight"),
        (lambda x, y: label_smoothed_loss(x, y, epsilon=1.5), ValueError, "epsilon"),
        (lambda x, y: label_smoothed_loss(x, y.float()), TypeError, "labels"),
    ],
)
def test_bad_input_names_the_argument(call, error, name: str) -> None:
    (logits,), labels = _batch(9, b=2, t=4, v=5)
    with pytest.raises(error, match=name.replace("[", r"\[").replace("]", r"\]")):
        call(logits, labels)
