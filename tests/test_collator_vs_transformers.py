"""MLMCollator against the installed ``DataCollatorForLanguageModeling``, by behaviour.

With ``mlm_probability`` 1 or 0 and ``mask_replace_prob=1`` nothing is left to chance, so both
collators must return the same batch, field for field: the same padding, the same passed-through
fields, the same selectable positions and the same labels. With a seed, both must give
``DataLoader`` worker ``k`` the stream of ``seed + k``. The differences that are on purpose are
checked here too.
"""

from __future__ import annotations

import copy
import multiprocessing

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorForLanguageModeling

from lmlessons import MLMCollator

PAIRS = [("the cat sat", "on the mat"), ("a dog ran", "far away from home"), ("it rained", "x")]
CERTAIN = dict(mlm_probability=1.0, mask_replace_prob=1.0, random_replace_prob=0.0)
NOTHING = dict(mlm_probability=0.0)


def _pair_features(tok, **extra) -> list[dict]:
    """Tokenized NSP pairs with ``next_sentence_label`` (0 = IsNext), plus ``extra`` fields."""
    out = []
    for i, (a, b) in enumerate(PAIRS):
        enc = dict(tok(a, b, **extra))
        enc["next_sentence_label"] = i % 2
        out.append(enc)
    return out


def _feature_sets(tok) -> dict[str, list]:
    """Examples of every kind both collators accept."""
    with_stm = _pair_features(tok, return_special_tokens_mask=True)
    sop_tensors = [
        {k: torch.tensor(v) for k, v in dict(tok(a, b)).items()} | {"sentence_order_label": i % 2}
        for i, (a, b) in enumerate(PAIRS)
    ]
    arrays_and_floats = [
        {"input_ids": np.array(tok(a)["input_ids"]), "weight": 0.5 * i}
        for i, (a, _) in enumerate(PAIRS)
    ]
    return {
        "nsp dicts": _pair_features(tok),
        "nsp dicts with special_tokens_mask": with_stm,
        "sop dicts of tensors": sop_tensors,
        "arrays and a float field": arrays_and_floats,
        "id lists": [tok(a)["input_ids"] for a, _ in PAIRS],
    }


def _assert_same_batch(ours: dict, theirs, *, raw_lists: bool) -> None:
    theirs = dict(theirs)
    extra = set(ours) - set(theirs)
    assert extra == ({"attention_mask"} if raw_lists else set()), extra
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype, key
        assert torch.equal(ours[key], value), key


@pytest.mark.parametrize("pad_to_multiple_of", [None, 8])
@pytest.mark.parametrize("setting", [CERTAIN, NOTHING], ids=["select-all", "select-none"])
def test_same_batch_as_transformers_when_nothing_is_random(tok, setting, pad_to_multiple_of):
    special_ids = torch.tensor(tok.all_special_ids)
    for name, features in _feature_sets(tok).items():
        ours = MLMCollator(tok, pad_to_multiple_of=pad_to_multiple_of, **setting)
        theirs = DataCollatorForLanguageModeling(
            tok, pad_to_multiple_of=pad_to_multiple_of, **setting
        )
        batch = ours(copy.deepcopy(features))
        _assert_same_batch(batch, theirs(copy.deepcopy(features)), raw_lists=name == "id lists")
        original = MLMCollator(tok, pad_to_multiple_of=pad_to_multiple_of, **NOTHING)(
            copy.deepcopy(features)
        )["input_ids"]  # (B, T): nothing selected, so the padded ids
        eligible = batch["attention_mask"].bool() & ~torch.isin(original, special_ids)
        selected = batch["labels"] != -100
        assert torch.equal(selected, eligible if setting is CERTAIN else torch.zeros_like(selected))
        assert torch.equal(batch["labels"][selected], original[selected]), name


def test_same_batch_with_left_padding(tok):
    left = copy.deepcopy(tok)
    left.padding_side = "left"
    features = _pair_features(left, return_special_tokens_mask=True)
    ours = MLMCollator(left, **CERTAIN)(copy.deepcopy(features))
    theirs = DataCollatorForLanguageModeling(left, **CERTAIN)(copy.deepcopy(features))
    _assert_same_batch(ours, theirs, raw_lists=False)
    assert ours["attention_mask"][0, 0] == 0, "padded on the left"


def test_a_given_special_tokens_mask_adds_positions_never_selected(tok):
    features = _pair_features(tok, return_special_tokens_mask=True)
    for f in features:
        f["special_tokens_mask"][1] = 1  # protect the first word too
    ours = MLMCollator(tok, **CERTAIN)(copy.deepcopy(features))
    theirs = DataCollatorForLanguageModeling(tok, **CERTAIN)(copy.deepcopy(features))
    _assert_same_batch(ours, theirs, raw_lists=False)
    assert (ours["labels"][:, 1] == -100).all()


def test_a_special_tokens_mask_cannot_unprotect_special_tokens(tok):
    """Different on purpose: transformers uses a given mask alone, so a mask of zeros lets it
    select [CLS] and [SEP]; MLMCollator never selects the tokenizer's special ids."""
    features = _pair_features(tok, return_special_tokens_mask=True)
    for f in features:
        f["special_tokens_mask"] = [0] * len(f["input_ids"])
    ours = MLMCollator(tok, **CERTAIN)(copy.deepcopy(features))
    theirs = DataCollatorForLanguageModeling(tok, **CERTAIN)(copy.deepcopy(features))
    cls_sep = torch.tensor([tok.cls_token_id, tok.sep_token_id])
    assert (torch.isin(theirs["labels"], cls_sep)).any()
    assert not (torch.isin(ours["labels"], cls_sep)).any()


