"""masking_variants: BERT's exact count, whole-word masking and SpanBERT spans.

Invariants by hypothesis, rates against their distributions, determinism, bad input."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from _masking_data import bert_tokenizer, binomial_ok, draw_ids
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import models, pre_tokenizers

from lmlessons.masking_variants import (
    mask_spans,
    mask_tokens_exact_count,
    mask_whole_words,
    num_to_predict,
    replace_selected,
    sample_span_lengths,
    select_exact_count,
    select_spans,
    select_whole_words,
    span_length_pmf,
    word_ids,
    wordpiece_continuation_mask,
)

VOCAB, MASK = 60, 4


@st.composite
def rows(draw):
    """A padded batch: [CLS] w... [SEP] (w... [SEP]) [PAD]..., with random ## continuations."""
    ids, special, seed, g = draw_ids(draw, VOCAB, 3, 40)
    b, t = ids.shape
    attention = torch.ones(b, t, dtype=torch.bool)
    for row in range(b):
        n = draw(st.integers(3, t))
        special[row, 0] = special[row, n - 1] = True
        if n >= 6 and draw(st.booleans()):
            special[row, n // 2] = True  # a [SEP] between two segments
        special[row, n:] = True
        attention[row, n:] = False
        ids[row, n:] = 0
    cont = torch.rand(b, t, generator=g) < draw(st.floats(0.0, 0.7))
    p = draw(st.sampled_from([0.0, 0.15, 0.3, 0.5, 1.0]))
    return ids, special, attention, cont, p, seed


def _words(wids_row: torch.Tensor) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    for t, w in enumerate(wids_row.tolist()):
        if w >= 0:
            out.setdefault(w, []).append(t)
    return [out[w] for w in sorted(out)]


# ------------------------------------------------------------------------- words


def test_word_ids_group_continuations_and_skip_specials():
    cont = torch.tensor([[0, 0, 1, 1, 0, 1, 0, 1, 0]], dtype=torch.bool)
    special = torch.tensor([[1, 0, 0, 0, 0, 0, 1, 0, 1]], dtype=torch.bool)
    # position 7 is a "##" piece right after [SEP]: it starts its own word
    assert word_ids(cont, special).tolist() == [[-1, 0, 0, 0, 1, 1, -1, 2, -1]]
    assert word_ids(cont[0], special[0]).tolist() == [-1, 0, 0, 0, 1, 1, -1, 2, -1]


def _wordpiece_tokenizer():
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "un", "##believ"]
    pieces += ["##able", "run", "##s", "."]
    vocab = {t: i for i, t in enumerate(pieces)}
    return bert_tokenizer(
        models.WordPiece(vocab, unk_token="[UNK]"), pre_tokenizers.BertPreTokenizer()
    )


def test_wordpiece_continuation_mask_reads_the_tokenizer():
    tok = _wordpiece_tokenizer()
    enc = tok(["the dog runs unbelievable .", "the dog"], padding=True, return_tensors="pt")
    assert tok.convert_ids_to_tokens(enc["input_ids"][0]) == [
        "[CLS]",
        "the",
        "dog",
        "run",
        "##s",
        "un",
        "##believ",
        "##able",
        ".",
        "[SEP]",
    ]
    cont = wordpiece_continuation_mask(enc["input_ids"], tok)
    assert cont[0].tolist() == [False, False, False, False, True, False, True, True, False, False]
    assert not cont[1].any()
    assert wordpiece_continuation_mask(enc["input_ids"][0], tok).tolist() == cont[0].tolist()
    with pytest.raises(TypeError, match="tokenizer"):
        wordpiece_continuation_mask(enc["input_ids"], object())
    with pytest.raises(ValueError, match="prefix"):
        wordpiece_continuation_mask(enc["input_ids"], tok, prefix="")


# ------------------------------------------------------------------------- exact count


