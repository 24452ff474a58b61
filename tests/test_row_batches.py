"""The course's one helper for shuffled batches of rows (``lmlessons.course.batches.row_batches``),
used by lesson 10's ``sft_batches``, the bug zoo's runs and the packed/paired batch makers."""

from __future__ import annotations

import itertools

import pytest
import torch
from _exact import gen

from lmlessons.course.batches import row_batches


def test_endless_batches_drop_the_incomplete_one_and_reshuffle_every_pass():
    rows = list("abcdefg")  # 7 rows, batches of 3: 2 a pass, the 7th row's batch dropped
    batches = list(itertools.islice(row_batches(rows, 3, gen()), 6))
    assert all(len(b) == 3 for b in batches)
    g = gen()
    orders = [torch.randperm(7, generator=g).tolist() for _ in range(3)]
    expected = [[rows[i] for i in o[s : s + 3]] for o in orders for s in (0, 3)]
    assert batches == expected
    assert orders[0] != orders[1]  # a new order each pass


def test_epochs_end_the_stream_and_keep_the_last_batch_without_drop_last():
    rows = list(range(5))
    batches = list(row_batches(rows, 2, gen(1), epochs=2, drop_last=False))
    assert [len(b) for b in batches] == [2, 2, 1, 2, 2, 1]
    for one_pass in (batches[:3], batches[3:]):  # every row once a pass
        assert sorted(itertools.chain.from_iterable(one_pass)) == rows


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="batch_size"):
        next(row_batches([1, 2], 3, gen()))  # too few rows for one full batch
    with pytest.raises(ValueError, match="batch_size"):
        next(row_batches([1, 2], 0, gen()))
    with pytest.raises(TypeError, match="generator"):
        next(row_batches([1, 2], 1, 0))  # type: ignore[arg-type]
