"""Test data for the sentence-pair builders (test_pairs.py, test_sop.py): tokenized documents
whose ids tell where each token came from, a checker that splits a padded pair row, and the
checks both builders share (label rate, bad input)."""

from __future__ import annotations

import pytest
import torch

CLS, SEP, PAD = 1, 2, 0
IDS = dict(cls_token_id=CLS, sep_token_id=SEP, pad_token_id=PAD)


def make_docs(n_docs=40, seed=0, min_sent=1, min_len=1):
    """Each document uses its own id range, increasing along the text: a token tells its document
    (``id // 1000``) and its position. Documents have ``min_sent`` to 7 sentences of ``min_len``
    to 8 tokens."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for d in range(n_docs):
        base = 1000 * (d + 1)
        n_sent = int(torch.randint(min_sent, 8, (), generator=g))
        sents, k = [], 0
        for _ in range(n_sent):
            length = int(torch.randint(min_len, 9, (), generator=g))
            sents.append([base + k + i for i in range(length)])
            k += length
        docs.append(sents)
    return docs


def split_pair(row_ids, row_types, row_mask):
    """Check that one row is ``[CLS] A [SEP] B [SEP]`` then padding (token types 0 up to the first
    [SEP], 1 after; 0, PAD and mask 0 on padding) and return ``(A, B)`` as lists of ids."""
    n = int(row_mask.sum())
    ids = row_ids[:n].tolist()
    assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 2
    first_sep = ids.index(SEP)
    assert row_types[:n].tolist() == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
    assert row_types[n:].eq(0).all() and row_ids[n:].eq(PAD).all() and row_mask[n:].eq(0).all()
    return ids[1:first_sep], ids[first_sep + 1 : -1]


def split_rows(out):
    """:func:`split_pair` of every row of a pair builder's output: a list of ``(A, B)``."""
    return [
        split_pair(out["input_ids"][row], out["token_type_ids"][row], out["attention_mask"][row])
        for row in range(out["input_ids"].shape[0])
    ]


def assert_rate(labels, p):
    """The share of 1s in ``labels`` is within 5 standard deviations of ``p``."""
    sd = (p * (1 - p) / labels.numel()) ** 0.5
    assert abs(labels.float().mean().item() - p) < 5 * sd


def check_bad_input(make_pairs, kwargs, exc, match):
    """``make_pairs`` on 5 valid documents with ``kwargs`` replaced raises ``exc`` (``match``)."""
    base = dict(documents=make_docs(5), **IDS, max_length=16)
    base.update(kwargs)
    docs = base.pop("documents")
    with pytest.raises(exc, match=match):
        make_pairs(docs, **base)
