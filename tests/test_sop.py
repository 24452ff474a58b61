"""make_sop_pairs / sop_batches: ALBERT's sentence-order pairs (one document, in order or
swapped)."""

from __future__ import annotations

import pytest
import torch
from _exact import same_tensors
from _pair_data import CLS, IDS, PAD, SEP, assert_rate, check_bad_input, make_docs, split_rows

from lmlessons.course.batches import sop_batches
from lmlessons.pairs import make_sop_pairs

MASK = 3


def _pairs(docs, **kw):
    base = dict(IDS, max_length=24, generator=torch.Generator().manual_seed(0))
    base.update(kw)
    return make_sop_pairs(docs, **base)


@pytest.mark.parametrize("max_length", [6, 16, 64])
def test_structure_same_document_and_order(max_length):
    out = _pairs(make_docs(), max_length=max_length)
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "sentence_order_label"}
    assert all(v.dtype == torch.long for v in out.values())
    assert out["input_ids"].shape[1] <= max_length
    labels = out["sentence_order_label"].tolist()
    assert set(labels) == {0, 1}
    for label, (a, b) in zip(labels, split_rows(out)):
        assert a and b
        assert len({t // 1000 for t in a + b}) == 1, "both segments come from one document"
        assert a == sorted(a) and b == sorted(b), "each segment is text in its order"
        if label == 0:
            assert max(a) < min(b), "in order: A comes before B"
        else:
            assert max(b) < min(a), "swapped: B comes before A"


def test_swapped_is_the_same_pair_reversed_without_truncation():
    docs = make_docs(30, seed=3)
    kw = dict(max_length=200, short_seq_prob=0.0)
    keep, swap = _pairs(docs, swap_probability=0.0, **kw), _pairs(docs, swap_probability=1.0, **kw)
    assert keep["sentence_order_label"].eq(0).all() and swap["sentence_order_label"].eq(1).all()
    assert keep["input_ids"].shape[0] == swap["input_ids"].shape[0]
    assert split_rows(swap) == [(b, a) for a, b in split_rows(keep)]


def test_swap_rate_matches_swap_probability():
    docs = make_docs(400, seed=1)
    for p in (0.5, 0.2):
        out = _pairs(docs, swap_probability=p, generator=torch.Generator().manual_seed(2))
        assert_rate(out["sentence_order_label"], p)


def test_single_document_is_enough_and_lone_sentences_give_nothing():
    out = _pairs([[[5, 6], [7, 8], [9]]], max_length=64)
    assert out["input_ids"].shape[0] >= 1
    with pytest.raises(ValueError, match="no pairs"):
        _pairs([[[5, 6]], [[7]]])


def test_deterministic_with_generator_and_inputs_unchanged():
    docs = make_docs()
    before = [[list(s) for s in d] for d in docs]
    a = _pairs(docs, generator=torch.Generator().manual_seed(5))
    b = _pairs(docs, generator=torch.Generator().manual_seed(5))
    c = _pairs(docs, generator=torch.Generator().manual_seed(6))
    assert same_tensors(a, b)
    assert a["input_ids"].tolist() != c["input_ids"].tolist()
    assert docs == before


def test_short_seq_prob_gives_shorter_examples():
    docs = make_docs(200, seed=4, min_sent=6)
    lengths = {}
    for p in (0.0, 1.0):
        out = _pairs(
            docs, max_length=40, short_seq_prob=p, generator=torch.Generator().manual_seed(0)
        )
        lengths[p] = out["attention_mask"].sum(1).float().mean().item()
    assert lengths[1.0] < lengths[0.0] - 3


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(documents=[]), ValueError, "documents"),
        (dict(documents=[[[5, 6]], []]), ValueError, r"documents\[1\]"),
        (dict(documents=[["a b", "c"]]), TypeError, "token ids"),
        (dict(max_length=4), ValueError, "max_length"),
        (dict(swap_probability=1.5), ValueError, "swap_probability"),
        (dict(swap_probability="0.5"), TypeError, "swap_probability"),
        (dict(short_seq_prob=-0.1), ValueError, "short_seq_prob"),
        (dict(cls_token_id=-1), ValueError, "cls_token_id"),
        (dict(pad_token_id=0.0), TypeError, "pad_token_id"),
        (dict(generator=0), TypeError, "generator"),
    ],
)
def test_bad_input(kwargs, exc, match):
    check_bad_input(make_sop_pairs, kwargs, exc, match)


