"""MLMCollator: fields passed through, special positions, per-worker streams, bad input.

Its agreement with transformers' collator is in ``test_collator_vs_transformers.py`` and
transformers' own tests, adapted, in ``test_data_collator_upstream.py``.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from lmlessons import MLMCollator, mask_tokens
from lmlessons.course.models import tiny_bert_pretraining

TEXTS = ["the cat sat on the mat", "a dog ran", "it rained all day and all night long"]


def _seeded(tok, seed: int = 0, **kwargs) -> MLMCollator:
    return MLMCollator(tok, generator=torch.Generator().manual_seed(seed), **kwargs)


def _nsp_examples(tok) -> list[dict]:
    pairs = [(TEXTS[0], TEXTS[1]), (TEXTS[1], TEXTS[2]), (TEXTS[2], TEXTS[0])]
    return [dict(tok(a, b), next_sentence_label=i % 2) for i, (a, b) in enumerate(pairs)]


def test_strings_are_masked_by_mask_tokens_with_the_generator(tok):
    """The batch of strings is ``mask_tokens`` on the padded ids, drawn from ``generator``."""
    batch = _seeded(tok, 3)(TEXTS)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    masked, labels = mask_tokens(
        enc["input_ids"],
        mask_token_id=tok.mask_token_id,
        vocab_size=len(tok),
        special_tokens_mask=torch.isin(enc["input_ids"], torch.tensor(tok.all_special_ids)),
        generator=torch.Generator().manual_seed(3),
    )
    assert torch.equal(batch["input_ids"], masked) and torch.equal(batch["labels"], labels)
    assert torch.equal(batch["attention_mask"], enc["attention_mask"])
    assert torch.equal(batch["token_type_ids"], enc["token_type_ids"])


def test_an_nsp_batch_keeps_next_sentence_label(tok):
    examples = _nsp_examples(tok)
    batch = _seeded(tok)(examples)
    assert batch["next_sentence_label"].tolist() == [0, 1, 0]  # (B,)
    assert batch["next_sentence_label"].dtype == torch.long
    assert batch["token_type_ids"].shape == batch["input_ids"].shape
    for row, example in enumerate(examples):  # token_type_ids padded with 0
        n = len(example["input_ids"])
        assert batch["token_type_ids"][row, :n].tolist() == example["token_type_ids"]
        assert (batch["token_type_ids"][row, n:] == 0).all()
    model = tiny_bert_pretraining(tok).eval()
    with torch.no_grad():
        out = model(**batch)  # BertForPreTraining's loss needs labels and next_sentence_label
    assert out.loss is not None and torch.isfinite(out.loss)


def test_other_fields_pass_through(tok):
    examples = [{"input_ids": tok(t)["input_ids"], "weight": 0.5 * i} for i, t in enumerate(TEXTS)]
    batch = _seeded(tok)(examples)
    assert batch["weight"].tolist() == [0.0, 0.5, 1.0]
    assert set(batch) == {"input_ids", "attention_mask", "labels", "weight"}


def test_special_tokens_mask_protects_more_positions_and_is_not_returned(tok):
    examples = [dict(tok(t, return_special_tokens_mask=True)) for t in TEXTS]
    for e in examples:
        e["special_tokens_mask"][1] = 1  # the first word
    batch = MLMCollator(tok, mlm_probability=1.0)(examples)
    assert "special_tokens_mask" not in batch
    assert (batch["labels"][:, 1] == -100).all()
    assert (batch["labels"][:, 2] != -100).all(), "the second word of every text is selected"


def test_pad_to_multiple_of(tok):
    for examples in (TEXTS, [tok(t)["input_ids"] for t in TEXTS], _nsp_examples(tok)):
        batch = _seeded(tok, pad_to_multiple_of=8)(examples)
        assert batch["input_ids"].shape[1] % 8 == 0
        padding = batch["attention_mask"] == 0
        assert padding.any() and (batch["labels"][padding] == -100).all()


def test_the_examples_are_not_modified(tok):
    examples = _nsp_examples(tok)
    before = [dict(e) for e in examples]
    _seeded(tok)(examples)
    assert examples == before


def test_main_process_uses_the_generator_itself(tok):
    g = torch.Generator().manual_seed(5)
    assert MLMCollator(tok, generator=g).process_generator() is g
    assert MLMCollator(tok).process_generator() is None


class _WorkerSeed:
    """A collate_fn that returns the seed of the generator its process draws from (a class, not
    a closure, so that a DataLoader that spawns its workers can pickle it)."""

    def __init__(self, collator: MLMCollator) -> None:
        self.collator = collator

    def __call__(self, examples) -> int:
        return self.collator.process_generator().initial_seed()


class _SeedAndMasks(_WorkerSeed):
    """The worker's seed and the labels of the batch it masked."""

    def __call__(self, examples) -> tuple[int, torch.Tensor]:
        return super().__call__(examples), self.collator(examples)["labels"]


