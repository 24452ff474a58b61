"""Watching the memory of a learner's call, for ``run.call(case, via=...)`` (:mod:`._framework`):
the largest tensor and the peak bytes of the forward pass, or of forward plus backward. Both count
the tensors torch creates (through a ``TorchDispatchMode``), so the numbers are exact and the same
on every machine; the inputs (the runner's copies, made before ``via`` runs) do not count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from lmlessons.course.memory import TensorPeak, WatchMode

Via = Callable[..., Any]


class LargestTensor(WatchMode):
    """Records the largest storage (in elements) behind any tensor an operation returns: a view
    of a big tensor counts as the big tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.numel: int = 0
        self.shape: tuple[int, ...] = ()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.element_size() > 0:
                n = t.untyped_storage().nbytes() // t.element_size()
                if n > self.numel:
                    self.numel = n
                    self.shape = tuple(t.shape)
        return out


@dataclass
class Watched:
    """What :func:`watch` saw: the largest tensor (values, shape) and the peak bytes."""

    numel: int = 0
    shape: tuple[int, ...] = ()
    peak: int = 0


def watch(backward: bool = False) -> tuple[Via, Watched]:
    """A ``via`` that runs the learner's function (and, if ``backward``, the gradients of its
    result with respect to the tensor arguments that require grad) under a
    :class:`LargestTensor` and a :class:`TensorPeak`; and what it saw, filled in by the call."""
    seen = Watched()

    def via(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        with TensorPeak(inputs) as peak, LargestTensor() as sizes:
            out = fn(*args, **kwargs)
            if backward and isinstance(out, torch.Tensor) and out.requires_grad:
                leaves = [a for a in inputs if a.requires_grad]
                torch.autograd.grad(out, leaves, allow_unused=True)
        seen.numel = sizes.numel
        seen.shape = sizes.shape
        seen.peak = peak.peak_bytes
        return out

    return via, seen
