"""lmlessons.packing: ``pad`` against TRL's and the three batch layouts of lesson 09 against
transformers (oracle tests), their invariants (hypothesis), and bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
from _exact import same_tensors
from hypothesis import given
from hypothesis import strategies as st
from transformers import DataCollatorWithFlattening
from transformers.masking_utils import find_packed_sequence_indices

from lmlessons._checks import IGNORE_INDEX
from lmlessons.packing import (
    block_causal_mask,
    document_ids,
    flatten_documents,
    group_texts,
    pad,
    pad_documents,
    padded_position_ids,
)

documents = st.lists(st.lists(st.integers(0, 500), min_size=1, max_size=12), min_size=1, max_size=7)
sides = st.sampled_from(["right", "left"])


def _collator(docs, **options):
    return DataCollatorWithFlattening(**options)([{"input_ids": d} for d in docs], "pt")


def _random_docs(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 15, (int(torch.randint(1, 8, (), generator=g)),), generator=g)
    return [torch.randint(0, 1000, (int(n),), generator=g).tolist() for n in lengths]


# ------------------------------------------------------------------------------ flatten_documents


@pytest.mark.parametrize("seed", range(25))
def test_flatten_equals_data_collator_with_flattening(seed: int) -> None:
    docs = _random_docs(seed)
    ours, theirs = flatten_documents(docs), _collator(docs)
    assert set(theirs) == set(ours)
    for key in ours:
        assert ours[key].dtype == theirs[key].dtype == torch.long
        assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.parametrize(
    "docs",
    [[[7]], [[5, 6, 7]], [[1], [2], [3]], [[4, 5], [6], [7, 8, 9]], [[3] * 20]],
    ids=["one-token", "one-document", "all-one-token", "mixed", "long"],
)
def test_flatten_corner_cases_equal_the_collator(docs) -> None:
    ours, theirs = flatten_documents(docs), _collator(docs)
    assert same_tensors(ours, theirs)


def test_flatten_with_a_separator_and_labels_equals_the_collator() -> None:
    docs = [[5, 6, 7], [8, 9]]
    labels = [[IGNORE_INDEX, IGNORE_INDEX, 7], [IGNORE_INDEX, 9]]  # a prompt masked out
    theirs = DataCollatorWithFlattening(separator_id=3)(
        [{"input_ids": d, "labels": lab} for d, lab in zip(docs, labels)], "pt"
    )
    ours = flatten_documents(docs, labels=labels, separator_id=3)
    assert same_tensors(ours, theirs)
    assert ours["labels"].tolist() == [[3, IGNORE_INDEX, 7, 3, 9]]


def test_flatten_accepts_tensors() -> None:
    docs = [torch.tensor([5, 6]), torch.tensor([7])]
    assert flatten_documents(docs)["input_ids"].tolist() == [[5, 6, 7]]


@given(documents)
def test_flatten_invariants(docs) -> None:
    out = flatten_documents(docs)
    n = sum(map(len, docs))
    assert all(v.shape == (1, n) for v in out.values())
    starts = out["position_ids"][0] == 0
    assert int(starts.sum()) == len(docs)  # one restart per document
    assert bool((out["labels"][0][starts] == IGNORE_INDEX).all())
    assert torch.equal(out["labels"][0][~starts], out["input_ids"][0][~starts])
    assert document_ids(out["position_ids"])[0].max().item() == len(docs) - 1


# ------------------------------------------------------------------------------ pad


@given(
    st.lists(st.lists(st.integers(-100, 500), max_size=9), min_size=1, max_size=6),
    st.integers(-100, 3),
    sides,
    st.booleans(),
)
def test_pad_equals_trl_pad(rows, padding_value, side, as_tensors) -> None:
    from trl.trainer.utils import pad as trl_pad

    tensors = [torch.tensor(row, dtype=torch.long) for row in rows]  # empty rows included
    ours = pad(tensors if as_tensors else rows, padding_value, padding_side=side)
    theirs = trl_pad(tensors, padding_value=padding_value, padding_side=side)
    assert ours.dtype == torch.long and ours.shape == (len(rows), max(map(len, rows)))
    assert torch.equal(ours, theirs)


@given(documents, sides)
def test_pad_documents_invariants(docs, side) -> None:
    out = pad_documents(docs, pad_token_id=0, padding_side=side)
    real = out["attention_mask"] == 1  # (B, T)
    assert all(v.shape == (len(docs), max(map(len, docs))) for v in out.values())
    assert out["attention_mask"].sum(-1).tolist() == [len(d) for d in docs]
    assert out["input_ids"][real].tolist() == [t for d in docs for t in d]  # in order
    assert bool((out["input_ids"][~real] == 0).all())
    assert torch.equal(out["labels"], out["input_ids"].masked_fill(~real, IGNORE_INDEX))
    steps = out["attention_mask"].diff(dim=-1)  # (B, T - 1): padding only on `side`
    assert bool((steps <= 0).all() if side == "right" else (steps >= 0).all())


def test_pad_documents_right_and_left() -> None:
    docs = [[0, 6, 7], [8]]  # a real token equal to the pad id keeps its label
    right = pad_documents(docs, pad_token_id=0)
    assert right["input_ids"].tolist() == [[0, 6, 7], [8, 0, 0]]
    assert right["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert right["labels"].tolist() == [[0, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]
    left = pad_documents(docs, pad_token_id=0, padding_side="left")
    assert left["input_ids"].tolist() == [[0, 6, 7], [0, 0, 8]]
    assert left["labels"].tolist() == [[0, 6, 7], [IGNORE_INDEX, IGNORE_INDEX, 8]]


def test_pad_documents_matches_the_tokenizer_and_the_clm_collator(tok) -> None:
    from transformers import DataCollatorForLanguageModeling

    texts = ["The dog ran home.", "Rain fell all day long over the quiet town."]
    features = [tok(t) for t in texts]
    theirs = DataCollatorForLanguageModeling(tok, mlm=False)(features)
    ours = pad_documents([f["input_ids"] for f in features], pad_token_id=tok.pad_token_id)
    for key in ("input_ids", "attention_mask", "labels"):
        assert torch.equal(ours[key], theirs[key]), key


# ------------------------------------------------------------------------------ group_texts


def _reference_group_texts(docs, block_size, eos):
    """The LLM course's ``group_texts`` on one ``input_ids`` column, with an end token after
    every document (what ``group_texts`` of lmlessons adds)."""
    stream = list(itertools.chain(*[d + ([] if eos is None else [eos]) for d in docs]))
    total = (len(stream) // block_size) * block_size
    return [stream[i : i + block_size] for i in range(0, total, block_size)]


@given(documents, st.integers(1, 9), st.sampled_from([None, 3]))
def test_group_texts_equals_the_course_recipe(docs, block_size, eos) -> None:
    expected = _reference_group_texts(docs, block_size, eos)
    if not expected:
        with pytest.raises(ValueError, match="block_size"):
            group_texts(docs, block_size, eos_token_id=eos)
        return
    out = group_texts(docs, block_size, eos_token_id=eos)
    assert out["input_ids"].tolist() == expected
    assert torch.equal(out["labels"], out["input_ids"])
    assert out["labels"].data_ptr() != out["input_ids"].data_ptr()  # a copy


def test_group_texts_end_of_text_after_every_document() -> None:
    out = group_texts([[5, 6], [7], [8, 9]], 4, eos_token_id=3)
    assert out["input_ids"].tolist() == [[5, 6, 3, 7], [3, 8, 9, 3]]


# ------------------------------------------------------------------------------ boundaries


@pytest.mark.parametrize("seed", range(10))
def test_document_ids_equal_find_packed_sequence_indices(seed: int) -> None:
    docs = [*_random_docs(seed), [1, 2]]  # at least two documents: transformers returns a tensor
    positions = flatten_documents(docs)["position_ids"]
    assert torch.equal(document_ids(positions), find_packed_sequence_indices(positions))


def test_document_ids_of_one_document_are_zeros() -> None:
    positions = torch.arange(5)[None]
    assert find_packed_sequence_indices(positions) is None  # transformers: "not packed"
    assert document_ids(positions).tolist() == [[0] * 5]
    assert document_ids(torch.arange(3)).shape == (1, 3)  # (N,) is accepted


def _transformers_mask(positions: torch.Tensor) -> torch.Tensor:
    """The 4D mask transformers builds for packed ``position_ids`` (eager, no cache, no
    attention mask), as a bool ``(1, N, N)``."""
    from transformers import GPT2Config
    from transformers.masking_utils import create_causal_mask

    config = GPT2Config(n_embd=8, n_layer=1, n_head=2, attn_implementation="eager")
    n = positions.shape[-1]
    mask = create_causal_mask(
        config=config,
        inputs_embeds=torch.zeros(1, n, 8),
        attention_mask=None,
        past_key_values=None,
        position_ids=positions,
    )
    return mask[:, 0] == 0  # additive float mask: 0 where attended


@pytest.mark.parametrize("seed", range(8))
def test_block_causal_mask_equals_transformers_mask(seed: int) -> None:
    positions = flatten_documents([*_random_docs(seed), [4, 5, 6]])["position_ids"]
    assert torch.equal(block_causal_mask(positions), _transformers_mask(positions))


@given(documents)
def test_block_causal_mask_properties(docs) -> None:
    positions = flatten_documents(docs)["position_ids"]
    mask = block_causal_mask(positions)[0]
    doc = document_ids(positions)[0]
    n = len(doc)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(mask, (j <= i) & (doc[i] == doc[j]))
    assert bool(mask.diagonal().all())
    assert int(mask.sum()) == sum(len(d) * (len(d) + 1) // 2 for d in docs)


# ------------------------------------------------------------------------------ positions


def test_padded_position_ids_count_the_real_tokens() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    assert padded_position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]


def test_padded_position_ids_are_generates(tok) -> None:
    """What ``generate`` passes as ``position_ids`` at its first step for a left-padded batch."""
    from lmlessons.course.models import tiny_gpt2

    model = tiny_gpt2(tok, n_embd=16, n_layer=1, n_head=2)
    batch = pad_documents(
        [[2, 7, 8, 9], [2, 7]], pad_token_id=tok.pad_token_id, padding_side="left"
    )
    seen = []
    model.transformer.wpe.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    model.generate(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        max_new_tokens=1,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
    )
    assert torch.equal(seen[0], padded_position_ids(batch["attention_mask"]))


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (lambda: flatten_documents([]), ValueError, "docs"),
        (lambda: flatten_documents([[1], []]), ValueError, "docs[1]"),
        (lambda: flatten_documents("abc"), TypeError, "docs"),
        (lambda: flatten_documents([[1, 2.5]]), TypeError, "docs[0]"),
        (lambda: flatten_documents([[True]]), TypeError, "docs[0]"),
        (lambda: flatten_documents([[1]], separator_id=1.5), TypeError, "separator_id"),
        (lambda: flatten_documents([[1, 2]], labels=[[1]]), ValueError, "labels"),
        (
            lambda: pad_documents([[1]], pad_token_id=0, padding_side="middle"),
            ValueError,
            "padding_side",
        ),
        (lambda: pad_documents([[1]], pad_token_id=-1), ValueError, "pad_token_id"),
        (lambda: pad([], 0), ValueError, "rows"),
        (lambda: pad([[1]], 0.5), TypeError, "padding_value"),
        (lambda: pad([torch.zeros(2)], 0), TypeError, "rows[0]"),
        (lambda: pad([[1]], 0, padding_side="up"), ValueError, "padding_side"),
        (lambda: group_texts([[1, 2]], 0, eos_token_id=None), ValueError, "block_size"),
        (lambda: group_texts([[1, 2]], 5, eos_token_id=None), ValueError, "block_size"),
        (lambda: group_texts([[1]], 1, eos_token_id="3"), TypeError, "eos_token_id"),
        (lambda: document_ids(torch.zeros(2, 3)), TypeError, "position_ids"),
        (lambda: document_ids(torch.zeros(1, 2, 3, dtype=torch.long)), ValueError, "position_ids"),
        (
            lambda: padded_position_ids(torch.ones(3, dtype=torch.long)),
            ValueError,
            "attention_mask",
        ),
        (lambda: pad([torch.zeros(2, 2, dtype=torch.long)], 0), ValueError, "rows[0]"),
        (lambda: pad_documents([], pad_token_id=0), ValueError, "docs"),
        (lambda: pad_documents([[1], []], pad_token_id=0), ValueError, "docs[1]"),
        (lambda: group_texts([], 2, eos_token_id=None), ValueError, "docs"),
        (lambda: group_texts([[1], []], 1, eos_token_id=None), ValueError, "docs[1]"),
        (lambda: group_texts([[1, 2]], 1, eos_token_id=-1), ValueError, "eos_token_id"),
        (lambda: flatten_documents([[1]], labels=[]), ValueError, "labels"),
        (lambda: flatten_documents([[1], [2]], labels=[[1], []]), ValueError, "labels[1]"),
    ],
)
def test_bad_input_names_the_argument(call, error, argument) -> None:
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value).startswith(f"{argument} "), str(raised.value)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pad("ab", 0), "rows must be a list of token-id lists, got str"),
        (lambda: pad(["ab"], 0), "rows[0] must be a list of token ids, got str"),
        (lambda: pad([5], 0), "rows[0] must be a list of token ids, got int"),
        (lambda: flatten_documents(7), "docs must be a list of token-id lists, got int"),
        (lambda: flatten_documents([[1]], labels=[b"x"]), "labels[0] must be a list of token ids"),
    ],
)
def test_type_errors_name_the_argument_and_what_it_got(call, message: str) -> None:
    with pytest.raises(TypeError) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)


def test_group_texts_accepts_token_id_zero_as_the_end_of_text() -> None:
    out = group_texts([[5, 6], [7]], 5, eos_token_id=0)  # id 0 is a valid token
    assert out["input_ids"].tolist() == [[5, 6, 0, 7, 0]]


def test_the_collator_fails_on_an_empty_list_and_we_say_why() -> None:
    with pytest.raises(IndexError):
        _collator([])  # transformers: features[0] of an empty list
    with pytest.raises(ValueError, match="at least one document"):
        flatten_documents([])
