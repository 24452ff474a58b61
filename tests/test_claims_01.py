"""Behaviour tests of lesson 01's ledger claims (``docs/claims.md``, section "Lesson 01").

Each ``test_claim_<id>`` checks the entry it is named after (and those that name it) about
``DataCollatorForLanguageModeling`` or the ``-100`` convention against the installed transformers,
on the course tokenizer (the ``tok`` fixture) and tiny models built from configs. Seeded: every test
gives the same result each run.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers import (
    BertForMaskedLM,
    DataCollatorForLanguageModeling,
    GPT2LMHeadModel,
    set_seed,
)

from lmlessons import mask_tokens
from tests._tiny import VOCAB, bert_config, gpt2_config, seeded

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCES = [
    "The dog chased the ball across the green park on a sunny morning.",
    "It ran as fast as it could, with its ears flying back in the wind.",
    "Vegetable soup is a warm and healthy meal that is easy to cook at home.",
    "It jumped onto the fence.",
]
GLUED = "It jumped onto the fence in one smooth leap and sat there looking down."


def _features(tok, repeat: int = 1) -> list:
    return [tok(s, return_special_tokens_mask=True) for s in SENTENCES] * repeat


def _padded(tok, features) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, special) of ``features`` padded as the collator pads them."""
    enc = tok.pad([dict(f) for f in features], return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"], enc["special_tokens_mask"].bool()


def _collate(collator, features) -> dict:
    return collator([dict(f) for f in features])


# -- selection: per token, never a special token -------------------------------------------------


def test_claim_01_collator_bernoulli(tok) -> None:
    """One sentence 2,000 times: each eligible position is selected with probability 0.15, so the
    count of targets per row is Binomial(n, 0.15), not fixed."""
    features = [tok(SENTENCES[0], return_special_tokens_mask=True)] * 2000
    batch = _collate(DataCollatorForLanguageModeling(tok, seed=11), features)
    _, _, special = _padded(tok, features)
    selected = batch["labels"] != -100  # (2000, T)
    assert not (selected & special).any()
    n, p = int((~special[0]).sum()), 0.15
    counts = selected.sum(1).double()  # (2000,)
    mean_sd = math.sqrt(n * p * (1 - p) / len(counts))
    assert abs(float(counts.mean()) - n * p) < 5 * mean_sd
    assert abs(float(counts.var()) - n * p * (1 - p)) < 0.25  # binomial variance, not 0
    share_zero = float((counts == 0).double().mean())
    assert abs(share_zero - (1 - p) ** n) < 0.025  # some rows get no target at all
    per_position = selected[:, ~special[0]].double().mean(0)  # each eligible position: rate p
    assert ((per_position - p).abs() < 5 * math.sqrt(p * (1 - p) / len(counts))).all()


# -- the invariants: labels, untouched positions, padding ----------------------------------------


def test_claim_01_collator_invariants(tok) -> None:
    features = _features(tok, repeat=50)
    batch = _collate(DataCollatorForLanguageModeling(tok, seed=3), features)
    ids, attention, special = _padded(tok, features)
    labels, masked = batch["labels"], batch["input_ids"]
    selected = labels != -100
    assert selected.any() and not (selected & special).any()  # [CLS], [SEP], [PAD] never
    assert not (selected & (attention == 0)).any()
    assert torch.equal(labels[selected], ids[selected])  # the original id where selected
    assert torch.equal(masked[~selected], ids[~selected])  # everything else untouched


def test_claim_01_collator_masks_a_batch(tok) -> None:
    features = _features(tok)
    batch = _collate(DataCollatorForLanguageModeling(tok, seed=0), features)
    assert {"input_ids", "attention_mask", "labels"} <= set(batch)
    shapes = {tuple(v.shape) for v in batch.values()}
    assert shapes == {(len(features), max(len(f["input_ids"]) for f in features))}
    assert "special_tokens_mask" not in batch  # used for the selection, then dropped


def test_claim_01_collator_pads_itself(tok) -> None:
    features = _features(tok)
    assert len({len(f["input_ids"]) for f in features}) > 1  # unpadded, of different lengths
    batch = _collate(DataCollatorForLanguageModeling(tok, seed=0), features)
    _, attention, _ = _padded(tok, features)
    assert torch.equal(batch["attention_mask"], attention)
    assert (batch["input_ids"][attention == 0] == tok.pad_token_id).all()


def test_claim_01_minus_100_convention() -> None:
    ids = torch.randint(5, VOCAB, (3, 10), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, -100)
    labels[:, [2, 5]] = ids[:, [2, 5]]
    mlm = seeded(BertForMaskedLM, bert_config())
    out = mlm(input_ids=ids, labels=labels)
    keep = labels != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[keep], labels[keep]))
    clm = seeded(GPT2LMHeadModel, gpt2_config())
    clm_labels = ids.clone()
    clm_labels[:, :4] = -100  # no loss on the first four tokens
    out = clm(input_ids=ids, labels=clm_labels)
    logits, targets = out.logits[:, :-1], clm_labels[:, 1:]  # the shift inside the model
    keep = targets != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(logits[keep], targets[keep]))


