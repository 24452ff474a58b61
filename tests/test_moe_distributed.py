"""lmlessons.course.distributed's balancing demo: load balancing on real gloo processes with
gradient accumulation. Micro-batch balancing is not the whole batch's loss; global-batch
balancing (the expert counts all-reduced) is, loss and averaged gradient."""

from __future__ import annotations

import pytest
import torch
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func as mixtral_loss

from lmlessons.course.distributed import (
    BalancingDemoResult,
    BalancingSetup,
    run_balancing_demo,
)
from lmlessons.moe import load_spread

E, K = 4, 2
SETUP = BalancingSetup(2, 2, 16, num_experts=E, top_k=K, hidden_size=8)  # the lesson's demo

# Starting real processes takes seconds: these tests are slow (make test runs them).
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def result() -> BalancingDemoResult:
    return run_balancing_demo(BalancingSetup(world_size=2, accumulation_steps=2))


def _logits() -> torch.Tensor:
    """The router logits of the demo's micro-batches, here in one process: (R, S, n, E)."""
    with torch.no_grad():
        return SETUP.router()(SETUP.hidden())


def _whole_batch_loss_and_grad() -> tuple[float, torch.Tensor]:
    """transformers' Mixtral loss on every token at once, and its router gradient (E, H)."""
    router = SETUP.router()
    hidden = SETUP.hidden()  # (R, S, n, H)
    loss = mixtral_loss((router(hidden.reshape(-1, 8)),), E, K)
    loss.backward()
    return loss.item(), router.weight.grad


@slow
def test_each_rank_routes_unevenly_and_the_batch_evenly(result):
    chosen = _logits().topk(K, dim=-1).indices  # (R, S, n, K)
    counts = [torch.bincount(c.reshape(-1), minlength=E) for c in chosen]  # R x (E,)
    assert result.rank_counts == tuple(tuple(c.tolist()) for c in counts)
    assert all(load_spread(c.float()).cv > 0.5 for c in counts)
    assert load_spread(sum(counts).float()).cv < 0.2


@slow
def test_micro_losses_are_each_micro_batch_alone(result):
    expected = [[mixtral_loss((z,), E, K).item() for z in rank] for rank in _logits()]
    assert [list(r) for r in result.micro_losses] == [pytest.approx(r, rel=1e-5) for r in expected]


@slow
def test_global_losses_use_the_counts_of_every_micro_batch_of_every_rank(result):
    logits = _logits()  # (R, S, n, E)
    chosen = logits.topk(K, dim=-1).indices  # (R, S, n, K)
    f = torch.bincount(chosen.reshape(-1), minlength=E) / (logits.numel() // E)  # (E,)
    expected = E * (f * logits.softmax(-1).mean(dim=2)).sum(-1)  # (R, S)
    assert [list(r) for r in result.global_losses] == [
        pytest.approx(r, rel=1e-5) for r in expected.tolist()
    ]


@slow
def test_global_batch_balancing_is_the_whole_batch(result):
    loss, grad = _whole_batch_loss_and_grad()
    assert result.full_loss == pytest.approx(loss, rel=1e-5)
    assert result.full_grad_norm == pytest.approx(grad.norm().item(), rel=1e-5)
    assert result.global_agrees
    assert result.global_loss == pytest.approx(loss, rel=1e-5)
    assert result.global_grad_max_diff < 1e-5 * result.full_grad_norm
    assert result.full_grad_norm > 1e-3


@slow
def test_micro_batch_balancing_is_not(result):
    assert not result.micro_agrees
    assert result.micro_loss - result.full_loss > 0.5  # each domain alone looks unbalanced
    assert result.micro_grad_max_diff > 0.1 * result.full_grad_norm


@slow
def test_three_ranks_without_accumulation():
    three = run_balancing_demo(BalancingSetup(3, accumulation_steps=1, tokens_per_micro_batch=8))
    assert len(three.global_losses) == 3 and all(len(r) == 1 for r in three.global_losses)
    assert three.global_agrees and not three.micro_agrees
    assert three.global_grad_max_diff < 1e-5 * three.full_grad_norm < three.micro_grad_max_diff


def test_batch_shape_and_domains():
    setup = BalancingSetup(3, 2, 5, num_experts=E, top_k=K, hidden_size=8)
    hidden = setup.hidden()  # (R, S, n, H)
    assert hidden.shape == (3, 2, 5, 8)
    assert torch.equal(hidden, BalancingSetup(3, 2, 5, num_experts=E, top_k=K).hidden())
    with torch.no_grad():
        means = setup.router()(hidden).mean(dim=(1, 2))  # (3, E)
    assert means.topk(K).indices.sort().values.tolist() == [[0, 1], [2, 3], [0, 1]]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(world_size=0), ValueError, "world_size must be >= 1"),
        (dict(world_size=True), TypeError, "world_size must be an int"),
        (dict(accumulation_steps=0), ValueError, "accumulation_steps must be >= 1"),
        (dict(tokens_per_micro_batch=2.0), TypeError, "tokens_per_micro_batch must be an int"),
        (dict(num_experts=1), ValueError, "num_experts must be >= 2"),
        (dict(top_k=5), ValueError, "top_k must be at most num_experts=4"),
        (dict(hidden_size=3), ValueError, "hidden_size must be >= 4"),
        (dict(seed=-1), ValueError, "seed must be >= 0"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        BalancingSetup(**kwargs)


def test_run_balancing_demo_takes_a_setup():
    with pytest.raises(TypeError, match="setup must be a BalancingSetup, got dict"):
        run_balancing_demo({"world_size": 2})