def test_num_to_predict_follows_google():
    assert num_to_predict(128, 0.15, 20) == 19  # round(19.2)
    assert num_to_predict(512, 0.15, 20) == 20  # capped (Google uses 76 for 512)
    assert num_to_predict(512, 0.15, 76) == 76  # round(76.8) = 77, capped at 76
    assert num_to_predict(3, 0.15, 20) == 1  # max(1, round(0.45))
    assert num_to_predict(30, 0.15, None) == round(30 * 0.15)
    assert num_to_predict(10, 0.0, 20) == 0
    assert num_to_predict(0, 0.15, 20) == 0
    with pytest.raises(ValueError, match="seq_length"):
        num_to_predict(-1)
    with pytest.raises(ValueError, match="max_predictions_per_seq"):
        num_to_predict(10, 0.15, -1)


@given(rows())
def test_exact_count_invariants(batch):
    ids, special, attention, _, p, seed = batch
    sel = select_exact_count(
        special,
        attention_mask=attention,
        mlm_probability=p,
        max_predictions_per_seq=20,
        generator=torch.Generator().manual_seed(seed),
    )
    assert not (sel & special).any() and not (sel & ~attention).any()
    for row in range(ids.shape[0]):
        eligible = int((~special[row] & attention[row]).sum())
        want = num_to_predict(int(attention[row].sum()), p, 20)
        assert int(sel[row].sum()) == min(want, eligible)


def test_exact_count_is_a_uniform_subset():
    special = torch.zeros(4000, 12, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    sel = select_exact_count(
        special, mlm_probability=0.25, generator=torch.Generator().manual_seed(0)
    )
    assert (sel.sum(1) == 3).all()  # round(12 * 0.25)
    per_position = sel[:, 1:-1].sum(0)  # each of the 10 positions: Binomial(4000, 3/10)
    assert all(binomial_ok(int(k), 4000, 0.3) for k in per_position)


# ------------------------------------------------------------------------- whole words


def _whole_word_selection(select, batch):
    """``select`` (select_whole_words or select_spans) on a batch of :func:`rows`, checked: no
    special or padded position is selected, and every word is selected whole or not at all.
    Returns the selection and each row's words (lists of positions)."""
    _, special, attention, cont, p, seed = batch
    sel = select(
        special,
        cont,
        attention_mask=attention,
        mlm_probability=p,
        generator=torch.Generator().manual_seed(seed),
    )
    assert not (sel & special).any() and not (sel & ~attention).any()
    wids = word_ids(cont, special | ~attention)
    words = [_words(row) for row in wids]
    for row, row_words in enumerate(words):
        for w in row_words:
            assert len({bool(sel[row, t]) for t in w}) == 1, "a word is selected whole or not"
    return sel, words


@given(rows())
def test_whole_word_invariants(batch):
    sel, words = _whole_word_selection(select_whole_words, batch)
    _, _, attention, _, p, _ = batch
    for row, row_words in enumerate(words):
        budget = num_to_predict(int(attention[row].sum()), p, 20)
        assert int(sel[row].sum()) <= budget
        if all(len(w) == 1 for w in row_words):
            assert int(sel[row].sum()) == min(budget, len(row_words))


def test_whole_words_fill_the_count_when_they_fit():
    # words of 2 pieces each, budget 4: exactly two whole words
    cont = torch.tensor([[0, 0, 1, 0, 1, 0, 1, 0, 1, 0]], dtype=torch.bool).repeat(200, 1)
    special = torch.zeros_like(cont)
    special[:, 0] = special[:, -1] = True
    sel = select_whole_words(
        special, cont, mlm_probability=0.4, generator=torch.Generator().manual_seed(1)
    )
    assert (sel.sum(1) == 4).all()
    starts = sel[:, [1, 3, 5, 7]]
    assert torch.equal(starts, sel[:, [2, 4, 6, 8]])
    assert all(binomial_ok(int(k), 200, 0.5) for k in starts.sum(0))  # each word: 2 of 4


# ------------------------------------------------------------------------- spans


def test_span_length_distribution():
    pmf = span_length_pmf(0.2, 10)
    assert pmf.shape == (10,) and abs(float(pmf.sum()) - 1) < 1e-12
    assert all(float(pmf[i + 1] / pmf[i]) == pytest.approx(0.8) for i in range(9))
    mean = float((pmf * torch.arange(1, 11)).sum())
    assert mean == pytest.approx(3.797, abs=1e-3)  # SpanBERT's "mean span length 3.8"
    draws = sample_span_lengths(20000, generator=torch.Generator().manual_seed(0))
    assert draws.min() >= 1 and draws.max() <= 10
    counts = torch.bincount(draws, minlength=11)[1:]
    assert all(binomial_ok(int(c), 20000, float(q)) for c, q in zip(counts, pmf))
    assert float(draws.float().mean()) == pytest.approx(mean, abs=0.1)
    assert span_length_pmf(1.0, 5).tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="geometric_p"):
        span_length_pmf(0.0)
    with pytest.raises(ValueError, match="max_span_length"):
        span_length_pmf(0.2, 0)