def test_labels_in_the_examples(tok):
    """Different on purpose: transformers overwrites a ``labels`` field without a word."""
    features = [dict(f, labels=7) for f in _pair_features(tok)]
    theirs = DataCollatorForLanguageModeling(tok, **CERTAIN)(copy.deepcopy(features))
    assert theirs["labels"].shape == theirs["input_ids"].shape and (theirs["labels"] != 7).all()
    with pytest.raises(ValueError, match=r"examples\[0\] holds 'labels'"):
        MLMCollator(tok)(features)


def test_offset_mapping_is_dropped(tok):
    same_length = [dict(tok(w, return_offsets_mapping=True)) for w in ("the cat", "a dog")]
    ours = MLMCollator(tok, **CERTAIN)(copy.deepcopy(same_length))
    theirs = DataCollatorForLanguageModeling(tok, **CERTAIN)(copy.deepcopy(same_length))
    _assert_same_batch(ours, theirs, raw_lists=False)
    assert "offset_mapping" not in ours
    ragged = [dict(tok(w, return_offsets_mapping=True)) for w in ("the cat", "a dog ran far")]
    with pytest.raises(ValueError):  # transformers pads first and cannot stack the offsets
        DataCollatorForLanguageModeling(tok)(copy.deepcopy(ragged))
    assert "offset_mapping" not in MLMCollator(tok)(ragged)


# ----- DataLoader workers -------------------------------------------------------------------

SEED = 7


def _examples(tok) -> list[dict]:
    """Eight copies of one example: the batches differ only by the random draws."""
    return [dict(tok("the cat sat on the mat and the dog ran far away"))] * 8


def _ours(tok, seed: int) -> MLMCollator:
    return MLMCollator(tok, generator=torch.Generator().manual_seed(seed))


def _theirs(tok, seed: int) -> DataCollatorForLanguageModeling:
    return DataCollatorForLanguageModeling(tok, seed=seed)


def _loader_batches(examples, collate, **kwargs) -> list[torch.Tensor]:
    loader = DataLoader(examples, batch_size=2, num_workers=2, collate_fn=collate, **kwargs)
    return [b["labels"] for b in loader]


@pytest.mark.parametrize("make", [_ours, _theirs], ids=["lmlessons", "transformers"])
def test_each_worker_draws_the_stream_of_seed_plus_worker_id(tok, make):
    examples = _examples(tok)
    batches = _loader_batches(examples, make(tok, SEED))  # workers take turns: 0, 1, 0, 1
    for worker in (0, 1):
        alone = make(tok, SEED + worker)  # one process, seeded seed + worker id
        expected = [alone(examples[:2])["labels"] for _ in range(2)]
        assert torch.equal(batches[worker], expected[0])
        assert torch.equal(batches[worker + 2], expected[1])
    assert not torch.equal(batches[0], batches[1]), "the two workers draw different masks"


@pytest.mark.parametrize("make", [_ours, _theirs], ids=["lmlessons", "transformers"])
def test_new_workers_each_epoch_repeat_the_masks(tok, make):
    """The same for both: workers started anew each epoch restart their streams; persistent
    workers go on drawing."""
    examples = _examples(tok)
    collate = make(tok, SEED)
    loader = DataLoader(examples, batch_size=2, num_workers=2, collate_fn=collate)
    epoch1, epoch2 = ([b["labels"] for b in loader] for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(epoch1, epoch2))
    loader = DataLoader(
        examples, batch_size=2, num_workers=2, collate_fn=collate, persistent_workers=True
    )
    epoch1, epoch2 = ([b["labels"] for b in loader] for _ in range(2))
    assert not any(torch.equal(a, b) for a, b in zip(epoch1, epoch2))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_a_collator_used_before_the_workers_start(tok):
    """Different on purpose: transformers makes its generator at the first call; called once in
    the main process, every forked worker then copies that one generator and the workers draw
    the same masks. MLMCollator derives each worker's stream at every call. (Forked workers, as
    Linux started them by default before Python 3.14: workers started anew receive the collator
    pickled, which transformers' generator does not survive.)"""
    examples = _examples(tok)
    theirs = _theirs(tok, SEED)
    theirs(examples[:2])
    batches = _loader_batches(examples, theirs, multiprocessing_context="fork")
    assert torch.equal(batches[0], batches[1])
    ours = _ours(tok, SEED)
    ours(examples[:2])
    batches = _loader_batches(examples, ours, multiprocessing_context="fork")
    assert not torch.equal(batches[0], batches[1])


def _collate_in_child(collate, examples):
    return collate(examples)["labels"]


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
@pytest.mark.parametrize("make", [_ours, _theirs], ids=["lmlessons", "transformers"])
def test_a_seeded_collator_refuses_other_child_processes(tok, make):
    """Both raise ValueError outside a DataLoader worker: each process would draw the same."""
    with multiprocessing.get_context("fork").Pool(1) as pool, pytest.raises(ValueError):
        pool.apply(_collate_in_child, (make(tok, SEED), _examples(tok)[:2]))
