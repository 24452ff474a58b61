"""Tests that pin what mutation testing of ``lmlessons.course.distributed`` found unpinned.

``mutmut`` on the module with its fast tests left most mutants without a test: the demos run
their work in spawned gloo processes, and the tests that start them are slow. Mutants survived
that change the tolerance of ``_agrees``, the checks and messages of ``demo_batch``,
``BalancingSetup`` and ``run_distributed_demo``, the tiny model's parameters and loss, the
arithmetic of the reported loss and of DDP's gradient average, ``f`` of global-batch balancing,
what one rank sends back, and how the demos assemble the ranks' messages. These tests run that
code in this process: the collectives in a one-process gloo group on 127.0.0.1, the launcher
replaced by a stand-in that returns made-up messages. Each compares with a dense reference
computation, a hand-written expectation or the message the source's f-string writes.
"""

from __future__ import annotations

import datetime
import os
import queue
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from _exact import gen, raises_exactly
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func as mixtral_loss

from lmlessons._checks import IGNORE_INDEX
from lmlessons.course import distributed as D
from lmlessons.course.distributed import (
    BalancingDemoResult,
    BalancingSetup,
    DistributedDemoResult,
    demo_batch,
    demo_parameters,
    run_balancing_demo,
    run_distributed_demo,
)
from lmlessons.shifting import shift_labels

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def one_process_group() -> Iterator[None]:
    """A gloo group of this process alone: an all-reduce returns its input."""
    before = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", D._loopback_interface() or "lo")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{D._free_port()}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()
        if before is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)


def _dense_loss(
    params: list[torch.Tensor], ids: torch.Tensor, labels: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """The bigram model's cross-entropy with the logits materialised."""
    emb, head = params
    logits = torch.tanh(emb[ids]) @ head.T  # (B, T, V)
    targets = shift_labels(labels).reshape(-1)  # (B * T,)
    return F.cross_entropy(logits.flatten(0, 1), targets, reduction=reduction)


def _dense_grads(ids: torch.Tensor, labels: torch.Tensor, scale: float = 1.0) -> list[torch.Tensor]:
    """Gradients of ``scale`` times the mean loss, for fresh demo parameters."""
    params = [p.detach().requires_grad_() for p in demo_parameters()]
    return list(torch.autograd.grad(scale * _dense_loss(params, ids, labels), params))


def _targets(labels: torch.Tensor) -> int:
    return int((shift_labels(labels) != IGNORE_INDEX).sum())


# --------------------------------------------------------------------------------- _agrees


@pytest.mark.parametrize(
    ("loss", "full", "agrees"),
    [
        (1e-5, 0.0, True),  # exactly at the tolerance: <= not <
        (2e-5, 0.0, False),
        (1.0 + 2e-5, 1.0, False),
        (0.5 + 1.5e-5, 0.5, False),  # below 1 the tolerance stays 1e-5
        (100.0005, 100.0, True),  # above 1 it is relative
        (100.002, 100.0, False),
        (-100.0005, -100.0, True),  # relative to |full|
        (-1.0, 1.0, False),  # a difference, not a sum
    ],
)
def test_agrees_tolerance(loss, full, agrees):
    """Catches a changed tolerance, comparison, scale floor or sign in ``_agrees``."""
    assert D._agrees(loss, full) is agrees


def _distributed_result(per_rank: float, global_count: float) -> DistributedDemoResult:
    return DistributedDemoResult(
        world_size=2,
        tokens_per_rank=(1, 2),
        rank_mean_losses=(1.0, 2.0),
        full_loss=2.0,
        per_rank_loss=per_rank,
        global_count_loss=global_count,
        full_grad_norm=1.0,
        per_rank_grad_max_diff=0.0,
        global_count_grad_max_diff=0.0,
    )


def test_result_properties_compare_their_own_loss():
    """Catches a property that compares another field, or nothing."""
    a, b = _distributed_result(2.0, 3.0), _distributed_result(3.0, 2.0)  # full loss 2
    assert (a.per_rank_agrees, a.global_count_agrees) == (True, False)
    assert (b.per_rank_agrees, b.global_count_agrees) == (False, True)


def _balancing_result(micro: list[list[float]], glob: list[list[float]], full: float):
    return BalancingDemoResult(
        world_size=len(micro),
        accumulation_steps=len(micro[0]),
        rank_counts=((1, 1),) * len(micro),
        micro_losses=tuple(map(tuple, micro)),
        global_losses=tuple(map(tuple, glob)),
        full_loss=full,
        full_grad_norm=1.0,
        micro_grad_max_diff=0.0,
        global_grad_max_diff=0.0,
    )


def test_balancing_means_over_ranks_and_steps():
    """Catches a changed mean: the sum over R ranks and S steps divided by R * S."""
    r = _balancing_result([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[1.0] * 3, [7.0] * 3], 3.5)
    assert r.micro_loss == pytest.approx(21 / 6)
    assert r.global_loss == pytest.approx(24 / 6)
    assert (r.micro_agrees, r.global_agrees) == (True, False)
    s = _balancing_result([[0.0] * 3, [0.0] * 3], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], 3.5)
    assert (s.micro_agrees, s.global_agrees) == (False, True)