@pytest.mark.parametrize("seed", [11, 2**64 - 1])
def test_each_dataloader_worker_gets_its_own_generator(tok, seed):
    collator = _seeded(tok, seed)
    loader = DataLoader(range(8), batch_size=2, num_workers=2, collate_fn=_WorkerSeed(collator))
    assert list(loader) == [seed, (seed + 1) % 2**64] * 2


@pytest.mark.slow  # starts worker processes that import torch anew
@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_workers_started_anew_get_their_generators_too(tok, start):
    """Workers that do not fork (macOS and Windows spawn them, Linux from Python 3.14 starts them
    from a fork server) receive the collator through torch's pickler, which moves tensors to
    shared memory: a ``torch.Generator`` pickled as itself killed them there."""
    example = dict(tok(TEXTS[2]))
    loader = DataLoader(
        [example] * 8, batch_size=2, num_workers=2, collate_fn=_SeedAndMasks(_seeded(tok, 11)),
        multiprocessing_context=start,
    )  # fmt: skip
    seeds, masks = zip(*loader, strict=True)  # one pair of worker processes for both checks
    assert list(seeds) == [11, 12] * 2
    assert not torch.equal(masks[0], masks[1]), "workers 0 and 1 draw different masks"


def test_workers_draw_different_masks_reproducibly(tok):
    examples = [dict(tok(TEXTS[2]))] * 8

    def run():
        loader = DataLoader(examples, batch_size=2, num_workers=2, collate_fn=_seeded(tok, 1))
        return [b["labels"] for b in loader]

    first, again = run(), run()
    assert not torch.equal(first[0], first[1]), "workers 0 and 1 draw different masks"
    assert all(torch.equal(a, b) for a, b in zip(first, again)), "the same seed replays them"


def test_pickles_with_its_generator_state(tok):
    """A DataLoader that spawns its workers pickles the collator."""
    collator = _seeded(tok, 2)
    copy = pickle.loads(pickle.dumps(collator))
    assert torch.equal(collator(TEXTS)["labels"], copy(TEXTS)["labels"])


@pytest.mark.parametrize(
    "examples,exc,match",
    [
        ([], ValueError, "non-empty list"),
        ("the cat", ValueError, "non-empty list"),
        ([1.5, 2.5], TypeError, "examples must all be"),
        (["the cat", [2, 3]], TypeError, "examples must all be"),
        ([{"input_ids": [2, 3]}, {"ids": [2, 3]}], ValueError, r"examples\[1\] has no 'input_ids'"),
        ([{"input_ids": [2, 3], "labels": [5, 6]}], ValueError, r"examples\[0\] holds 'labels'"),
        (
            [{"input_ids": [2, 3], "x": 1}, {"input_ids": [2, 3]}],
            ValueError,
            r"examples\[1\] has the fields",
        ),
        ([[2, 99999]], ValueError, "input_ids"),
    ],
)
def test_bad_examples(tok, examples, exc, match):
    with pytest.raises(exc, match=match):
        MLMCollator(tok)(examples)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(pad_to_multiple_of=0), ValueError, "pad_to_multiple_of"),
        (dict(pad_to_multiple_of="8"), TypeError, "pad_to_multiple_of"),
        (dict(max_length=1), ValueError, "max_length"),
        (dict(generator=42), TypeError, "generator"),
        (dict(mlm_probability=1.5), ValueError, "mlm_probability"),
        (dict(mask_replace_prob=0.9, random_replace_prob=0.2), ValueError, "mask_replace_prob"),
    ],
)
def test_bad_arguments(tok, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        MLMCollator(tok, **kwargs)
