"""Two real gloo processes: per-rank normalisation disagrees with one process, a global count agrees."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmlessons import shift_labels
from lmlessons.course.distributed import (
    DistributedDemoResult,
    demo_batch,
    demo_parameters,
    run_distributed_demo,
)


@pytest.fixture(scope="module")
def result() -> DistributedDemoResult:
    return run_distributed_demo(world_size=2)


def test_result_structure(result):
    assert isinstance(result, DistributedDemoResult)
    assert result.world_size == 2
    assert len(result.tokens_per_rank) == 2 and len(result.rank_mean_losses) == 2


def test_token_counts_per_rank_match_the_batch(result):
    _, labels = demo_batch()
    shifted = shift_labels(labels)  # (4, 16)
    expected = tuple(int((part != -100).sum()) for part in torch.tensor_split(shifted, 2))
    assert result.tokens_per_rank == expected
    assert expected[0] != expected[1]  # the ranks see different token counts: the bug can show


def test_full_loss_is_the_independent_dense_loss(result):
    ids, labels = demo_batch()
    emb, head = (p.detach() for p in demo_parameters())
    logits = torch.tanh(emb[ids]) @ head.T  # (B, T, V)
    ref = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), shift_labels(labels).reshape(-1), ignore_index=-100
    )
    assert result.full_loss == pytest.approx(ref.item(), rel=1e-5)


def test_per_rank_normalisation_disagrees(result):
    assert result.per_rank_loss == pytest.approx(sum(result.rank_mean_losses) / 2, rel=1e-6)
    assert not result.per_rank_agrees
    assert abs(result.per_rank_loss - result.full_loss) > 0.05
    assert result.per_rank_grad_max_diff > 1e-3


def test_global_count_agrees(result):
    assert result.global_count_agrees
    assert result.global_count_loss == pytest.approx(result.full_loss, rel=1e-6)
    assert result.global_count_grad_max_diff < 1e-6 * max(1.0, result.full_grad_norm) * 10
    assert result.full_grad_norm > 0


def test_global_count_loss_is_token_weighted_mean_of_rank_means(result):
    n0, n1 = result.tokens_per_rank
    m0, m1 = result.rank_mean_losses
    assert result.global_count_loss == pytest.approx((n0 * m0 + n1 * m1) / (n0 + n1), rel=1e-5)


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        (dict(world_size=0), ValueError),
        (dict(world_size=True), ValueError),
        (dict(world_size=5), ValueError),  # more ranks than sequences
        (dict(lengths=(1, 4)), ValueError),
        (dict(lengths=()), ValueError),
    ],
)
def test_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        run_distributed_demo(**kwargs)
