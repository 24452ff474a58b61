"""Training throughput of three batch layouts of the same documents (lesson 09, ``tools.bench``).

* ``padded``: :func:`lmlessons.packing.pad_documents`, one row per document; the padding
  positions are computed and then ignored by the loss;
* ``grouped``: :func:`lmlessons.packing.group_texts`, the documents concatenated and cut into
  rows of ``block_size`` (no padding; the remainder is dropped, as ``group_texts`` does);
* ``flattened``: :func:`lmlessons.packing.flatten_documents`, one row per batch whose
  ``position_ids`` restart at every document, run with ``use_cache=False`` so that attention
  stays inside each document. With eager or sdpa attention the model still scores an
  ``(N, N)`` mask over the whole row.

Each timed pass is a forward and backward pass over every batch of a layout, timed in CPU
seconds of this process (``time.process_time``: on a shared machine, other programs stretch the
wall clock far more than the work); the layouts take turns (padded, grouped, flattened, padded,
...) and each reports the median of its passes. Throughput is real tokens per CPU second.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lmlessons._checks import check_generator, check_int, check_model
from lmlessons.packing import flatten_documents, group_texts, pad_documents

__all__ = ["LAYOUT_NAMES", "Throughput", "sentence_documents", "packing_throughput"]

LAYOUT_NAMES = ("padded", "grouped", "flattened")
Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Throughput:
    """Per layout: the real tokens of one pass, the positions the model computes, and the
    timed passes (CPU seconds)."""

    tokens: dict[str, int]
    positions: dict[str, int]
    times: dict[str, tuple[float, ...]]

    def seconds(self, layout: str) -> float:
        """The median CPU seconds of a pass."""
        return statistics.median(self.times[layout])

    def tokens_per_s(self, layout: str) -> float:
        return self.tokens[layout] / self.seconds(layout)

    def ratio(self, layout: str, baseline: str = "padded") -> float:
        """Tokens per second of ``layout`` over those of ``baseline`` (> 1: faster)."""
        return self.tokens_per_s(layout) / self.tokens_per_s(baseline)

    @property
    def padding_share(self) -> float:
        """The share of the padded batches' positions that are padding."""
        return 1.0 - self.tokens["padded"] / self.positions["padded"]


def sentence_documents(
    sentences: Sequence[str], tokenizer: Any, *, count: int, generator: torch.Generator
) -> list[list[int]]:
    """``count`` sentences drawn without replacement, each tokenized as a short document
    ``[CLS] ... [SEP]`` (the course tokenizer's start and end-of-text tokens)."""
    count = check_int("count", count, minimum=1)
    check_generator(generator)
    if count > len(sentences):
        raise ValueError(f"count must be at most the {len(sentences)} sentences, got {count}")
    order = torch.randperm(len(sentences), generator=generator)[:count].tolist()
    return [list(ids) for ids in tokenizer([sentences[i] for i in order])["input_ids"]]


def _layouts(
    docs: Sequence[Sequence[int]], batch_size: int, block_size: int, pad_token_id: int
) -> dict[str, list[Batch]]:
    """The batches of each layout; ``grouped`` holds as many rows per batch as ``padded``."""
    groups = [list(docs[i : i + batch_size]) for i in range(0, len(docs), batch_size)]
    blocks = group_texts(docs, block_size, eos_token_id=None)["input_ids"]  # docs end in [SEP]
    rows = max(1, round(blocks.numel() / block_size / len(groups)))
    grouped = [
        {"input_ids": blocks[i : i + rows], "labels": blocks[i : i + rows]}
        for i in range(0, blocks.shape[0], rows)
    ]
    return {
        "padded": [pad_documents(g, pad_token_id=pad_token_id) for g in groups],
        "grouped": grouped,
        "flattened": [flatten_documents(g) for g in groups],
    }


def _real_tokens(batch: Batch) -> int:
    mask = batch.get("attention_mask")
    return int(batch["input_ids"].numel() if mask is None else mask.sum())


def _one_pass(model: Any, batches: list[Batch], extra: dict[str, Any]) -> float:
    """CPU seconds of this process (all its threads) for one pass: other programs on the
    machine slow the wall clock down, much less the work a pass needs."""
    start = time.process_time()
    for batch in batches:
        model(**batch, **extra).loss.backward()
    model.zero_grad(set_to_none=True)
    return time.process_time() - start


def packing_throughput(
    model: Any,
    docs: Sequence[Sequence[int]],
    *,
    batch_size: int,
    pad_token_id: int,
    block_size: int = 128,
    repeats: int = 3,
) -> Throughput:
    """Time a training pass (forward + backward) over ``docs`` in each layout of
    :data:`LAYOUT_NAMES`, ``batch_size`` documents per padded or flattened batch; one warm-up
    pass each, then ``repeats`` passes taking turns."""
    check_model(model)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    repeats = check_int("repeats", repeats, minimum=1)
    layouts = _layouts(
        docs, batch_size, check_int("block_size", block_size, minimum=2), pad_token_id
    )
    extra: dict[str, dict[str, Any]] = {
        "padded": {},
        "grouped": {},
        "flattened": {"use_cache": False},
    }
    times: dict[str, list[float]] = {name: [] for name in LAYOUT_NAMES}
    was_training = model.training
    model.train()
    try:
        for r in range(repeats + 1):  # the first pass of each layout warms up, not kept
            for name in LAYOUT_NAMES:
                t = _one_pass(model, layouts[name], extra[name])
                if r:
                    times[name].append(t)
    finally:
        model.train(was_training)
    return Throughput(
        tokens={n: sum(_real_tokens(b) for b in layouts[n]) for n in LAYOUT_NAMES},
        positions={n: sum(int(b["input_ids"].numel()) for b in layouts[n]) for n in LAYOUT_NAMES},
        times={n: tuple(t) for n, t in times.items()},
    )
