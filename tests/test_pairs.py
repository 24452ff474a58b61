"""make_nsp_pairs / truncate_seq_pair: structure, label rate, negatives from other documents."""

from __future__ import annotations

import pytest
import torch
from _exact import same_tensors
from _pair_data import IDS, assert_rate, check_bad_input, make_docs, split_rows
from hypothesis import given
from hypothesis import strategies as st

from lmlessons import make_nsp_pairs, truncate_seq_pair


@pytest.mark.parametrize("max_length", [8, 16, 64])
def test_structure_and_sources(max_length):
    docs = make_docs()
    out = make_nsp_pairs(
        docs, **IDS, max_length=max_length, generator=torch.Generator().manual_seed(0)
    )
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "next_sentence_label"}
    assert all(v.dtype == torch.long for v in out.values())
    assert out["input_ids"].shape[1] <= max_length
    for row, (a, b) in enumerate(split_rows(out)):
        assert a and b
        doc_a, doc_b = {t // 1000 for t in a}, {t // 1000 for t in b}
        assert len(doc_a) == 1 and len(doc_b) == 1
        if out["next_sentence_label"][row] == 0:  # IsNext: same document, B after A
            assert doc_a == doc_b and max(a) < min(b)
        else:  # NotNext: another document
            assert doc_a != doc_b


def test_label_rate_matches_nsp_probability():
    docs = make_docs(400, seed=1)
    for p in (0.5, 0.2):
        out = make_nsp_pairs(
            docs,
            **IDS,
            max_length=24,
            nsp_probability=p,
            generator=torch.Generator().manual_seed(2),
        )
        assert_rate(out["next_sentence_label"], p)


def test_deterministic_with_generator():
    docs = make_docs()
    kw = dict(IDS, max_length=32)
    a = make_nsp_pairs(docs, **kw, generator=torch.Generator().manual_seed(5))
    b = make_nsp_pairs(docs, **kw, generator=torch.Generator().manual_seed(5))
    c = make_nsp_pairs(docs, **kw, generator=torch.Generator().manual_seed(6))
    assert same_tensors(a, b)
    assert a["input_ids"].tolist() != c["input_ids"].tolist(), "another seed gives other pairs"


def test_unused_sentences_are_put_back_after_a_notnext_pair():
    """Google's ``i -= num_unused_segments``: when B comes from another document, the sentences
    of the chunk after A are not thrown away but start the next chunk. With every B from another
    document, one chunk per target length and no truncation, the A segments of a document tile
    it: every sentence but the last (a lone last sentence is dropped) is in exactly one A."""
    docs = make_docs(30, seed=5, min_sent=2)
    out = make_nsp_pairs(
        docs,
        **IDS,
        max_length=1000,  # longer than any two documents: nothing is truncated
        nsp_probability=1.0,
        short_seq_prob=0.0,
        generator=torch.Generator().manual_seed(0),
    )
    a_tokens = {d: [] for d in range(len(docs))}
    for a, _ in split_rows(out):
        a_tokens[a[0] // 1000 - 1] += a
    for d, doc in enumerate(docs):
        assert sorted(a_tokens[d]) == [t for sent in doc[:-1] for t in sent], f"document {d}"


def _trimmed_lengths(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """The lengths left when the longer side (B on a tie, as Google's ``len(a) > len(b)``)
    loses one token per step until the pair fits."""
    while len_a + len_b > max_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _is_slice(part: list[int], whole: list[int]) -> bool:
    return any(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1))


@given(
    st.lists(st.integers(0, 99), max_size=30),
    st.lists(st.integers(0, 99), max_size=30),
    st.integers(2, 40),
    st.integers(0, 999),
)
def test_truncate_seq_pair_trims_the_longer_side_to_contiguous_slices(a, b, max_tokens, seed):
    a_before, b_before = list(a), list(b)
    ta, tb = truncate_seq_pair(a, b, max_tokens, generator=torch.Generator().manual_seed(seed))
    assert (a, b) == (a_before, b_before), "the inputs are not modified"
    assert len(ta) + len(tb) == min(len(a) + len(b), max_tokens)
    assert (len(ta), len(tb)) == _trimmed_lengths(len(a), len(b), max_tokens)
    assert _is_slice(ta, a) and _is_slice(tb, b), "what is left is a contiguous piece"


def test_truncate_seq_pair_trims_front_and_back_alike():
    """Each token is cut from the front or the back with one fair draw: over many seeds about
    half of the cuts of each side are at its front (Google: avoid a bias to sentence starts)."""
    a, b = list(range(30)), list(range(100, 130))  # 40 cuts: 20 from each side
    front_a = front_b = 0
    n_seeds = 100
    for seed in range(n_seeds):
        ta, tb = truncate_seq_pair(a, b, 20, generator=torch.Generator().manual_seed(seed))
        assert len(ta) == len(tb) == 10
        front_a += a.index(ta[0])  # tokens cut from A's front
        front_b += b.index(tb[0])
    cuts = 20 * n_seeds
    sd = (cuts * 0.25) ** 0.5
    assert abs(front_a - cuts / 2) < 5 * sd and abs(front_b - cuts / 2) < 5 * sd


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
    check_bad_input(make_nsp_pairs, kwargs, exc, match)
