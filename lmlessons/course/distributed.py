"""Loss normalisation across data-parallel workers, on a real ``torch.distributed`` run.

Data parallelism splits a batch over ranks; each rank computes a loss and gradients on its shard,
and DDP then *averages* the gradients over ranks. If every rank normalises by its *own* token
count, the result is a mean of per-rank means, which is not the loss of the whole batch when the
ranks see different numbers of target tokens (padding, -100 labels): the same bug as the
October 2024 gradient-accumulation bug, one level up. transformers fixed it with
``average_tokens_across_devices`` (PR #34373): all-reduce (sum) the token count first, divide each
rank's *sum* of token losses by the global count, and multiply by the world size to undo DDP's
average (``Trainer.compute_loss``).

:func:`run_distributed_demo` launches ``world_size`` CPU processes (gloo backend, 127.0.0.1 only)
that do both, and compares them with one process on the whole batch.

:func:`run_balancing_demo` does the same for a mixture of experts' load-balancing loss
(lesson 14): balanced per micro-batch, the mean over micro-batches is not the loss of the whole
batch; with the expert counts all-reduced over the accumulation window and the ranks (Qwen's
global-batch balancing), it is. Both demos start their processes with one launcher,
:func:`_launch`.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX, check_int
from lmlessons.linear_ce import linear_cross_entropy
from lmlessons.moe import expert_counts, load_balancing_loss_func
from lmlessons.shifting import num_targets, shift_labels

__all__ = [
    "BalancingDemoResult",
    "BalancingSetup",
    "DistributedDemoResult",
    "demo_batch",
    "demo_parameters",
    "run_balancing_demo",
    "run_distributed_demo",
]


def _agrees(loss: float, full_loss: float) -> bool:
    """Whether ``loss`` equals the one-process ``full_loss`` up to float32 rounding (1e-5,
    relative above 1)."""
    return abs(loss - full_loss) <= 1e-5 * max(1.0, abs(full_loss))


@dataclass(frozen=True)
class DistributedDemoResult:
    """Numbers of one run; ``*_grad_max_diff`` are max |gradient - full-batch gradient|."""

    world_size: int
    tokens_per_rank: tuple[int, ...]  # target tokens (labels != -100 after the shift) per rank
    rank_mean_losses: tuple[float, ...]  # each rank's loss normalised by its own count
    full_loss: float  # one process, whole batch: sum of token losses / all target tokens
    per_rank_loss: float  # what the ranks report when each divides by its own count (mean of means)
    global_count_loss: float  # all-reduced count: sum of token losses / global count
    full_grad_norm: float
    per_rank_grad_max_diff: float
    global_count_grad_max_diff: float

    @property
    def per_rank_agrees(self) -> bool:
        return _agrees(self.per_rank_loss, self.full_loss)

    @property
    def global_count_agrees(self) -> bool:
        return _agrees(self.global_count_loss, self.full_loss)


def demo_batch(
    lengths: tuple[int, ...] = (3, 5, 14, 16), *, vocab_size: int = 50, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch of token ids and CLM labels (-100 on padding) with the given lengths.

    Returns ``input_ids`` (B, T) and ``labels`` (B, T), unshifted (as transformers' models take
    them).
    """
    if not lengths or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in lengths):
        raise ValueError(f"lengths must be a non-empty tuple of ints >= 2, got {lengths!r}")
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(1, vocab_size, (len(lengths), T), generator=g)  # (B, T); id 0 is padding
    labels = ids.clone()
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
        labels[row, n:] = IGNORE_INDEX
    return ids, labels


def demo_parameters(
    vocab_size: int = 50, hidden_size: int = 8, *, seed: int = 0
) -> list[torch.Tensor]:
    """Embedding (V, H) and output weight (V, H) of a tiny bigram language model."""
    g = torch.Generator().manual_seed(seed + 1)
    emb = torch.randn(vocab_size, hidden_size, generator=g)
    head = 0.5 * torch.randn(vocab_size, hidden_size, generator=g)
    return [emb.requires_grad_(), head.requires_grad_()]


def _loss(
    params: list[torch.Tensor],
    ids: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: torch.Tensor | None = None,
) -> torch.Tensor:
    emb, head = params
    hidden = torch.tanh(emb[ids])  # (B, T, H)
    return linear_cross_entropy(
        hidden, head, shift_labels(labels), num_items_in_batch=num_items_in_batch
    )


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    grads = []
    for p in params:
        if p.grad is None:
            raise RuntimeError("a parameter got no gradient")
        grads.append(p.grad)
    return grads


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_interface() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):  # pragma: no cover
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)


