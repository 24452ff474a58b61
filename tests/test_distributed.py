"""lmlessons.course.distributed on two real gloo processes: per-rank normalisation disagrees with
one process on the whole batch, a global token count agrees."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmlessons import shift_labels
from lmlessons._checks import IGNORE_INDEX
from lmlessons.course.distributed import (
    DistributedDemoResult,
    demo_batch,
    demo_parameters,
    run_distributed_demo,
)

# Starting two real processes takes seconds: the module is slow (make test runs it).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result() -> DistributedDemoResult:
    return run_distributed_demo(world_size=2)


def test_one_entry_per_rank(result):
    assert isinstance(result, DistributedDemoResult)
    assert len(result.tokens_per_rank) == 2 and len(result.rank_mean_losses) == 2


def test_token_counts_per_rank_match_the_batch(result):
    _, labels = demo_batch()
    shifted = shift_labels(labels)  # (4, 16)
    expected = tuple(int((part != IGNORE_INDEX).sum()) for part in torch.tensor_split(shifted, 2))
    assert result.tokens_per_rank == expected
    assert expected[0] != expected[1]  # the ranks see different token counts: the bug can show


def test_full_loss_is_the_independent_dense_loss(result):
    ids, labels = demo_batch()
    emb, head = (p.detach().requires_grad_() for p in demo_parameters())
    logits = torch.tanh(emb[ids]) @ head.T  # (B, T, V)
    ref = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        shift_labels(labels).reshape(-1),
        ignore_index=IGNORE_INDEX,
    )
    ref.backward()
    assert result.full_loss == pytest.approx(ref.item(), rel=1e-5)
    norm = torch.cat([emb.grad.flatten(), head.grad.flatten()]).norm()
    assert result.full_grad_norm == pytest.approx(norm.item(), rel=1e-5)


def test_per_rank_normalisation_disagrees(result):
    # each rank's own mean, independently of the demo: the reported loss is their average
    ids, labels = demo_batch()
    means = []
    for rows in torch.tensor_split(torch.arange(4), 2):
        emb, head = (p.detach() for p in demo_parameters())
        logits = torch.tanh(emb[ids[rows]]) @ head.T  # (B/2, T, V)
        targets = shift_labels(labels[rows]).reshape(-1)
        means.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets).item())
    assert result.rank_mean_losses == pytest.approx(means, rel=1e-5)
    assert result.per_rank_loss == pytest.approx(sum(means) / 2, rel=1e-5)
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
    ("kwargs", "error", "match"),
    [
        (dict(world_size=0), ValueError, "world_size must be >= 1"),
        (dict(world_size=True), TypeError, "world_size must be an int"),
        (dict(world_size=5), ValueError, "at least one sequence per rank"),
        (dict(lengths=(1, 4)), ValueError, "lengths must be a non-empty tuple of ints >= 2"),
        (dict(lengths=()), ValueError, "at least one sequence per rank"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        run_distributed_demo(**kwargs)