# -- how the collator draws: three Bernoulli matrices and one matrix of random ids ---------------


def _replayed_draws(tok, features, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The collator's masking, replayed by hand from ``torch.Generator().manual_seed(seed)``."""
    ids, _, special = _padded(tok, features)
    g = torch.Generator().manual_seed(seed)
    prob = torch.full(ids.shape, 0.15).masked_fill(special, 0.0)
    selected = torch.bernoulli(prob, generator=g).bool()  # (B, T)
    to_mask = torch.bernoulli(torch.full(ids.shape, 0.8), generator=g).bool() & selected
    scaled = torch.full(ids.shape, 0.1 / (1 - 0.8))  # 0.5: random among the non-[MASK] rest
    to_random = torch.bernoulli(scaled, generator=g).bool() & selected & ~to_mask
    random_ids = torch.randint(len(tok), ids.shape, generator=g)
    masked = torch.where(to_random, random_ids, ids.masked_fill(to_mask, tok.mask_token_id))
    return masked, torch.where(selected, ids, -100)


def test_claim_01_transformers_coin_flips(tok) -> None:
    features = _features(tok, repeat=20)
    batch = _collate(DataCollatorForLanguageModeling(tok, seed=7), features)
    masked, labels = _replayed_draws(tok, features, seed=7)
    assert torch.equal(batch["labels"], labels)
    assert torch.equal(batch["input_ids"], masked)


def _fate_counts(masked, labels, ids, special, mask_id: int) -> list[int]:
    """Positions that became [MASK], a random id, stayed (selected) and were left alone."""
    sel = labels != -100
    to_mask, kept = sel & (masked == mask_id), sel & (masked == ids)
    return [
        int(to_mask.sum()),
        int((sel & ~to_mask & ~kept).sum()),
        int(kept.sum()),
        int((~sel & ~special).sum()),
    ]


def test_claim_01_three_draws_same_distribution(tok) -> None:
    """Over many positions the collator's fates (its draws: test_claim_01_transformers_coin_flips)
    and those of lmlessons' one-draw ``mask_tokens`` (seeded apart) both sit within binomial noise
    of p m, p r, p (1 - m - r) and 1 - p (a random id is the original or [MASK] with 1 / V each)."""
    features = _features(tok, repeat=1000)
    ids, _, special = _padded(tok, features)
    hf = _collate(DataCollatorForLanguageModeling(tok, seed=21), features)
    masked, labels = mask_tokens(
        ids,
        mask_token_id=tok.mask_token_id,
        vocab_size=len(tok),
        special_tokens_mask=special,
        generator=torch.Generator().manual_seed(22),
    )
    n, v, (p, m, r) = int((~special).sum()), len(tok), (0.15, 0.8, 0.1)
    expected = [p * (m + r / v), p * r * (1 - 2 / v), p * (1 - m - r + r / v), 1 - p]
    both = zip(
        _fate_counts(hf["input_ids"], hf["labels"], ids, special, tok.mask_token_id),
        _fate_counts(masked, labels, ids, special, tok.mask_token_id),
    )
    for q, (three, one) in zip(expected, both):
        sd = math.sqrt(n * q * (1 - q))
        assert abs(three - n * q) < 5 * sd and abs(one - n * q) < 5 * sd


def test_claim_01_transformers_bernoulli_is_rand(tok) -> None:
    features = _features(tok, repeat=8)
    ids, _, special = _padded(tok, features)
    for seed in range(5):
        batch = _collate(DataCollatorForLanguageModeling(tok, seed=seed), features)
        uniform = torch.rand(ids.shape, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(batch["labels"] != -100, (uniform < 0.15) & ~special)


# -- reproducibility ------------------------------------------------------------------------------


def test_claim_01_collator_seed_own_generator(tok) -> None:
    features = _features(tok)
    collator = DataCollatorForLanguageModeling(tok, seed=0)  # 0 counts as a seed
    assert collator.generator is None  # made at the first call
    first = _collate(collator, features)["labels"]
    generator = collator.generator
    assert isinstance(generator, torch.Generator)
    second = _collate(collator, features)["labels"]
    assert collator.generator is generator and not torch.equal(first, second)
    replay = DataCollatorForLanguageModeling(tok, seed=0)
    assert torch.equal(_collate(replay, features)["labels"], first)
    assert torch.equal(_collate(replay, features)["labels"], second)


def test_claim_01_collator_global_generator(tok) -> None:
    features = _features(tok)
    collator = DataCollatorForLanguageModeling(tok)
    torch.manual_seed(5)
    first = _collate(collator, features)["labels"]
    assert collator.generator is None
    torch.manual_seed(5)
    assert torch.equal(_collate(collator, features)["labels"], first)
    set_seed(5)
    assert torch.equal(_collate(DataCollatorForLanguageModeling(tok), features)["labels"], first)
    torch.manual_seed(6)
    assert not torch.equal(_collate(collator, features)["labels"], first)


def test_claim_01_collator_worker_seed(tok) -> None:
    features = _features(tok)
    collator = DataCollatorForLanguageModeling(tok, seed=40)
    loader = torch.utils.data.DataLoader(
        [features, features], batch_size=None, num_workers=2, collate_fn=collator
    )
    from_workers = [b["labels"] for b in loader]  # item i is collated by worker i
    for worker_id, labels in enumerate(from_workers):
        alone = _collate(DataCollatorForLanguageModeling(tok, seed=40 + worker_id), features)
        assert torch.equal(labels, alone["labels"]), worker_id
    assert not torch.equal(from_workers[0], from_workers[1])


def test_claim_01_collator_seed_zero(tok) -> None:
    features = _features(tok)

    def first_labels(seed: int, global_seed: int) -> torch.Tensor:
        torch.manual_seed(global_seed)
        return _collate(DataCollatorForLanguageModeling(tok, seed=seed), features)["labels"]

    zero = first_labels(0, global_seed=1)
    assert torch.equal(zero, first_labels(0, global_seed=2))
    assert not torch.equal(zero, first_labels(1, global_seed=1))


# -- whole-word masking ---------------------------------------------------------------------------


def _wwm_collator(tok, **kwargs) -> DataCollatorForLanguageModeling:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DataCollatorForLanguageModeling(tok, whole_word_mask=True, **kwargs)


def test_claim_01_transformers_wwm_forces(tok) -> None:
    collator = _wwm_collator(tok, mlm_probability=0.3, seed=5)
    assert collator.mask_replace_prob == 1 and collator.random_replace_prob == 0
    features = [tok(GLUED, return_offsets_mapping=True)] * 100  # offsets: one length per batch
    batch = collator(features)
    selected = batch["labels"] != -100
    assert selected.any() and (batch["input_ids"][selected] == tok.mask_token_id).all()


def test_claim_01_transformers_wwm_offsets(tok) -> None:
    enc = tok(GLUED, return_offsets_mapping=True)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    dot, word = tokens.index("."), tokens.index(".") - 1  # "down" and the "." glued to it
    assert enc["offset_mapping"][word][1] == enc["offset_mapping"][dot][0]  # no space between
    batch = _wwm_collator(tok, mlm_probability=0.25, seed=5)([enc] * 300)
    selected = batch["labels"] != -100  # (300, T)
    assert selected[:, dot].any()
    assert torch.equal(selected[:, dot], selected[:, word])  # one word for the collator
    pieces = [t for t, tt in enumerate(tokens) if tt.startswith("##")]
    for t in pieces:  # a "##" piece also goes with the piece before it
        assert torch.equal(selected[:, t], selected[:, t - 1])


def test_claim_01_transformers_no_wwm_class() -> None:
    assert not hasattr(transformers, "DataCollatorForWholeWordMask")


def test_claim_01_transformers_collator_path(tok) -> None:
    assert DataCollatorForLanguageModeling.__module__ == "transformers.data.data_collator"
    collator = DataCollatorForLanguageModeling(tok, seed=0)
    ids, _, special = _padded(tok, _features(tok))
    masked, labels = collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special)
    assert masked.shape == labels.shape == ids.shape and (labels != -100).any()