@given(rows())
def test_span_invariants(batch):
    sel, words = _whole_word_selection(select_spans, batch)
    _, special, attention, _, p, _ = batch
    for row, row_words in enumerate(words):
        n = int((~special[row] & attention[row]).sum())
        budget = math.ceil(p * n - 1e-9)
        longest = max((len(w) for w in row_words), default=1)
        assert budget <= int(sel[row].sum()) < budget + longest


def test_span_lengths_in_long_sequences_follow_the_pmf():
    # one long segment of one-piece words: spans are runs; short budget so spans rarely touch
    special = torch.zeros(300, 202, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    cont = torch.zeros_like(special)
    sel = select_spans(
        special, cont, mlm_probability=0.05, generator=torch.Generator().manual_seed(0)
    )
    assert (sel.sum(1) == 10).all()  # ceil(0.05 * 200)
    # the selection clusters: far fewer runs than with independent tokens
    starts = sel[:, 1:] & ~sel[:, :-1]
    mean_run = float(sel.sum() / starts.sum())
    assert 2.5 < mean_run < 5.0


def test_span_replacement_is_per_span():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (500, 30), generator=g)
    sel = torch.zeros_like(ids, dtype=torch.bool)
    sel[:, 3:7] = True
    sel[:, 12:14] = True
    replace = partial(
        replace_selected,
        ids,
        sel,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_replace_prob=0.8,
        random_replace_prob=0.0,
        generator=g,
    )
    masked, labels = replace(per_span=True)
    assert torch.equal(labels[sel], ids[sel]) and (labels[~sel] == -100).all()
    for cols in (slice(3, 7), slice(12, 14)):
        is_mask = masked[:, cols] == MASK
        assert (is_mask.all(1) | (~is_mask).all(1)).all(), "a span is all [MASK] or all kept"
        assert binomial_ok(int(is_mask.all(1).sum()), 500, 0.8)
    # per token, the same call mixes [MASK] and kept tokens inside a span
    masked_t, _ = replace()
    is_mask = masked_t[:, 3:7] == MASK
    assert not (is_mask.all(1) | (~is_mask).all(1)).all()


def test_span_replacement_rates():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (3000, 8), generator=g)
    sel = torch.zeros_like(ids, dtype=torch.bool)
    sel[:, 2:5] = True
    masked, _ = replace_selected(
        ids, sel, mask_token_id=MASK, vocab_size=VOCAB, per_span=True, generator=g
    )
    span = masked[:, 2:5]
    n_mask = int((span == MASK).all(1).sum())
    n_kept = int((span == ids[:, 2:5]).all(1).sum())
    assert binomial_ok(n_mask, 3000, 0.8) and binomial_ok(n_kept, 3000, 0.1 + 0.1 / VOCAB**3)
    assert torch.equal(masked[:, :2], ids[:, :2]) and torch.equal(masked[:, 5:], ids[:, 5:])


# ------------------------------------------------------------------------- one-call versions


