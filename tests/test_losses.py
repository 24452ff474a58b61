"""The per-token kernel ``token_nll`` (hypothesis) and the loss edge cases: nothing to predict,
num_items_in_batch, gradients, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from lmlessons import bert_pretraining_loss, clm_loss, mlm_loss, nsp_loss, shift_labels
from lmlessons.losses import token_nll

V = 11


def _logits(*shape, seed=0, grad=True):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return t.requires_grad_(grad)


@given(
    st.sampled_from([(6,), (1, 1), (3, 5)]),
    st.floats(0.0, 1.0),
    st.booleans(),
    st.sampled_from([torch.float32, torch.bfloat16]),
    st.integers(0, 2**16),
)
def test_token_nll_is_each_positions_cross_entropy(shape, p_ignore, shift, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, V, generator=g).to(dtype)  # (..., T, V)
    labels = torch.randint(0, V, shape, generator=g)  # (..., T)
    labels[torch.rand(shape, generator=g) < p_ignore] = -100
    nll, has_target = token_nll(logits, labels, shift=shift)
    targets = shift_labels(labels) if shift else labels  # position t scores labels[..., t + 1]
    assert nll.shape == has_target.shape == labels.shape
    assert nll.dtype == torch.float32 and has_target.dtype == torch.bool  # upcast
    assert torch.equal(has_target, targets != -100)
    log_p = logits.float().log_softmax(-1)  # (..., T, V)
    want = -log_p.gather(-1, targets.clamp(min=0)[..., None])[..., 0]  # (..., T)
    torch.testing.assert_close(nll, want.masked_fill(~has_target, 0.0))
    loss = (clm_loss if shift else mlm_loss)(logits, labels)  # the mean over target positions
    torch.testing.assert_close(loss, nll.sum() / max(int(has_target.sum()), 1))


def test_no_target_gives_zero_that_backpropagates():
    def summed_token_nll(logits, labels):
        nll, has_target = token_nll(logits, labels)
        assert not has_target.any()
        return nll.sum()

    for fn in (mlm_loss, clm_loss, summed_token_nll):
        logits = _logits(2, 5, V)
        loss = fn(logits, torch.full((2, 5), -100))
        assert not torch.isnan(loss) and loss.item() == 0.0
        loss.backward()
        assert logits.grad is not None and torch.count_nonzero(logits.grad) == 0
    # transformers' mean-reduced cross-entropy gives NaN here: that is the bug we avoid
    assert torch.isnan(F.cross_entropy(torch.randn(3, V), torch.full((3,), -100)))


def test_clm_with_only_first_token_labelled_has_no_target_after_shift():
    labels = torch.full((1, 4), -100)
    labels[0, 0] = 3
    assert clm_loss(_logits(1, 4, V), labels).item() == 0.0


def _summed_ce(logits, targets):
    """The cross-entropy summed over the targets that are not -100."""
    return F.cross_entropy(
        logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100, reduction="sum"
    )


def test_num_items_in_batch_is_sum_over_count():
    logits = _logits(2, 6, V)
    labels = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(1))
    labels[1, 3:] = -100
    s = _summed_ce(logits, labels)
    torch.testing.assert_close(mlm_loss(logits, labels, num_items_in_batch=20), s / 20)
    torch.testing.assert_close(
        mlm_loss(logits, labels, num_items_in_batch=torch.tensor(20)), s / 20
    )
    # transformers' Trainer may pass a float tensor (the count divided by parallelism sizes)
    torch.testing.assert_close(
        mlm_loss(logits, labels, num_items_in_batch=torch.tensor(10.0)), s / 10
    )
    s2 = _summed_ce(logits, shift_labels(labels))
    torch.testing.assert_close(clm_loss(logits, labels, num_items_in_batch=7), s2 / 7)


def test_gradient_accumulation_matches_full_batch_gradient():
    logits = _logits(4, 8, V, seed=3)
    labels = torch.randint(0, V, (4, 8), generator=torch.Generator().manual_seed(2))
    labels[0, 2:] = -100
    labels[3, 6:] = -100
    full = clm_loss(logits, labels)
    (g_full,) = torch.autograd.grad(full, logits)
    n = int((shift_labels(labels) != -100).sum())
    acc = clm_loss(logits[:1], labels[:1], num_items_in_batch=n) + clm_loss(
        logits[1:], labels[1:], num_items_in_batch=n
    )
    (g_acc,) = torch.autograd.grad(acc, logits)
    torch.testing.assert_close(acc, full)
    torch.testing.assert_close(g_acc, g_full)


def test_shift_labels():
    labels = torch.tensor([[1, 2, 3, -100], [4, 5, -100, -100]])
    out = shift_labels(labels)
    assert out.tolist() == [[2, 3, -100, -100], [5, -100, -100, -100]]
    assert labels.tolist()[0] == [1, 2, 3, -100], "input untouched"
    assert shift_labels(torch.tensor([[7]])).tolist() == [[-100]]
    assert shift_labels(labels, ignore_index=-1)[:, -1].tolist() == [-1, -1]


def test_num_targets_counts_the_labels_a_loss_scores():
    from lmlessons.shifting import num_targets

    labels = torch.tensor([[-100, 2, 3, -100], [4, 5, -100, -100]])
    assert num_targets(labels).tolist() == [2, 2]
    assert num_targets(labels, shift=True).tolist() == [2, 1]  # the first label is never a target
    assert num_targets(labels[0], shift=True).item() == 2
    logits = torch.randn(2, 4, 7, generator=torch.Generator().manual_seed(0))  # (B, T, V)
    _, has_target = token_nll(logits, labels)  # the loss's own count, after the shift
    assert num_targets(labels, shift=True).tolist() == has_target.sum(dim=1).tolist()
    with pytest.raises(TypeError, match=r"^labels"):
        num_targets(labels.float())


def test_nsp_loss_convention_and_value():
    logits = torch.tensor([[3.0, -3.0], [-3.0, 3.0]])
    assert nsp_loss(logits, torch.tensor([0, 1])).item() < 0.01  # 0 = IsNext scored by column 0
    assert nsp_loss(logits, torch.tensor([1, 0])).item() > 5.0


def _valid_args(fn) -> dict:
    """Arguments ``fn`` accepts, by name: logits (2, 3, V) and labels (2, 3) of zeros."""
    logits, labels = torch.randn(2, 3, V), torch.zeros(2, 3, dtype=torch.long)
    if fn is bert_pretraining_loss:
        return {
            "mlm_logits": logits,
            "nsp_logits": torch.randn(2, 2),
            "mlm_labels": labels,
            "nsp_labels": torch.tensor([0, 1]),
        }
    if fn is nsp_loss:
        return {"logits": torch.randn(2, 2), "labels": torch.tensor([0, 1])}
    if fn is shift_labels:
        return {"labels": labels}
    return {"logits": logits, "labels": labels}


@pytest.mark.parametrize(
    "fn,changed,exc,match",
    [
        (mlm_loss, {"logits": [1.0], "labels": torch.tensor([1])}, TypeError, "logits"),
        (mlm_loss, {"labels": torch.zeros(2, 3)}, TypeError, "labels"),
        (
            mlm_loss,
            {"labels": torch.zeros(2, 4, dtype=torch.long)},
            ValueError,
            "labels must have shape",
        ),
        (mlm_loss, {"labels": torch.full((2, 3), V)}, ValueError, "labels must hold ids"),
        (mlm_loss, {"labels": torch.full((2, 3), -5)}, ValueError, "labels must hold ids"),
        (mlm_loss, {"num_items_in_batch": 0}, ValueError, "num_items_in_batch"),
        (clm_loss, {"num_items_in_batch": -1}, ValueError, "num_items_in_batch"),
        (clm_loss, {"num_items_in_batch": "2"}, TypeError, "num_items_in_batch"),
        (clm_loss, {"num_items_in_batch": torch.tensor([1, 2])}, TypeError, "num_items_in_batch"),
        (clm_loss, {"num_items_in_batch": torch.tensor(0.0)}, ValueError, "num_items_in_batch"),
        (clm_loss, {"logits": torch.zeros(2, 3, V, dtype=torch.long)}, TypeError, "logits"),
        (nsp_loss, {"logits": torch.randn(2, 3)}, ValueError, "2"),
        (nsp_loss, {"labels": torch.tensor([0, 2])}, ValueError, "labels"),
        (nsp_loss, {"labels": torch.tensor([0])}, ValueError, "labels"),
        (bert_pretraining_loss, {"nsp_logits": torch.randn(2, 3)}, ValueError, "nsp_logits"),
        (
            bert_pretraining_loss,
            {"nsp_logits": torch.randn(3, 2), "nsp_labels": torch.tensor([0, 1, 0])},
            ValueError,
            "share",
        ),
        (
            bert_pretraining_loss,
            {"mlm_labels": torch.zeros(2, 4, dtype=torch.long)},
            ValueError,
            "mlm_labels",
        ),
        (bert_pretraining_loss, {"mlm_weight": -1}, ValueError, "mlm_weight"),
        (bert_pretraining_loss, {"nsp_weight": "1"}, TypeError, "nsp_weight"),
        (shift_labels, {"labels": [1, 2]}, TypeError, "labels"),
        (shift_labels, {"labels": torch.tensor(3)}, ValueError, "labels"),
    ],
)
def test_bad_input(fn, changed, exc, match):
    """Each case changes the named arguments of a valid call."""
    with pytest.raises(exc, match=match):
        fn(**{**_valid_args(fn), **changed})


@pytest.mark.parametrize(
    "fn,changed,exc,message",
    [
        (nsp_loss, {"logits": [[1.0, 2.0]]}, TypeError, "logits "),
        (nsp_loss, {"labels": [0, 1]}, TypeError, "labels "),
        (nsp_loss, {"labels": torch.tensor([0, 2])}, ValueError, "labels must hold ids in [0, 2)"),
        (nsp_loss, {"labels": torch.tensor([0, -100])}, ValueError, "labels must be 0 (IsNext)"),
        (
            nsp_loss,
            {"logits": torch.randn(3, 2), "labels": torch.tensor([0])},
            ValueError,
            "labels must have shape (3,), got (1,)",
        ),
        (bert_pretraining_loss, {"mlm_logits": [1.0]}, TypeError, "mlm_logits "),
        (bert_pretraining_loss, {"mlm_labels": [0]}, TypeError, "mlm_labels "),
        (bert_pretraining_loss, {"nsp_logits": torch.randn(2)}, ValueError, "nsp_logits "),
        (bert_pretraining_loss, {"nsp_labels": [0, 1]}, TypeError, "nsp_labels "),
        (
            bert_pretraining_loss,
            {"nsp_labels": torch.tensor([0, 2])},
            ValueError,
            "nsp_labels must hold ids in [0, 2)",
        ),
        (
            bert_pretraining_loss,
            {"nsp_labels": torch.tensor([-100, 1])},
            ValueError,
            "nsp_labels must be 0 (IsNext)",
        ),
        (
            bert_pretraining_loss,
            {"nsp_logits": torch.randn(3, 2), "nsp_labels": torch.tensor([0, 1, 0])},
            ValueError,
            "mlm_logits (B, T, V) and nsp_logits (B, 2) must share B, got 2 and 3",
        ),
        (
            bert_pretraining_loss,
            {"mlm_weight": "1"},
            TypeError,
            "mlm_weight must be a number, got str",
        ),
        (bert_pretraining_loss, {"nsp_weight": -0.5}, ValueError, "nsp_weight must be >= 0"),
        (
            bert_pretraining_loss,
            {"nsp_weight": None},
            TypeError,
            "nsp_weight must be a number, got",
        ),
    ],
)
def test_bad_input_messages_name_the_argument(fn, changed, exc, message):
    """The message starts with the argument's own name (``nsp_labels``, not the kernel's
    ``labels``), and says what was wrong."""
    with pytest.raises(exc) as raised:
        fn(**{**_valid_args(fn), **changed})
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_weight_of_zero_leaves_the_other_term():
    args = _valid_args(bert_pretraining_loss)
    mlm = mlm_loss(args["mlm_logits"], args["mlm_labels"])
    nsp = nsp_loss(args["nsp_logits"], args["nsp_labels"])
    torch.testing.assert_close(bert_pretraining_loss(**args, nsp_weight=0), mlm)
    torch.testing.assert_close(bert_pretraining_loss(**args, mlm_weight=0.0), nsp)
    torch.testing.assert_close(
        bert_pretraining_loss(**args, mlm_weight=2, nsp_weight=0.5), 2 * mlm + nsp / 2
    )