def _ddp_average(params: list[torch.Tensor], world_size: int) -> list[torch.Tensor]:
    """What ``DistributedDataParallel`` does with the gradients: sum over ranks, / world size."""
    import torch.distributed as dist

    grads = _grads(params)
    for g in grads:
        dist.all_reduce(g, op=dist.ReduceOp.SUM)
    return [g / world_size for g in grads]


def _reported_loss(loss: torch.Tensor, world_size: int) -> float:
    """The mean over ranks of the loss each rank reports (what a training log shows)."""
    import torch.distributed as dist

    reported = loss.detach().clone()
    dist.all_reduce(reported, op=dist.ReduceOp.SUM)
    return float(reported) / world_size


def _rank_step(
    ids: torch.Tensor, labels: torch.Tensor, world_size: int, fix: bool
) -> tuple[torch.Tensor, float, list[torch.Tensor]]:
    """One rank's loss, reported loss and DDP-averaged gradients. ``fix=False``: the rank
    divides by its own target count (the bug); ``fix=True``: the count is all-reduced first,
    the local sum divided by it and multiplied by the world size (transformers' fix)."""
    import torch.distributed as dist

    count = None
    if fix:
        count = num_targets(labels, shift=True).sum()  # () this rank's targets
        dist.all_reduce(count, op=dist.ReduceOp.SUM)  # () all ranks' targets
    params = demo_parameters()
    loss = _loss(params, ids, labels, num_items_in_batch=count)
    if fix:
        loss = loss * world_size  # undo DDP's average over ranks
    loss.backward()
    grads = _ddp_average(params, world_size)
    return loss, _reported_loss(loss, world_size), grads


def _process(
    rank: int, world_size: int, port: int, body: Callable[..., dict], payload: Any, queue: Any
) -> None:
    """One spawned process: join the gloo group on 127.0.0.1, run ``body`` and send its result."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    iface = _loopback_interface()
    if iface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)  # keep gloo on the loopback device
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        queue.put({**body(rank, world_size, payload), "rank": rank})
    finally:
        dist.destroy_process_group()


def _launch(body: Callable[..., dict], world_size: int, payload: Any) -> list[dict]:
    """Run ``body(rank, world_size, payload)`` on ``world_size`` fresh CPU processes joined in
    one gloo group; their results (dicts of plain Python values), ordered by rank. ``body``
    must be a module-level function (the processes are spawned, so it is pickled by name)."""
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(
        _process,
        args=(world_size, _free_port(), body, payload, queue),
        nprocs=world_size,
        join=True,
    )
    return sorted((queue.get() for _ in range(world_size)), key=lambda m: m["rank"])


def _token_count_rank(rank: int, world_size: int, lengths: tuple[int, ...]) -> dict:
    """:func:`run_distributed_demo`'s work on one rank: its rows, both normalisations."""
    ids, labels = demo_batch(lengths)
    shard = torch.tensor_split(torch.arange(ids.shape[0]), world_size)[rank]  # this rank's rows
    ids, labels = ids[shard], labels[shard]
    rank_mean, naive_loss, naive_grads = _rank_step(ids, labels, world_size, fix=False)
    _, fixed_loss, fixed_grads = _rank_step(ids, labels, world_size, fix=True)
    return {
        "tokens": int(num_targets(labels, shift=True).sum()),
        "rank_mean": rank_mean.item(),
        "naive_loss": naive_loss,
        "fixed_loss": fixed_loss,
        "naive_grads": [g.tolist() for g in naive_grads],
        "fixed_grads": [g.tolist() for g in fixed_grads],
    }


def run_distributed_demo(
    world_size: int = 2, lengths: tuple[int, ...] = (3, 5, 14, 16)
) -> DistributedDemoResult:
    """Run the per-rank-count (buggy) and global-count (fixed) losses on ``world_size`` processes.

    Rows of the batch from :func:`demo_batch` are split contiguously over the ranks, so with the
    default lengths rank 0 gets the two short sequences and rank 1 the two long ones. The
    full-batch loss and gradients are computed here, in one process, for comparison.
    Takes a few seconds (two fresh Python processes import torch).
    """
    world_size = check_int("world_size", world_size, minimum=1)
    if len(lengths) < world_size:
        raise ValueError(
            f"lengths must give at least one sequence per rank ({world_size}), got {len(lengths)}"
        )
    ids, labels = demo_batch(lengths)  # also validates lengths
    msgs = _launch(_token_count_rank, world_size, tuple(lengths))

    params = demo_parameters()
    full = _loss(params, ids, labels)
    full.backward()
    full_grads = _grads(params)

    def max_diff(grads: list[list[float]]) -> float:
        return max(float((torch.tensor(g) - f).abs().max()) for g, f in zip(grads, full_grads))

    return DistributedDemoResult(
        world_size=world_size,
        tokens_per_rank=tuple(m["tokens"] for m in msgs),
        rank_mean_losses=tuple(m["rank_mean"] for m in msgs),
        full_loss=full.item(),
        per_rank_loss=msgs[0]["naive_loss"],
        global_count_loss=msgs[0]["fixed_loss"],
        full_grad_norm=float(torch.stack([(g**2).sum() for g in full_grads]).sum().sqrt()),
        per_rank_grad_max_diff=max_diff(msgs[0]["naive_grads"]),
        global_count_grad_max_diff=max_diff(msgs[0]["fixed_grads"]),
    )


