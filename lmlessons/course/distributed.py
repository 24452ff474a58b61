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
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX, check_int
from lmlessons.linear_ce import linear_cross_entropy
from lmlessons.shifting import num_targets, shift_labels

__all__ = ["DistributedDemoResult", "demo_batch", "demo_parameters", "run_distributed_demo"]


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
        return abs(self.per_rank_loss - self.full_loss) <= 1e-5 * max(1.0, abs(self.full_loss))

    @property
    def global_count_agrees(self) -> bool:
        return abs(self.global_count_loss - self.full_loss) <= 1e-5 * max(1.0, abs(self.full_loss))


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


def _worker(rank: int, world_size: int, port: int, lengths: tuple[int, ...], queue: Any) -> None:
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
        ids, labels = demo_batch(lengths)
        shard = torch.tensor_split(torch.arange(ids.shape[0]), world_size)[rank]  # this rank's rows
        ids, labels = ids[shard], labels[shard]
        rank_mean, naive_loss, naive_grads = _rank_step(ids, labels, world_size, fix=False)
        _, fixed_loss, fixed_grads = _rank_step(ids, labels, world_size, fix=True)
        queue.put(
            {
                "rank": rank,
                "tokens": int(num_targets(labels, shift=True).sum()),
                "rank_mean": rank_mean.item(),
                "naive_loss": naive_loss,
                "fixed_loss": fixed_loss,
                "naive_grads": [g.tolist() for g in naive_grads],
                "fixed_grads": [g.tolist() for g in fixed_grads],
            }
        )
    finally:
        dist.destroy_process_group()


def run_distributed_demo(
    world_size: int = 2, lengths: tuple[int, ...] = (3, 5, 14, 16)
) -> DistributedDemoResult:
    """Run the per-rank-count (buggy) and global-count (fixed) losses on ``world_size`` processes.

    Rows of the batch from :func:`demo_batch` are split contiguously over the ranks, so with the
    default lengths rank 0 gets the two short sequences and rank 1 the two long ones. The
    full-batch loss and gradients are computed here, in one process, for comparison.
    Takes a few seconds (two fresh Python processes import torch).
    """
    import torch.multiprocessing as mp

    world_size = check_int("world_size", world_size, minimum=1)
    if len(lengths) < world_size:
        raise ValueError(
            f"lengths must give at least one sequence per rank ({world_size}), got {len(lengths)}"
        )
    ids, labels = demo_batch(lengths)  # also validates lengths

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(
        _worker,
        args=(world_size, _free_port(), tuple(lengths), queue),
        nprocs=world_size,
        join=True,
    )
    msgs = sorted((queue.get() for _ in range(world_size)), key=lambda m: m["rank"])

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