@pytest.mark.parametrize("fn", [mask_tokens_exact_count, mask_whole_words, mask_spans])
def test_one_call_versions_keep_the_label_convention(fn):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (64, 20), generator=g)
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    cont = torch.rand(64, 20, generator=g) < 0.3
    kw = {} if fn is mask_tokens_exact_count else {"is_continuation": cont}
    before = ids.clone()

    def masked_with_seed(seed):
        return fn(
            ids,
            mask_token_id=MASK,
            vocab_size=VOCAB,
            special_tokens_mask=special,
            generator=torch.Generator().manual_seed(seed),
            **kw,
        )

    out1, out2 = masked_with_seed(5), masked_with_seed(5)
    masked, labels = out1
    assert torch.equal(ids, before), "the input is not modified"
    assert torch.equal(out1[0], out2[0]) and torch.equal(out1[1], out2[1]), "same seed, same result"
    sel = labels != -100
    assert sel.any() and not (sel & special).any()
    assert torch.equal(labels[sel], ids[sel]) and torch.equal(masked[~sel], ids[~sel])
    assert ((masked >= 0) & (masked < VOCAB)).all()
    assert not torch.equal(out1[1], masked_with_seed(6)[1]), "another seed, another selection"


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(input_ids=[[5, 6]]), TypeError, "input_ids"),
        (dict(input_ids=torch.ones(2, 3, 4, dtype=torch.long) * 5), ValueError, "input_ids"),
        (dict(mlm_probability=1.5), ValueError, "mlm_probability"),
        (dict(mask_replace_prob=0.9, random_replace_prob=0.2), ValueError, "mask_replace_prob"),
        (dict(mask_token_id=VOCAB), ValueError, "mask_token_id"),
        (
            dict(special_tokens_mask=torch.zeros(2, 4, dtype=torch.bool)),
            ValueError,
            "special_tokens_mask",
        ),
        (dict(special_tokens_mask=torch.zeros(2, 3)), TypeError, "special_tokens_mask"),
        (dict(special_tokens_mask=torch.full((2, 3), 2)), ValueError, "special_tokens_mask"),
        (dict(attention_mask=torch.ones(3, 3, dtype=torch.bool)), ValueError, "attention_mask"),
        (dict(generator=0), TypeError, "generator"),
    ],
)
@pytest.mark.parametrize("fn", [mask_tokens_exact_count, mask_whole_words, mask_spans])
def test_bad_input(fn, kwargs, exc, match):
    args = dict(input_ids=torch.randint(5, VOCAB, (2, 3)), mask_token_id=MASK, vocab_size=VOCAB)
    if fn is not mask_tokens_exact_count:
        args["is_continuation"] = torch.zeros(2, 3, dtype=torch.bool)
    args.update(kwargs)
    ids = args.pop("input_ids")
    with pytest.raises(exc, match=match):
        fn(ids, **args)


@pytest.mark.parametrize(
    "fn,kwargs,exc,match",
    [
        (mask_spans, dict(is_continuation=None), TypeError, "is_continuation"),
        (
            mask_whole_words,
            dict(is_continuation=torch.zeros(2, 5, dtype=torch.bool)),
            ValueError,
            "is_continuation",
        ),
        (mask_spans, dict(geometric_p=0.0), ValueError, "geometric_p"),
    ],
)
def test_bad_span_and_continuation_arguments(fn, kwargs, exc, match):
    args = dict(
        is_continuation=torch.zeros(2, 6, dtype=torch.bool), mask_token_id=MASK, vocab_size=VOCAB
    )
    with pytest.raises(exc, match=match):
        fn(torch.randint(5, VOCAB, (2, 6)), **{**args, **kwargs})


def test_replace_selected_wants_a_bool_per_span():
    ids = torch.randint(5, VOCAB, (2, 6))
    with pytest.raises(TypeError, match="per_span"):
        replace_selected(
            ids,
            torch.zeros(2, 6, dtype=torch.bool),
            mask_token_id=MASK,
            vocab_size=VOCAB,
            per_span=1,
        )
