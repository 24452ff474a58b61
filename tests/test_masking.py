"""mask_tokens: invariants (hypothesis), rates, determinism, and the same behaviour as
transformers' DataCollatorForLanguageModeling on the same batch."""

from __future__ import annotations

import pytest
import torch
from _masking_data import bert_tokenizer, binomial_ok, draw_ids
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import models, pre_tokenizers
from transformers import DataCollatorForLanguageModeling

from lmlessons import MLMCollator, mask_tokens

VOCAB, MASK, PAD = 50, 3, 0


@st.composite
def batches(draw):
    ids, special, seed, _ = draw_ids(draw, VOCAB, 1, 24)
    lengths = [draw(st.integers(1, ids.shape[1])) for _ in range(ids.shape[0])]
    for row, n in enumerate(lengths):
        ids[row, n:] = PAD
        special[row, n:] = True
        special[row, 0] = True  # a [CLS]-like position
    p = draw(st.floats(0.0, 1.0))
    pm = draw(st.floats(0.0, 1.0))
    pr = draw(st.floats(0.0, 1.0 - pm))
    return ids, special, p, pm, pr, seed


def _mask(ids, special, p, pm, pr, generator):
    """mask_tokens with the test vocabulary and the probabilities ``p``, ``pm``, ``pr``."""
    return mask_tokens(
        ids,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        special_tokens_mask=special,
        mlm_probability=p,
        mask_replace_prob=pm,
        random_replace_prob=pr,
        generator=generator,
    )


@given(batches())
def test_invariants(batch):
    ids, special, p, pm, pr, seed = batch
    before = ids.clone()
    masked, labels = _mask(ids, special, p, pm, pr, torch.Generator().manual_seed(seed))
    selected = labels != -100
    assert torch.equal(ids, before), "the input must not be modified"
    assert not (selected & special).any(), "special and padding positions are never selected"
    assert torch.equal(labels[selected], ids[selected]), (
        "labels hold the original id where selected"
    )
    assert torch.equal(masked[~selected], ids[~selected]), "unselected positions are unchanged"
    assert masked.dtype == ids.dtype and masked.shape == ids.shape
    assert ((masked >= 0) & (masked < VOCAB)).all()
    if pm == 0 and pr == 0:
        assert torch.equal(masked, ids), "with nothing replaced, selected tokens are kept"
    if pr == 0:
        changed = masked != ids
        assert (masked[changed] == MASK).all(), "without random replacement, only [MASK] appears"
    if p == 0:
        assert not selected.any()


@given(st.integers(0, 2**31 - 1))
def test_same_seed_same_result(seed):
    ids = torch.randint(5, VOCAB, (4, 16), generator=torch.Generator().manual_seed(1))
    a = mask_tokens(
        ids, mask_token_id=MASK, vocab_size=VOCAB, generator=torch.Generator().manual_seed(seed)
    )
    b = mask_tokens(
        ids, mask_token_id=MASK, vocab_size=VOCAB, generator=torch.Generator().manual_seed(seed)
    )
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize(
    "p,pm,pr", [(0.15, 0.8, 0.1), (0.3, 0.5, 0.25), (0.5, 1.0, 0.0), (0.2, 0.0, 1.0)]
)
def test_rates_within_binomial_bounds(p, pm, pr):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (64, 256), generator=g)
    ids[ids == MASK] = MASK + 1
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = True
    masked, labels = _mask(ids, special, p, pm, pr, g)
    eligible = int((~special).sum())
    selected = labels != -100
    n_sel = int(selected.sum())
    assert binomial_ok(n_sel, eligible, p)
    n_mask = int((selected & (masked == MASK)).sum())
    changed = selected & (masked != ids) & (masked != MASK)
    # a random draw can hit the original id or [MASK]; both happen with prob ~1/VOCAB each
    n_random_est = int(changed.sum())
    assert binomial_ok(n_mask, n_sel, pm + pr / VOCAB)
    assert binomial_ok(n_random_est, n_sel, pr * (1 - 2 / VOCAB))


def _word_tokenizer():
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{i}" for i in range(45)])}
    return bert_tokenizer(models.WordLevel(vocab, unk_token="[UNK]"), pre_tokenizers.Whitespace())


def _texts(n: int, seed: int = 0) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(3, 30, (), generator=g))
        out.append(" ".join(f"w{int(i)}" for i in torch.randint(0, 45, (length,), generator=g)))
    return out


def test_same_invariants_and_rates_as_transformers_collator():
    tok = _word_tokenizer()
    texts = _texts(400)
    ours = MLMCollator(tok, generator=torch.Generator().manual_seed(0))(texts)
    hf = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=1)
    theirs = hf([tok(t) for t in texts])
    assert torch.equal(ours["attention_mask"], theirs["attention_mask"])
    special = torch.isin(
        tok(texts, padding=True, return_tensors="pt")["input_ids"],
        torch.tensor(tok.all_special_ids),
    )
    for batch in (ours, theirs):
        sel = batch["labels"] != -100
        assert not (sel & special).any()
        eligible = int((~special).sum())
        assert binomial_ok(int(sel.sum()), eligible, 0.15)
        n_mask = int((sel & (batch["input_ids"] == tok.mask_token_id)).sum())
        assert binomial_ok(n_mask, int(sel.sum()), 0.8, z=5)
    assert "token_type_ids" in ours