# --- global-batch load balancing (lesson 14) ---------------------------------------------------


@dataclass(frozen=True)
class BalancingDemoResult:
    """Numbers of one :func:`run_balancing_demo` run. Losses are indexed ``[rank][step]``; the
    ``*_grad_max_diff`` are max |DDP-averaged router gradient - whole-batch gradient|."""

    world_size: int
    accumulation_steps: int
    # (R, E): the top-k assignments of each rank's window to each expert
    rank_counts: tuple[tuple[int, ...], ...]
    micro_losses: tuple[tuple[float, ...], ...]  # (R, S): f and P of the micro-batch alone
    global_losses: tuple[tuple[float, ...], ...]  # (R, S): f all-reduced, P of the micro-batch
    full_loss: float  # one process, every micro-batch of every rank in one forward pass
    full_grad_norm: float
    micro_grad_max_diff: float
    global_grad_max_diff: float

    @property
    def micro_loss(self) -> float:
        """The mean of the micro-batch-balanced losses: what the step optimises."""
        return sum(map(sum, self.micro_losses)) / (self.world_size * self.accumulation_steps)

    @property
    def global_loss(self) -> float:
        """The mean of the global-batch-balanced losses."""
        return sum(map(sum, self.global_losses)) / (self.world_size * self.accumulation_steps)

    @property
    def global_agrees(self) -> bool:
        return _agrees(self.global_loss, self.full_loss)

    @property
    def micro_agrees(self) -> bool:
        return _agrees(self.micro_loss, self.full_loss)


@dataclass(frozen=True)
class BalancingSetup:
    """The balancing demo's sizes, checked when made: ``world_size`` ranks (R), each with
    ``accumulation_steps`` micro-batches (S) of ``tokens_per_micro_batch`` tokens (n), routed by
    :meth:`router` to ``num_experts`` experts (E >= 2), ``top_k`` each (K <= E), from
    ``hidden_size`` features (H >= E). :func:`run_balancing_demo` sends it to every rank."""

    world_size: int = 2
    accumulation_steps: int = 2
    tokens_per_micro_batch: int = 16
    num_experts: int = 4
    top_k: int = 2
    hidden_size: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("world_size", "accumulation_steps", "tokens_per_micro_batch"):
            check_int(name, getattr(self, name), minimum=1)
        experts = check_int("num_experts", self.num_experts, minimum=2)
        if check_int("top_k", self.top_k, minimum=1) > experts:
            raise ValueError(f"top_k must be at most num_experts={experts}, got {self.top_k}")
        check_int("hidden_size", self.hidden_size, minimum=experts)
        check_int("seed", self.seed, minimum=0)

    def router(self) -> torch.nn.Linear:
        """A fresh router, ``nn.Linear(H, E, bias=False)``, whose ``E`` weight rows are
        orthonormal (random directions from ``seed``): each expert has a direction of its own."""
        H, g = self.hidden_size, torch.Generator().manual_seed(self.seed)
        q, _ = torch.linalg.qr(torch.randn(H, H, generator=g))  # (H, H) orthogonal
        router = torch.nn.Linear(H, self.num_experts, bias=False)
        with torch.no_grad():
            router.weight.copy_(q[: self.num_experts])  # (E, H)
        return router

    def hidden(self) -> torch.Tensor:
        """Hidden states ``(R, S, n, H)``: ``S`` micro-batches of ``n`` tokens for each rank.

        Rank ``r`` holds one "domain": its tokens point at experts ``r * K, ..., r * K + K - 1``
        (mod ``E``) of :meth:`router`, plus noise. Each rank alone routes unevenly; with
        ``R * K = E`` (the defaults) the domains cover every expert once, so the global batch is
        close to even.
        """
        R, S, K = self.world_size, self.accumulation_steps, self.top_k
        n = self.tokens_per_micro_batch
        weight = self.router().weight.detach()  # (E, H)
        g = torch.Generator().manual_seed(self.seed + 1)
        noise = torch.randn(R, S, n, self.hidden_size, generator=g)  # (R, S, n, H)
        experts = (torch.arange(R)[:, None] * K + torch.arange(K)) % self.num_experts  # (R, K)
        domains = 2.0 * weight[experts].sum(dim=1)  # (R, H): the sum of each domain's expert rows
        return domains[:, None, None, :] + noise  # (R, S, n, H)


