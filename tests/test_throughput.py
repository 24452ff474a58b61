"""lmlessons.course.throughput (lesson 09, tools.bench): what each layout computes, counted exactly;
the timings are only checked for shape and sign (speed is the machine's)."""

from __future__ import annotations

import statistics

import pytest
import torch

from lmlessons.course.models import tiny_gpt2
from lmlessons.course.throughput import LAYOUT_NAMES, packing_throughput, sentence_documents
from tests._tiny import SMALL_GPT2

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = ["The dog ran home.", "Rain fell all day.", "The sea was calm and blue today.", "Hi."]


def test_sentence_documents_are_seeded_tokenized_sentences(tok) -> None:
    docs = sentence_documents(SENTENCES, tok, count=3, generator=torch.Generator().manual_seed(0))
    again = sentence_documents(SENTENCES, tok, count=3, generator=torch.Generator().manual_seed(0))
    assert docs == again and len(docs) == 3
    assert all(d[0] == tok.cls_token_id and d[-1] == tok.sep_token_id for d in docs)
    assert {tuple(d) for d in docs} <= {tuple(tok(s)["input_ids"]) for s in SENTENCES}
    with pytest.raises(ValueError, match="count"):
        sentence_documents(SENTENCES, tok, count=5, generator=torch.Generator())


def test_layouts_count_tokens_and_positions_exactly(tok) -> None:
    docs = [tok(s)["input_ids"] for s in SENTENCES]  # 7, 8, 10 and 4 tokens
    model = tiny_gpt2(tok, **SMALL_GPT2).eval()
    speed = packing_throughput(model, docs, batch_size=2, pad_token_id=0, block_size=8, repeats=2)
    n = sum(map(len, docs))
    assert speed.tokens == {"padded": n, "grouped": 8 * (n // 8), "flattened": n}
    assert speed.positions["padded"] == 2 * 8 + 2 * 10  # each batch padded to its longest
    assert speed.positions["flattened"] == n and speed.positions["grouped"] == 8 * (n // 8)
    assert speed.padding_share == pytest.approx(1 - n / 36)
    assert all(len(speed.times[k]) == 2 and min(speed.times[k]) > 0 for k in LAYOUT_NAMES)
    assert speed.seconds("grouped") == statistics.median(speed.times["grouped"])
    grouped_over_flattened = (8 * (n // 8) / n) * (
        statistics.median(speed.times["flattened"]) / statistics.median(speed.times["grouped"])
    )
    assert speed.ratio("grouped", "flattened") == pytest.approx(grouped_over_flattened)
    assert speed.ratio("flattened") == pytest.approx(
        speed.seconds("padded") / speed.seconds("flattened")
    )
    assert not model.training  # the mode is restored
    assert all(p.grad is None for p in model.parameters())  # no gradient left behind


def test_bad_arguments(tok) -> None:
    model = tiny_gpt2(tok, **SMALL_GPT2)
    with pytest.raises(TypeError, match="model"):
        packing_throughput("gpt2", [[1, 2]], batch_size=1, pad_token_id=0)
    with pytest.raises(ValueError, match="batch_size"):
        packing_throughput(model, [[1, 2]], batch_size=0, pad_token_id=0)
    with pytest.raises(ValueError, match="repeats"):
        packing_throughput(model, [[1, 2]], batch_size=1, pad_token_id=0, repeats=0)