def test_collator_is_reproducible_and_accepts_ids_and_dicts():
    tok = _word_tokenizer()
    texts = _texts(8, seed=3)
    a = MLMCollator(tok, generator=torch.Generator().manual_seed(0))(texts)
    b = MLMCollator(tok, generator=torch.Generator().manual_seed(0))(
        [tok(t)["input_ids"] for t in texts]
    )
    c = MLMCollator(tok, generator=torch.Generator().manual_seed(0))([dict(tok(t)) for t in texts])
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    assert torch.equal(a["labels"], c["labels"])


def test_collator_truncates_and_rejects_bad_input():
    tok = _word_tokenizer()
    batch = MLMCollator(tok, max_length=6, generator=torch.Generator().manual_seed(0))(
        ["w1 w2 w3 w4 w5 w6 w7 w8"]
    )
    assert batch["input_ids"].shape == (1, 6)
    with pytest.raises(ValueError, match="examples"):
        MLMCollator(tok)([])
    with pytest.raises(TypeError, match="examples"):
        MLMCollator(tok)([1.5, 2.5])
    with pytest.raises(ValueError, match="mlm_probability"):
        MLMCollator(tok, mlm_probability=2)

    class NoMask:
        mask_token_id = None
        pad_token_id = 0
        all_special_ids = (0,)

    with pytest.raises(ValueError, match="mask_token_id"):
        MLMCollator(NoMask())


def test_collator_seed_zero_is_reproducible():
    tok = _word_tokenizer()
    texts = _texts(16, seed=5)
    a = MLMCollator(tok, generator=torch.Generator().manual_seed(0))(texts)
    b = MLMCollator(tok, generator=torch.Generator().manual_seed(0))(texts)
    assert torch.equal(a["input_ids"], b["input_ids"])


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(input_ids=[[1, 2]]), TypeError, "input_ids"),
        (dict(input_ids=torch.ones(2, 3)), TypeError, "input_ids"),
        (dict(input_ids=torch.full((2, 3), VOCAB)), ValueError, "input_ids"),
        (dict(mlm_probability=1.2), ValueError, "mlm_probability"),
        (dict(mlm_probability=-0.1), ValueError, "mlm_probability"),
        (dict(mlm_probability="0.1"), TypeError, "mlm_probability"),
        (
            dict(mask_replace_prob=0.8, random_replace_prob=0.3),
            ValueError,
            "mask_replace_prob \\+ random_replace_prob",
        ),
        (dict(random_replace_prob=1.5), ValueError, "random_replace_prob"),
        (dict(vocab_size=0), ValueError, "vocab_size"),
        (dict(vocab_size=50.0), TypeError, "vocab_size"),
        (dict(mask_token_id=VOCAB), ValueError, "mask_token_id"),
        (dict(mask_token_id=-1), ValueError, "mask_token_id"),
        (
            dict(special_tokens_mask=torch.zeros(2, 4, dtype=torch.bool)),
            ValueError,
            "special_tokens_mask",
        ),
        (dict(special_tokens_mask=[[0, 0, 0]]), TypeError, "special_tokens_mask"),
        (dict(generator=42), TypeError, "generator"),
    ],
)
def test_bad_input(kwargs, exc, match):
    args = dict(input_ids=torch.randint(5, VOCAB, (2, 3)), mask_token_id=MASK, vocab_size=VOCAB)
    args.update(kwargs)
    ids = args.pop("input_ids")
    with pytest.raises(exc, match=match):
        mask_tokens(ids, **args)


def test_an_integer_special_tokens_mask_protects_like_a_bool_one():
    """Tokenizers return ``special_tokens_mask`` as 0/1 integers: they must protect the same
    positions as a bool mask (``~mask`` of an int tensor would protect nothing)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (64, 20), generator=g)
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -4:] = True
    for mask in (special.long(), special.int()):
        as_bool = _mask(ids, special, 0.9, 0.8, 0.1, torch.Generator().manual_seed(1))
        as_int = _mask(ids, mask, 0.9, 0.8, 0.1, torch.Generator().manual_seed(1))
        assert torch.equal(as_int[0], as_bool[0]) and torch.equal(as_int[1], as_bool[1])
        assert not ((as_int[1] != -100) & special).any()


def test_random_replacements_reach_every_id_of_the_vocabulary():
    """Random ids are drawn from [0, vocab_size): the last id too (transformers' randint(V))."""
    ids = torch.full((200, 50), 7)
    masked, labels = mask_tokens(
        ids,
        mask_token_id=MASK,
        vocab_size=10,
        mlm_probability=1.0,
        mask_replace_prob=0.0,
        random_replace_prob=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert (labels == 7).all()
    assert set(masked.unique().tolist()) == set(range(10))