# --------------------------------------------------------------------------------- demo_batch


@pytest.mark.parametrize("lengths", [(), (3, 1), (3, True), (2.0,), (4, "5")])
def test_demo_batch_refuses_bad_lengths(lengths):
    """Catches a changed check or message of ``demo_batch``."""
    message = f"lengths must be a non-empty tuple of ints >= 2, got {lengths!r}"
    raises_exactly(ValueError, message, lambda: demo_batch(lengths))


def test_demo_batch_pads_each_row_after_its_length():
    """Catches changed padding (ids 0, labels -100), shape, id range or label copy."""
    lengths = (2, 7, 4)
    ids, labels = demo_batch(lengths, vocab_size=3, seed=5)
    assert ids.shape == labels.shape == (3, 7)
    for row, n in enumerate(lengths):
        assert torch.equal(labels[row, :n], ids[row, :n])
        assert set(ids[row, :n].tolist()) <= {1, 2}
        assert ids[row, n:].eq(0).all() and labels[row, n:].eq(IGNORE_INDEX).all()


def test_demo_batch_draws_every_real_id():
    """Catches a changed lower or upper bound of the drawn ids (0 is padding only)."""
    ids, _ = demo_batch((400,), vocab_size=4)
    assert sorted(set(ids.flatten().tolist())) == [1, 2, 3]


def test_demo_defaults_fit_each_other():
    """Catches a changed default: seed 0, a vocabulary of 50 for the batch and the model, H = 8."""
    ids, _ = demo_batch()
    assert torch.equal(ids, demo_batch(seed=0)[0]) and ids.shape == (4, 16)
    emb, head = demo_parameters()
    assert emb.shape == head.shape == (50, 8)
    assert torch.equal(emb, demo_parameters(seed=0)[0])
    assert int(demo_batch((2000,))[0].max()) == 49  # every id of the model's vocabulary


def test_demo_batch_is_seeded():
    """Catches a seed that is ignored or not passed."""
    assert torch.equal(demo_batch(seed=3)[0], demo_batch(seed=3)[0])
    assert not torch.equal(demo_batch(seed=3)[0], demo_batch(seed=4)[0])


# --------------------------------------------------------------------------------- parameters


def test_demo_parameters_shapes_scales_and_seed():
    """Catches a changed shape, scale (head at half the embedding's), seed or gradient flag."""
    emb, head = demo_parameters(vocab_size=500, hidden_size=40, seed=2)
    assert emb.shape == head.shape == (500, 40)
    assert emb.requires_grad and head.requires_grad
    assert emb.std().item() == pytest.approx(1.0, abs=0.03)
    assert head.std().item() == pytest.approx(0.5, abs=0.015)
    again = demo_parameters(vocab_size=500, hidden_size=40, seed=2)
    other = demo_parameters(vocab_size=500, hidden_size=40, seed=3)
    assert torch.equal(emb, again[0]) and torch.equal(head, again[1])
    assert not torch.equal(emb, other[0]) and not torch.equal(head, other[1])


def test_loss_is_the_dense_mean_or_sum_over_a_count():
    """Catches a ``_loss`` that drops the tanh, the shift or ``num_items_in_batch``."""
    ids, labels = demo_batch()
    params = demo_parameters()
    dense = _dense_loss(params, ids, labels, reduction="sum")  # ()
    assert D._loss(params, ids, labels).item() == pytest.approx(
        dense.item() / _targets(labels), rel=1e-5
    )
    count = torch.tensor(7)
    assert D._loss(params, ids, labels, count).item() == pytest.approx(dense.item() / 7, rel=1e-5)


