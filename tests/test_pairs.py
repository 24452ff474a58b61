"""make_nsp_pairs / truncate_seq_pair: structure, label rate, negatives from other documents."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lmlessons import make_nsp_pairs, truncate_seq_pair

CLS, SEP, PAD = 1, 2, 0


def _docs(n_docs=40, seed=0):
    """Each document uses its own id range, so we can tell where every token came from."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for d in range(n_docs):
        base = 1000 * (d + 1)
        n_sent = int(torch.randint(1, 8, (), generator=g))
        sents, k = [], 0
        for _ in range(n_sent):
            length = int(torch.randint(1, 9, (), generator=g))
            sents.append([base + k + i for i in range(length)])
            k += length
        docs.append(sents)
    return docs


def _split(row_ids, row_types, row_mask):
    n = int(row_mask.sum())
    ids = row_ids[:n].tolist()
    assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 2
    first_sep = ids.index(SEP)
    a, b = ids[1:first_sep], ids[first_sep + 1 : -1]
    expected_types = [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
    assert row_types[:n].tolist() == expected_types
    assert row_types[n:].eq(0).all() and row_ids[n:].eq(PAD).all()
    return a, b


@pytest.mark.parametrize("max_length", [8, 16, 64])
def test_structure_and_sources(max_length):
    docs = _docs()
    out = make_nsp_pairs(docs, cls_token_id=CLS, sep_token_id=SEP, pad_token_id=PAD, max_length=max_length,
                         generator=torch.Generator().manual_seed(0))
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "next_sentence_label"}
    assert all(v.dtype == torch.long for v in out.values())
    assert out["input_ids"].shape[1] <= max_length
    for row in range(out["input_ids"].shape[0]):
        a, b = _split(out["input_ids"][row], out["token_type_ids"][row], out["attention_mask"][row])
        assert a and b
        doc_a, doc_b = {t // 1000 for t in a}, {t // 1000 for t in b}
        assert len(doc_a) == 1 and len(doc_b) == 1
        if out["next_sentence_label"][row] == 0:  # IsNext: same document, B after A
            assert doc_a == doc_b and max(a) < min(b)
        else:  # NotNext: another document
            assert doc_a != doc_b


def test_label_rate_matches_nsp_probability():
    docs = _docs(400, seed=1)
    for p in (0.5, 0.2):
        out = make_nsp_pairs(docs, cls_token_id=CLS, sep_token_id=SEP, pad_token_id=PAD, max_length=24,
                             nsp_probability=p, generator=torch.Generator().manual_seed(2))
        labels = out["next_sentence_label"].float()
        n = labels.numel()
        sd = (p * (1 - p) / n) ** 0.5
        assert abs(labels.mean().item() - p) < 5 * sd


def test_deterministic_with_generator():
    docs = _docs()
    kw = dict(cls_token_id=CLS, sep_token_id=SEP, pad_token_id=PAD, max_length=32)
    a = make_nsp_pairs(docs, **kw, generator=torch.Generator().manual_seed(5))
    b = make_nsp_pairs(docs, **kw, generator=torch.Generator().manual_seed(5))
    c = make_nsp_pairs(docs, **kw, generator=torch.Generator().manual_seed(6))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert a["input_ids"].tolist() != c["input_ids"].tolist(), "another seed gives other pairs"


@given(st.lists(st.integers(0, 99), max_size=30), st.lists(st.integers(0, 99), max_size=30), st.integers(2, 40), st.integers(0, 999))
def test_truncate_seq_pair(a, b, max_tokens, seed):
    ta, tb = truncate_seq_pair(a, b, max_tokens, generator=torch.Generator().manual_seed(seed))
    if len(a) + len(b) <= max_tokens:
        assert (ta, tb) == (a, b)
    else:
        assert len(ta) + len(tb) == max_tokens
    # what is left is a contiguous piece of the original
    for orig, cut in ((a, ta), (b, tb)):
        s = " ".join(map(str, orig))
        assert " ".join(map(str, cut)) in s


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(documents=[]), ValueError, "documents"),
        (dict(documents=[[[5, 6]], []]), ValueError, r"documents\[1\]"),
        (dict(documents=[[[5, 6], []], [[7]]]), ValueError, "empty sentence"),
        (dict(documents=[["a b", "c"], [[7]]]), TypeError, "token ids"),
        (dict(documents="abc"), TypeError, "documents"),
        (dict(max_length=4), ValueError, "max_length"),
        (dict(nsp_probability=1.5), ValueError, "nsp_probability"),
        (dict(documents=[[[5, 6], [7, 8]]]), ValueError, "at least 2"),
        (dict(cls_token_id=-1), ValueError, "cls_token_id"),
        (dict(sep_token_id=2.0), TypeError, "sep_token_id"),
        (dict(generator=0), TypeError, "generator"),
    ],
)
def test_bad_input(kwargs, exc, match):
    base = dict(documents=_docs(5), cls_token_id=CLS, sep_token_id=SEP, pad_token_id=PAD, max_length=16)
    base.update(kwargs)
    docs = base.pop("documents")
    with pytest.raises(exc, match=match):
        make_nsp_pairs(docs, **base)