def _balancing_losses(
    logits: list[torch.Tensor], setup: BalancingSetup, global_batch: bool
) -> list[torch.Tensor]:
    """One rank's balancing loss of each micro-batch (``logits``: ``S`` tensors ``(n, E)``).
    ``global_batch``: ``f`` from the counts of the window summed over all ranks (one all-reduce
    of ``E`` numbers), ``P`` the micro-batch's own; else ``load_balancing_loss_func`` alone."""
    import torch.distributed as dist

    num_experts, top_k = setup.num_experts, setup.top_k
    if not global_batch:
        return [load_balancing_loss_func((z,), num_experts, top_k) for z in logits]
    chosen = [z.softmax(dim=-1).topk(top_k, dim=-1).indices for z in logits]  # S x (n, K)
    counts = sum(expert_counts(c, num_experts) for c in chosen)  # (E,) this rank's window
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)  # (E,) every micro-batch of every rank
    f = counts / (
        setup.world_size * setup.accumulation_steps * setup.tokens_per_micro_batch
    )  # (E,)
    return [num_experts * (f * z.softmax(dim=-1).mean(dim=0)).sum() for z in logits]


def _balancing_rank(rank: int, world_size: int, setup: BalancingSetup) -> dict:
    """:func:`run_balancing_demo`'s work on one rank: both balancings, accumulated over the
    micro-batches (each loss / S) and averaged over the ranks like DDP."""
    hidden = setup.hidden()[rank]  # (S, n, H): this rank's micro-batches
    result: dict[str, Any] = {}
    for name, global_batch in (("micro", False), ("global", True)):
        router = setup.router()
        logits = [router(h) for h in hidden]  # S x (n, E): one forward per micro-batch
        losses = _balancing_losses(logits, setup, global_batch)
        for loss in losses:
            (loss / setup.accumulation_steps).backward()  # gradient accumulation: the mean
        (grad,) = _ddp_average([router.weight], world_size)  # (E, H)
        result[f"{name}_losses"] = [loss.item() for loss in losses]
        result[f"{name}_grad"] = grad.tolist()
    with torch.no_grad():
        chosen = router(hidden).softmax(dim=-1).topk(setup.top_k, dim=-1).indices  # (S, n, K)
    result["counts"] = [int(c) for c in expert_counts(chosen, setup.num_experts)]
    return result


def run_balancing_demo(setup: BalancingSetup = BalancingSetup()) -> BalancingDemoResult:
    """Micro-batch and global-batch load balancing on ``setup.world_size`` processes, each with
    ``setup.accumulation_steps`` micro-batches of :meth:`BalancingSetup.hidden`, against one
    process that computes ``load_balancing_loss_func`` on all of them at once.

    Each rank backpropagates every micro-batch's loss divided by the accumulation steps, then
    averages the router's gradient over the ranks (what DDP does). Global-batch balancing gives
    the whole-batch loss and gradient because every micro-batch has the same number of tokens:
    the mean of the micro-batches' ``P`` is then the batch's ``P``. Takes a few seconds.
    """
    if not isinstance(setup, BalancingSetup):
        raise TypeError(f"setup must be a BalancingSetup, got {type(setup).__name__}")
    hidden = setup.hidden()  # (R, S, n, H)
    msgs = _launch(_balancing_rank, setup.world_size, setup)

    router = setup.router()
    logits = router(hidden.reshape(-1, setup.hidden_size))  # (R * S * n, E): the whole batch
    full = load_balancing_loss_func((logits,), setup.num_experts, setup.top_k)
    full.backward()
    full_grad = _grads([router.weight])[0]  # (E, H)

    def max_diff(key: str) -> float:
        return max(float((torch.tensor(m[key]) - full_grad).abs().max()) for m in msgs)

    return BalancingDemoResult(
        world_size=setup.world_size,
        accumulation_steps=setup.accumulation_steps,
        rank_counts=tuple(tuple(m["counts"]) for m in msgs),
        micro_losses=tuple(tuple(m["micro_losses"]) for m in msgs),
        global_losses=tuple(tuple(m["global_losses"]) for m in msgs),
        full_loss=full.item(),
        full_grad_norm=float(full_grad.norm()),
        micro_grad_max_diff=max_diff("micro_grad"),
        global_grad_max_diff=max_diff("global_grad"),
    )