def test_grads_in_order_or_refused():
    """Catches ``_grads`` returning the wrong tensors or not refusing a missing gradient."""
    a, b = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    (a.sum() * 2 + b.sum() * 3).backward()
    grads = D._grads([a, b])
    assert [g.tolist() for g in grads] == [[2.0, 2.0], [3.0, 3.0, 3.0]]
    c = torch.ones(1, requires_grad=True)
    raises_exactly(RuntimeError, "a parameter got no gradient", lambda: D._grads([a, c]))


# --------------------------------------------------------------------------------- setup


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(world_size=0), ValueError, "world_size must be >= 1, got 0"),
        (dict(accumulation_steps=0), ValueError, "accumulation_steps must be >= 1, got 0"),
        (dict(tokens_per_micro_batch=0), ValueError, "tokens_per_micro_batch must be >= 1, got 0"),
        (dict(num_experts=1), ValueError, "num_experts must be >= 2, got 1"),
        (dict(top_k=0), ValueError, "top_k must be >= 1, got 0"),
        (dict(top_k=1.0), TypeError, "top_k must be an int, got float"),
        (dict(top_k=5), ValueError, "top_k must be at most num_experts=4, got 5"),
        (dict(hidden_size=3), ValueError, "hidden_size must be >= 4, got 3"),
        (dict(seed=-1), ValueError, "seed must be >= 0, got -1"),
    ],
)
def test_setup_refuses_with_exact_message(kwargs, error, message):
    """Catches a changed bound, name or message of ``BalancingSetup``'s checks."""
    raises_exactly(error, message, lambda: BalancingSetup(**kwargs))


def test_setup_accepts_the_bounds():
    """Catches a bound one too strict: 1 rank, step, token; 2 experts; top_k = E; H = E; seed 0."""
    setup = BalancingSetup(1, 1, 1, num_experts=2, top_k=2, hidden_size=2, seed=0)
    assert setup.hidden().shape == (1, 1, 1, 2)


def test_router_has_orthonormal_rows_and_no_bias():
    """Catches a router with a bias, other sizes, or rows not orthonormal or not seeded."""
    router = BalancingSetup(num_experts=3, top_k=1, hidden_size=5, seed=4).router()
    w = router.weight.detach()  # (3, 5)
    assert w.shape == (3, 5) and router.bias is None
    assert torch.allclose(w @ w.T, torch.eye(3), atol=1e-5)
    again = BalancingSetup(num_experts=3, top_k=1, hidden_size=5, seed=4).router().weight
    other = BalancingSetup(num_experts=3, top_k=1, hidden_size=5, seed=5).router().weight
    assert torch.equal(w, again.detach()) and not torch.equal(w, other.detach())


def test_hidden_is_twice_the_domain_plus_noise_of_its_own():
    """Catches a changed domain scale, or noise shared by the ranks or micro-batches."""
    setup = BalancingSetup(2, 2, 2000, num_experts=4, top_k=2, hidden_size=6, seed=1)
    w = setup.router().weight.detach()  # (4, 6)
    domains = torch.stack([w[0] + w[1], w[2] + w[3]])  # (2, 6)
    noise = setup.hidden() - 2 * domains[:, None, None, :]  # (2, 2, 2000, 6)
    assert noise.mean(dim=(1, 2)).abs().max() < 0.05
    assert noise.std().item() == pytest.approx(1.0, abs=0.05)
    assert not torch.allclose(noise[0], noise[1], atol=1e-3)  # each rank draws its own
    assert not torch.allclose(noise[:, 0], noise[:, 1], atol=1e-3)


# --------------------------------------------------------------------------------- collectives


def test_reported_loss_is_the_sum_over_ranks_over_world_size(one_process_group):
    """Catches a changed reduction or division of ``_reported_loss``; it leaves ``loss`` alone."""
    loss = torch.tensor(3.0)
    assert D._reported_loss(loss, 4) == pytest.approx(0.75)
    assert loss.item() == 3.0


def test_ddp_average_divides_the_summed_gradients(one_process_group):
    """Catches a changed division or source of ``_ddp_average``'s gradients."""
    p = torch.ones(2, requires_grad=True)
    (p * torch.tensor([2.0, 6.0])).sum().backward()
    assert D._ddp_average([p], 4)[0].tolist() == [0.5, 1.5]


