"""Data-parallel ranks simulated by threads in one process, for the ``rank_loss`` checker.

``all_reduce(tensor)`` really sums over the ranks: each rank deposits its tensor and waits (a
condition variable with a timeout, like a barrier) until every rank has deposited its tensor for
the same call; the sum is returned (and, like ``torch.distributed.all_reduce``, written into
``tensor`` in place when it needs no gradient). If the ranks make different numbers of calls
(``if count > 0: all_reduce(count)``), a waiting rank fails as soon as another rank has returned,
and never later than a timeout: the check reports it where a real job would hang until NCCL or
gloo time out. :func:`ranks` runs a learner's function on every rank, as a ``via`` of
:meth:`._framework.Runner.call`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

TIMEOUT = 2.0  # seconds a rank waits for the others in one all_reduce


class MismatchedAllReduce(RuntimeError):
    """The ranks did not all call ``all_reduce`` the same number of times."""


class Group:
    """A process group of ``world_size`` threads: ``all_reduce`` sums a tensor over them."""

    def __init__(self, world_size: int, timeout: float = TIMEOUT) -> None:
        self.world_size = world_size
        self.timeout = timeout
        self.cond = threading.Condition()
        self.slots: dict[int, list[torch.Tensor | None]] = {}  # call number -> one per rank
        self.calls = [0] * world_size
        self.done = [False] * world_size

    def all_reduce(self, rank: int, tensor: Any) -> torch.Tensor:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"all_reduce takes a tensor, like torch.distributed.all_reduce, got "
                f"{type(tensor).__name__}: wrap the number with torch.tensor(...)"
            )
        k = self.calls[rank]
        self.calls[rank] += 1
        with self.cond:
            slot = self.slots.setdefault(k, [None] * self.world_size)
            slot[rank] = tensor.detach().clone()
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.over(k), self.timeout)
            if not all(t is not None for t in slot):
                waiting = [r for r in range(self.world_size) if slot[r] is not None]
                raise MismatchedAllReduce(
                    f"rank {rank} waits in all_reduce call {k + 1}, which only ranks "
                    f"{waiting} reached; calls per rank: {self.calls}"
                )
        total = torch.stack([t for t in slot if t is not None]).sum(0)
        if not tensor.requires_grad:
            with torch.no_grad():
                tensor.copy_(total)
        return total

    def over(self, k: int) -> bool:
        """Is waiting in call ``k`` (from 0) over: every rank has reached it, or a rank that
        has not has already returned (it never will)?"""
        slot = self.slots.get(k, [None] * self.world_size)
        if all(t is not None for t in slot):
            return True
        return any(self.done[r] and self.calls[r] <= k for r in range(self.world_size))

    def finish(self, rank: int) -> None:
        with self.cond:
            self.done[rank] = True
            self.cond.notify_all()


def ranks(
    fn: Callable[..., Any], logits: list[torch.Tensor], labels: list[torch.Tensor]
) -> list[Any] | None:
    """``fn(logits[r], labels[r], all_reduce=..., world_size=W)`` on W threads sharing one
    :class:`Group`: the ranks' results (None if every rank returned None). A rank's exception is
    raised here, the first crash rather than the waits it causes on the other ranks."""
    W = len(logits)
    group = Group(W)
    results: list[Any] = [None] * W
    errors: list[BaseException | None] = [None] * W

    def work(rank: int) -> None:
        try:
            reduce = partial(group.all_reduce, rank)
            results[rank] = fn(logits[rank], labels[rank], all_reduce=reduce, world_size=W)
        except BaseException as exc:  # raised again by the main thread
            errors[rank] = exc
        finally:
            group.finish(rank)

    threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(W)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    if any(t.is_alive() for t in threads):
        raise MismatchedAllReduce("a rank did not finish (it waits for the others)")
    raised = [(r, e) for r, e in enumerate(errors) if e is not None]
    causes = [(r, e) for r, e in raised if not isinstance(e, MismatchedAllReduce)]
    if raised:
        rank, exc = (causes or raised)[0]
        if isinstance(exc, MismatchedAllReduce):  # the final counts, not the moment it noticed
            text = f"rank {rank} waited in all_reduce for ranks that never came; calls per rank: "
            raise MismatchedAllReduce(text + str(group.calls)).with_traceback(exc.__traceback__)
        raise exc
    return None if all(r is None for r in results) else results