class _Tok:
    """The few tokenizer attributes sop_batches reads (no model files needed)."""

    pad_token_id, cls_token_id, sep_token_id, mask_token_id = PAD, CLS, SEP, MASK
    all_special_ids = (PAD, CLS, SEP, MASK)

    def __len__(self):
        return 50_000


def test_sop_batches_keys_masking_and_one_epoch():
    docs = make_docs(30, seed=2)
    n_pairs = _pairs(docs, max_length=32)["input_ids"].shape[0]
    batches = list(
        sop_batches(
            docs,
            _Tok(),
            batch_size=8,
            max_length=32,
            mlm_probability=0.3,
            epochs=1,
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert sum(b["input_ids"].shape[0] for b in batches) == n_pairs
    n_masked = 0
    for b in batches:
        assert set(b) == {
            "input_ids",
            "token_type_ids",
            "attention_mask",
            "labels",
            "sentence_order_label",
            "next_sentence_label",
        }
        assert torch.equal(b["sentence_order_label"], b["next_sentence_label"])
        sel = b["labels"] != -100
        assert not torch.isin(b["labels"][sel], torch.tensor(_Tok.all_special_ids)).any(), (
            "specials never masked"
        )
        n_masked += int(sel.sum())
        assert b["attention_mask"][:, -1].any(), "shared padding trimmed"
    assert n_masked > 0
    none = next(
        sop_batches(docs, _Tok(), mlm_probability=0.0, generator=torch.Generator().manual_seed(0))
    )
    assert none["labels"].eq(-100).all()


def test_sop_batches_bad_input():
    with pytest.raises(ValueError, match="max_length"):
        sop_batches(make_docs(3), _Tok(), max_length=3)
    with pytest.raises(ValueError, match="swap_probability"):
        sop_batches(make_docs(3), _Tok(), swap_probability=2.0)
    with pytest.raises(ValueError, match="two sentences"):
        sop_batches([[[5, 6]], [[7]]], _Tok())
    with pytest.raises(ValueError, match="pad_token_id"):
        sop_batches(make_docs(3), object())


def test_sop_batches_train_a_bert_pair_head():
    """The batches plug into lmlessons.course.training.train unchanged (the pair head learns
    SOP labels)."""
    from _tiny import VOCAB, bert_config, seeded
    from transformers import BertForPreTraining

    from lmlessons.course.training import evaluate, train

    class Tok(_Tok):
        def __len__(self):
            return VOCAB

    g = torch.Generator().manual_seed(0)
    docs = [
        [
            [
                int(t)
                for t in torch.randint(
                    5, VOCAB, (int(torch.randint(2, 6, (), generator=g)),), generator=g
                )
            ]
            for _ in range(4)
        ]
        for _ in range(6)
    ]
    model = seeded(BertForPreTraining, bert_config(), seed=0)
    history = train(
        model,
        sop_batches(docs, Tok(), batch_size=4, max_length=24, generator=g),
        max_steps=3,
        live=False,
    )
    assert history.num_steps == 3 and len(history.nsp_accuracy) == 3
    metrics = evaluate(
        model, sop_batches(docs, Tok(), batch_size=4, max_length=24, epochs=1, generator=g)
    )
    assert metrics["num_sequences"] > 0 and 0.0 <= metrics["nsp_accuracy"] <= 1.0