def test_rank_step_per_rank_count(one_process_group):
    """Catches a changed naive step: own mean, reported / world size, gradients / world size."""
    ids, labels = (t[:2] for t in demo_batch())
    loss, reported, grads = D._rank_step(ids, labels, 3, fix=False)
    mean = _dense_loss(demo_parameters(), ids, labels).item()
    assert loss.item() == pytest.approx(mean, rel=1e-5)
    assert reported == pytest.approx(mean / 3, rel=1e-5)
    for g, ref in zip(grads, _dense_grads(ids, labels, 1 / 3)):
        assert torch.allclose(g, ref, atol=1e-6)


def test_rank_step_global_count(one_process_group):
    """Catches a changed fixed step: sum / all-reduced shifted count, times the world size."""
    ids, labels = (t[2:] for t in demo_batch())
    loss, reported, grads = D._rank_step(ids, labels, 3, fix=True)
    mean = _dense_loss(demo_parameters(), ids, labels).item()  # one rank: global = own count
    assert loss.item() == pytest.approx(3 * mean, rel=1e-5)
    assert reported == pytest.approx(mean, rel=1e-5)
    for g, ref in zip(grads, _dense_grads(ids, labels)):
        assert torch.allclose(g, ref, atol=1e-6)


def test_token_count_rank_sends_its_shard(one_process_group):
    """Catches a wrong shard, count, or field of what ``_token_count_rank`` sends."""
    lengths = (3, 5, 14, 16, 9)
    m = D._token_count_rank(1, 2, lengths)  # rows 3 and 4 of 5 (tensor_split)
    ids, labels = (t[3:] for t in demo_batch(lengths))
    mean = _dense_loss(demo_parameters(), ids, labels).item()
    assert m["tokens"] == _targets(labels)
    assert m["rank_mean"] == pytest.approx(mean, rel=1e-5)
    assert m["naive_loss"] == pytest.approx(mean / 2, rel=1e-5)
    assert m["fixed_loss"] == pytest.approx(mean, rel=1e-5)  # one rank: global = own count
    for key, scale in (("naive_grads", 0.5), ("fixed_grads", 1.0)):
        for g, ref in zip(m[key], _dense_grads(ids, labels, scale)):
            assert torch.allclose(torch.tensor(g), ref, atol=1e-6)


# --------------------------------------------------------------------------------- balancing


def _global_reference(logits: list[torch.Tensor], setup: BalancingSetup) -> list[torch.Tensor]:
    """Global-batch losses when this rank's counts are every rank's: f over R * S * n tokens."""
    E, K = setup.num_experts, setup.top_k
    chosen = torch.cat([z.topk(K, dim=-1).indices for z in logits])  # (S * n, K)
    tokens = setup.world_size * setup.accumulation_steps * setup.tokens_per_micro_batch
    f = torch.bincount(chosen.flatten(), minlength=E) / tokens  # (E,)
    return [E * (f * z.softmax(-1).mean(dim=0)).sum() for z in logits]


def test_micro_batch_losses_need_no_group():
    """Catches a micro-batch branch that drops ``top_k`` or ``num_experts`` or collects."""
    setup = BalancingSetup(2, 3, 5, num_experts=5, top_k=3, hidden_size=5)
    logits = [torch.randn(5, 5, generator=gen(s)) for s in range(3)]  # 3 x (n, E)
    losses = D._balancing_losses(logits, setup, global_batch=False)
    expected = [mixtral_loss((z,), 5, 3).item() for z in logits]
    assert [x.item() for x in losses] == pytest.approx(expected, rel=1e-6)


def test_global_batch_losses_count_every_token_of_the_window(one_process_group):
    """Catches a changed ``f`` (counts, top-k, R * S * n) or ``P`` of global-batch balancing."""
    setup = BalancingSetup(2, 3, 5, num_experts=5, top_k=3, hidden_size=5)
    logits = [torch.randn(5, 5, generator=gen(s), requires_grad=True) for s in range(3)]
    losses = D._balancing_losses(logits, setup, global_batch=True)
    expected = _global_reference(logits, setup)
    assert [x.item() for x in losses] == pytest.approx([x.item() for x in expected], rel=1e-6)
    assert losses[1].requires_grad


def test_balancing_rank_sends_both_balancings(one_process_group):
    """Catches a changed loss, accumulation, averaging or count in ``_balancing_rank``."""
    setup = BalancingSetup(2, 3, 6, num_experts=4, top_k=2, hidden_size=6)
    m = D._balancing_rank(1, 2, setup)
    hidden = setup.hidden()[1]  # (S, n, H)
    for name in ("micro", "global"):
        router = setup.router()
        logits = [router(h) for h in hidden]  # S x (n, E)
        if name == "micro":
            losses = [mixtral_loss((z,), 4, 2) for z in logits]
        else:
            losses = _global_reference(logits, setup)
        mean = torch.stack(losses).sum() / 3 / 2  # accumulation mean, then over 2 ranks
        (grad,) = torch.autograd.grad(mean, router.weight)  # (E, H)
        assert m[f"{name}_losses"] == pytest.approx([x.item() for x in losses], rel=1e-5)
        assert torch.allclose(torch.tensor(m[f"{name}_grad"]), grad, atol=1e-6)
    chosen = setup.router()(hidden).topk(2, dim=-1).indices  # (S, n, K)
    assert m["counts"] == torch.bincount(chosen.flatten(), minlength=4).tolist()


# --------------------------------------------------------------------------------- processes


def test_free_port_is_bindable():
    """Catches a port that is not an unprivileged free port of 127.0.0.1."""
    port = D._free_port()
    assert isinstance(port, int) and 1024 <= port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def test_loopback_interface(monkeypatch):
    """Catches a changed name list or fallback of ``_loopback_interface``."""
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "eth0"), (2, "lo0")])
    assert D._loopback_interface() == "lo0"
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "lo"), (2, "eth0")])
    assert D._loopback_interface() == "lo"
    monkeypatch.setattr(socket, "if_nameindex", lambda: [(1, "eth0")])
    assert D._loopback_interface() is None


def _probe(rank: int, world_size: int, payload: Any) -> dict:
    """A process body that reports what it sees."""
    return {
        "seen": (rank, world_size, payload),
        "group": (dist.get_rank(), dist.get_world_size()),
        "threads": torch.get_num_threads(),
        "iface": os.environ.get("GLOO_SOCKET_IFNAME"),
    }


def test_process_runs_the_body_in_a_group_and_leaves_it(monkeypatch):
    """Catches a ``_process`` that changes the body's arguments, group, threads or message."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    monkeypatch.setattr(D, "_loopback_interface", lambda: "lo")
    sent: queue.SimpleQueue = queue.SimpleQueue()
    torch.set_num_threads(2)
    try:
        D._process(0, 1, D._free_port(), _probe, "payload", sent)
    finally:
        torch.set_num_threads(1)
    m = sent.get_nowait()
    assert m == {"seen": (0, 1, "payload"), "group": (0, 1), "threads": 1, "iface": "lo", "rank": 0}
    assert sent.empty() and not dist.is_initialized()


def test_process_keeps_a_chosen_interface(monkeypatch):
    """Catches a ``_process`` that overrides an interface the user set."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setattr(D, "_loopback_interface", lambda: "no-such-interface")
    sent: queue.SimpleQueue = queue.SimpleQueue()
    D._process(0, 1, D._free_port(), _probe, None, sent)
    assert sent.get_nowait()["iface"] == "lo"


def _failing(rank: int, world_size: int, payload: Any) -> dict:
    raise RuntimeError("body failed")


def test_process_leaves_the_group_when_the_body_fails(monkeypatch):
    """Catches a ``_process`` that does not destroy its group on an error."""
    monkeypatch.setattr(D, "_loopback_interface", lambda: "lo")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    raises_exactly(
        RuntimeError,
        "body failed",
        lambda: D._process(0, 1, D._free_port(), _failing, None, queue.SimpleQueue()),
    )
    assert not dist.is_initialized()


# --------------------------------------------------------------------------------- demos


def _stand_in(msgs: list[dict], calls: list[tuple]) -> Callable[..., list[dict]]:
    """A ``_launch`` that records its arguments and returns ``msgs``."""

    def launch(body: Callable[..., dict], world_size: int, payload: Any) -> list[dict]:
        calls.append((body, world_size, payload))
        return msgs

    return launch


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(world_size=0), ValueError, "world_size must be >= 1, got 0"),
        (dict(world_size=True), TypeError, "world_size must be an int, got bool"),
        (dict(world_size=3, lengths=(4, 5)), ValueError,
         "lengths must give at least one sequence per rank (3), got 2"),
        (dict(world_size=1, lengths=(1,)), ValueError,
         "lengths must be a non-empty tuple of ints >= 2, got (1,)"),
    ],
)  # fmt: skip
def test_distributed_demo_refuses_before_launching(monkeypatch, kwargs, error, message):
    """Catches a changed check or message of ``run_distributed_demo``."""
    calls: list[tuple] = []
    monkeypatch.setattr(D, "_launch", _stand_in([], calls))
    raises_exactly(error, message, lambda: run_distributed_demo(**kwargs))
    assert calls == []


def test_distributed_demo_accepts_one_sequence_per_rank(monkeypatch):
    """Catches a bound one too strict: as many sequences as ranks is enough."""
    calls: list[tuple] = []
    monkeypatch.setattr(D, "_launch", _stand_in([], calls))
    with pytest.raises(IndexError):  # the stand-in sends no messages
        run_distributed_demo(world_size=2, lengths=(4, 5))
    assert calls == [(D._token_count_rank, 2, (4, 5))]


def test_distributed_demo_assembles_rank_zero_and_the_full_batch(monkeypatch):
    """Catches a changed full-batch loss or norm, or fields taken from the wrong message."""
    ids, labels = demo_batch()
    full = _dense_grads(ids, labels)  # [(V, H), (V, H)]

    def msg(tokens: int, loss: float, shift: float) -> dict:
        grads = [g.clone() for g in full]
        grads[1][3, 2] += shift  # (V, H)
        out = [grads, [g + 2 * shift for g in full]]
        return dict(tokens=tokens, rank_mean=loss, naive_loss=loss + 1, fixed_loss=loss + 2,
                    naive_grads=[g.tolist() for g in out[0]],
                    fixed_grads=[g.tolist() for g in out[1]])  # fmt: skip

    calls: list[tuple] = []
    monkeypatch.setattr(D, "_launch", _stand_in([msg(7, 1.0, 0.25), msg(9, 5.0, 4.0)], calls))
    r = run_distributed_demo()  # default: 2 ranks
    assert calls == [(D._token_count_rank, 2, (3, 5, 14, 16))]
    assert (r.world_size, r.tokens_per_rank, r.rank_mean_losses) == (2, (7, 9), (1.0, 5.0))
    assert (r.per_rank_loss, r.global_count_loss) == (2.0, 3.0)
    assert r.full_loss == pytest.approx(_dense_loss(demo_parameters(), ids, labels).item(), 1e-6)
    assert r.full_grad_norm == pytest.approx(
        torch.cat([g.flatten() for g in full]).norm().item(), 1e-5
    )
    assert r.per_rank_grad_max_diff == pytest.approx(0.25, abs=1e-6)
    assert r.global_count_grad_max_diff == pytest.approx(0.5, abs=1e-6)


def test_balancing_demo_assembles_every_rank_and_the_whole_batch(monkeypatch):
    """Catches a changed whole-batch loss, gradient or norm, or a field of the messages lost."""
    setup = BalancingSetup(2, 3, 4, num_experts=4, top_k=1, hidden_size=5)
    router = setup.router()
    loss = mixtral_loss((router(setup.hidden().reshape(-1, 5)),), 4, 1)
    (grad,) = torch.autograd.grad(loss, router.weight)  # (E, H)

    def msg(rank: int, shift: float) -> dict:
        moved = grad.clone()
        moved[rank, rank] += shift  # (E, H)
        return dict(counts=[rank, 1, 2, 3], micro_losses=[rank, 1.5, 2.0],
                    global_losses=[rank, 0.5, 1.0], micro_grad=moved.tolist(),
                    global_grad=(grad - shift / 4).tolist())  # fmt: skip

    calls: list[tuple] = []
    monkeypatch.setattr(D, "_launch", _stand_in([msg(0, 0.5), msg(1, 0.75)], calls))
    r = run_balancing_demo(setup)
    assert calls == [(D._balancing_rank, 2, setup)]
    assert (r.world_size, r.accumulation_steps) == (2, 3)
    assert r.rank_counts == ((0, 1, 2, 3), (1, 1, 2, 3))
    assert r.micro_losses == ((0, 1.5, 2.0), (1, 1.5, 2.0))
    assert r.global_losses == ((0, 0.5, 1.0), (1, 0.5, 1.0))
    assert r.full_loss == pytest.approx(loss.item(), rel=1e-6)
    assert r.full_grad_norm == pytest.approx(grad.norm().item(), rel=1e-6)
    assert r.micro_grad_max_diff == pytest.approx(0.75, abs=1e-6)
    assert r.global_grad_max_diff == pytest.approx(0.75 / 4, abs=1e-6)
