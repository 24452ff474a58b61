"""Properties of Part II's core (lessons 09-10) against slow, obviously right references.

Every public function of ``lmlessons.packing``, ``lmlessons.perplexity`` and
``lmlessons.answer_only``, and the batching of ``lmlessons.course.chat.sft_batches``, is compared
on random inputs with a plain-Python loop over lists that says what it computes, one position
(or one row) at a time. The inputs reach the edges the example tests do not: position ids that
restart at a value other than 0 or jump upward, rows without a target, empty prompts, every mask
pattern, a number of examples that batch_size divides. Where an existing test already compares
a function with a reference on random input (``group_texts``, ``pad`` against TRL's,
``pad_documents``' invariants), it is not repeated here.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lmlessons._checks import IGNORE_INDEX
from lmlessons.answer_only import (
    assistant_only_labels,
    completion_only_labels,
    per_example_mean_loss,
    per_token_mean_loss,
)
from lmlessons.packing import (
    block_causal_mask,
    document_ids,
    flatten_documents,
    padded_position_ids,
)
from lmlessons.perplexity import (
    bits_per_unit,
    perplexity,
    pseudo_log_likelihoods,
    pseudo_perplexity,
    sequence_perplexities,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IGNORE = IGNORE_INDEX

# ------------------------------------------------------------------------ plain-Python references


def _log_softmax(row: list[float]) -> list[float]:
    top = max(row)
    lse = top + math.log(sum(math.exp(x - top) for x in row))
    return [x - lse for x in row]


def _shifted_nll(logits: list, labels: list) -> list[list[float | None]]:
    """Per row, per position t: -log p(labels[t + 1] | logits[t]), None without a target (the
    last position, or a next label of -100)."""
    out = []
    for row_logits, row_labels in zip(logits, labels):
        row = []
        for t, scores in enumerate(row_logits):
            target = row_labels[t + 1] if t + 1 < len(row_labels) else IGNORE
            row.append(None if target == IGNORE else -_log_softmax(scores)[target])
        out.append(row)
    return out


def _document_ids_by_loop(positions: list[int]) -> list[int]:
    """A new document wherever a position is not the previous one plus 1."""
    out, doc = [], 0
    for t, p in enumerate(positions):
        if t > 0 and p != positions[t - 1] + 1:
            doc += 1
        out.append(doc)
    return out


# ------------------------------------------------------------------------------------ strategies


@st.composite
def packed_positions(draw) -> list[int]:
    """Position ids of packed documents: each starts anywhere (not only at 0) and counts up by
    1; or, half the time, any small integers (repeats, downward and upward jumps)."""
    if draw(st.booleans()):
        return draw(st.lists(st.integers(-2, 6), min_size=1, max_size=14))
    starts = draw(st.lists(st.integers(0, 9), min_size=1, max_size=5))
    lengths = draw(st.lists(st.integers(1, 4), min_size=len(starts), max_size=len(starts)))
    return [s + i for s, n in zip(starts, lengths) for i in range(n)]


@st.composite
def lm_batches(draw, *, max_b: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, T, V)`` float32 logits from a seed and ``(B, T)`` labels, each -100 or an id."""
    b, t, v = draw(st.integers(1, max_b)), draw(st.integers(1, 5)), draw(st.integers(2, 5))
    label = st.integers(-1, v - 1).map(lambda x: IGNORE if x < 0 else x)
    labels = draw(st.lists(st.lists(label, min_size=t, max_size=t), min_size=b, max_size=b))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    logits = torch.randn(b, t, v, generator=g) * draw(st.sampled_from([0.1, 1.0, 4.0]))
    return logits, torch.tensor(labels, dtype=torch.long)


# ------------------------------------------------------------------------------ packing: boundaries


@settings(max_examples=60)
@given(packed_positions(), st.booleans())
@example([3, 4, 5, 7, 8, 0, 1], False)  # restarts at 3, jumps up 5 -> 7: three documents
@example([2, 3, 0, 1], True)
def test_document_ids_are_the_loop_over_positions(positions, batched) -> None:
    tensor = torch.tensor([positions] if batched else positions)
    assert document_ids(tensor).tolist() == [_document_ids_by_loop(positions)]


@settings(max_examples=40)
@given(st.lists(packed_positions(), min_size=1, max_size=3).filter(
    lambda rows: len({len(r) for r in rows}) == 1
))  # fmt: skip
def test_document_ids_number_each_row_on_its_own(rows) -> None:
    assert document_ids(torch.tensor(rows)).tolist() == [_document_ids_by_loop(r) for r in rows]


@settings(max_examples=40)
@given(packed_positions())
@example([5, 6, 9, 10])  # an upward jump: two documents, the second cannot see the first
def test_block_causal_mask_is_the_loop_over_query_key_pairs(positions) -> None:
    doc = _document_ids_by_loop(positions)
    n = len(positions)
    expected = [[j <= i and doc[i] == doc[j] for j in range(n)] for i in range(n)]
    assert block_causal_mask(torch.tensor(positions)).tolist() == [expected]


@settings(max_examples=40)
@given(st.lists(st.lists(st.integers(0, 1), min_size=1, max_size=7), min_size=1, max_size=4)
       .filter(lambda rows: len({len(r) for r in rows}) == 1))  # fmt: skip
def test_padded_position_ids_count_the_real_tokens_before_each(mask) -> None:
    expected = [[sum(row[:t]) if row[t] else 0 for t in range(len(row))] for row in mask]
    assert padded_position_ids(torch.tensor(mask)).tolist() == expected


@settings(max_examples=40)
@given(
    st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(0, 2**16),
    st.integers(-100, 60),
)
def test_flatten_documents_with_labels_and_a_separator_is_the_loop(docs, seed, separator) -> None:
    g = torch.Generator().manual_seed(seed)
    labels = [
        [tok if bool(torch.rand((), generator=g) < 0.6) else IGNORE for tok in doc] for doc in docs
    ]
    out = flatten_documents(docs, labels=labels, separator_id=separator)
    ids, targets, positions = [], [], []
    for doc, lab in zip(docs, labels):
        for i, tok in enumerate(doc):
            ids.append(tok)
            targets.append(separator if i == 0 else lab[i])
            positions.append(i)
    assert out["input_ids"].tolist() == [ids]
    assert out["labels"].tolist() == [targets]
    assert out["position_ids"].tolist() == [positions]


# ------------------------------------------------------------------------------ perplexity


@settings(max_examples=30)
@given(lm_batches())
def test_perplexity_and_sequence_perplexities_are_the_loop(batch) -> None:
    logits, labels = batch
    nll = _shifted_nll(logits.tolist(), labels.tolist())
    terms = [x for row in nll for x in row if x is not None]
    if not terms:
        with pytest.raises(ValueError, match="labels"):
            perplexity(logits, labels)
    else:
        assert perplexity(logits, labels) == pytest.approx(
            math.exp(sum(terms) / len(terms)), rel=1e-5
        )
    rows = [[x for x in row if x is not None] for row in nll]
    if any(not r for r in rows):
        with pytest.raises(ValueError, match="labels"):
            sequence_perplexities(logits, labels)
    else:
        expected = [math.exp(sum(r) / len(r)) for r in rows]
        assert sequence_perplexities(logits, labels).tolist() == pytest.approx(expected, rel=1e-5)


@settings(max_examples=30)
@given(st.floats(0, 1e6), st.integers(1, 10**6))
def test_bits_per_unit_is_nats_over_units_over_ln_2(total, units) -> None:
    assert bits_per_unit(total, units) == pytest.approx(total / units / math.log(2), rel=1e-12)


class _Bidirectional(torch.nn.Module):
    """A toy masked LM: the logits of position t depend on its token and on every other token
    (their mean embedding), so masking one token changes every position's logits."""

    def __init__(self, vocab: int, seed: int, *, pretraining: bool) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.own, self.ctx = (
            torch.randn(vocab, vocab, generator=g),
            torch.randn(vocab, vocab, generator=g),
        )
        self.pretraining = pretraining

    def forward(self, input_ids):
        logits = self.own[input_ids] + self.ctx[input_ids].mean(dim=-2, keepdim=True)  # (K, T, V)
        key = "prediction_logits" if self.pretraining else "logits"
        return SimpleNamespace(**{key: logits})


@settings(max_examples=30)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=6),
    st.data(),
    st.integers(0, 2**16),
    st.booleans(),
)
def test_pseudo_log_likelihoods_mask_each_scored_token_in_its_own_copy(
    ids, data, seed, pretraining
) -> None:
    mask_id = 6
    scored = data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    if not any(scored):
        scored[data.draw(st.integers(0, len(ids) - 1))] = True
    model = _Bidirectional(7, seed, pretraining=pretraining)
    expected = []
    for t, keep in enumerate(scored):
        if keep:
            copy = list(ids)
            copy[t] = mask_id
            out = model(torch.tensor([copy]))
            scores = (out.prediction_logits if pretraining else out.logits)[0, t].tolist()
            expected.append(_log_softmax(scores)[ids[t]])
    got = pseudo_log_likelihoods(
        model, torch.tensor(ids), mask_token_id=mask_id, scored=torch.tensor(scored)
    )
    assert got.tolist() == pytest.approx(expected, abs=1e-5)


@settings(max_examples=30)
@given(st.lists(st.lists(st.floats(-8, 0), max_size=4), min_size=1, max_size=4))
def test_pseudo_perplexity_pools_every_scored_token_of_the_corpus(parts) -> None:
    values = [x for p in parts for x in p]
    tensors = [torch.tensor(p, dtype=torch.float64) for p in parts]
    if not values:
        with pytest.raises(ValueError, match="log_likelihoods"):
            pseudo_perplexity(tensors)
        return
    expected = math.exp(-sum(values) / len(values))
    assert pseudo_perplexity(tensors) == pytest.approx(expected, rel=1e-9)
    assert pseudo_perplexity(torch.tensor(values, dtype=torch.float64)) == pytest.approx(
        expected, rel=1e-9
    )


# ------------------------------------------------------------------------------ answer_only


@st.composite
def ids_and_masks(draw):
    """Token ids ``(T,)`` or ``(B, T)`` (lists) and a 0/1 mask of the same shape."""
    t = draw(st.integers(0, 6))
    row = st.lists(st.integers(0, 40), min_size=t, max_size=t)
    bits = st.lists(st.integers(0, 1), min_size=t, max_size=t)
    if draw(st.booleans()):
        return draw(row), draw(bits)
    b = draw(st.integers(1, 3))
    return draw(st.lists(row, min_size=b, max_size=b)), draw(st.lists(bits, min_size=b, max_size=b))


def _masked(ids, mask):
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return [_masked(r, m) for r, m in zip(ids, mask)]
    return [tok if keep else IGNORE for tok, keep in zip(ids, mask)]


@settings(max_examples=50)
@given(ids_and_masks(), st.sampled_from(["lists", "long", "bool"]))
def test_assistant_only_labels_keep_exactly_the_masked_ids(pair, form) -> None:
    ids, mask = pair
    if form == "lists":
        got = assistant_only_labels(ids, mask)
    else:
        dtype = torch.bool if form == "bool" else torch.long
        got = assistant_only_labels(
            torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=dtype)
        )
    assert got.tolist() == _masked(ids, mask)


@settings(max_examples=40)
@given(
    st.lists(st.integers(0, 40), max_size=5),
    st.lists(st.integers(0, 40), min_size=1, max_size=5),
    st.booleans(),
)
def test_completion_only_labels_are_the_prompt_then_the_completion(prompt, completion, as_tensors):
    args = (
        (torch.tensor(prompt, dtype=torch.long), torch.tensor(completion))
        if as_tensors
        else (prompt, completion)
    )
    out = completion_only_labels(*args)
    assert out["input_ids"].tolist() == prompt + completion
    assert out["completion_mask"].tolist() == [0] * len(prompt) + [1] * len(completion)
    assert out["labels"].tolist() == [IGNORE] * len(prompt) + completion


@settings(max_examples=25)
@given(lm_batches(), st.sampled_from([None, 1, 7, 2.5]))
def test_per_token_loss_is_the_sum_over_targets_over_their_count(batch, num_items) -> None:
    logits, labels = batch
    terms = [
        x for row in _shifted_nll(logits.tolist(), labels.tolist()) for x in row if x is not None
    ]
    divisor = num_items if num_items is not None else max(len(terms), 1)
    got = per_token_mean_loss(logits, labels, num_items_in_batch=num_items)
    assert float(got) == pytest.approx(sum(terms) / divisor, rel=1e-5, abs=1e-6)


@settings(max_examples=25)
@given(lm_batches(max_b=4), st.sampled_from([None, 1, 5]))
def test_per_example_mean_loss_is_the_mean_of_the_row_means(batch, num_examples) -> None:
    logits, labels = batch
    rows = [
        [x for x in row if x is not None] for row in _shifted_nll(logits.tolist(), labels.tolist())
    ]
    means = [sum(r) / len(r) for r in rows if r]  # rows without a target are left out
    divisor = num_examples if num_examples is not None else max(len(means), 1)
    got = per_example_mean_loss(logits, labels, num_examples_in_batch=num_examples)
    assert float(got) == pytest.approx(sum(means) / divisor, rel=1e-5, abs=1e-6)


# ------------------------------------------------------------------------------ course.chat


@pytest.fixture(scope="module")
def encoded(chat_tok):
    """Nine held-out examples of lesson 10 and their rows under each labelling."""
    from lmlessons.course.chat import TRAIN_ON, encode_example, instruction_set

    examples = instruction_set("validation")[:9]
    rows = {
        (train_on, pad_is_eos): [
            encode_example(chat_tok, e, train_on=train_on, pad_is_eos=pad_is_eos) for e in examples
        ]
        for train_on in TRAIN_ON
        for pad_is_eos in (False, True)
    }
    return SimpleNamespace(tok=chat_tok, examples=examples, rows=rows)


def _padded(rows: list[list[int]], value: int) -> list[list[int]]:
    width = max(len(r) for r in rows)
    return [r + [value] * (width - len(r)) for r in rows]


@settings(max_examples=20)
@given(
    n=st.integers(1, 9),
    batch_size=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    train_on=st.sampled_from(["assistant only", "completion only", "everything"]),
    pad_is_eos=st.booleans(),
)
@example(n=8, batch_size=4, seed=0, train_on="assistant only", pad_is_eos=False)
@example(n=9, batch_size=3, seed=1, train_on="everything", pad_is_eos=True)
def test_sft_batches_cut_every_permutation_into_its_full_batches(
    encoded, n, batch_size, seed, train_on, pad_is_eos
) -> None:
    """Per pass, one permutation from the generator, cut at 0, b, 2b, ... into every batch that
    is full (the last one too when b divides n), the rest dropped; each batch right-padded.
    Fewer examples than ``batch_size``: an error that names it."""
    from lmlessons.course.chat import sft_batches

    def batches():
        return sft_batches(
            encoded.examples[:n],
            encoded.tok,
            batch_size=batch_size,
            train_on=train_on,
            pad_is_eos=pad_is_eos,
            generator=torch.Generator().manual_seed(seed),
        )

    if n < batch_size:
        with pytest.raises(ValueError, match="batch_size"):
            next(batches())
        return
    rows = encoded.rows[(train_on, pad_is_eos)][:n]
    pad_id = encoded.tok.pad_token_id
    g = torch.Generator().manual_seed(seed)
    expected = []
    for _ in range(2):  # two passes
        order = torch.randperm(n, generator=g).tolist()
        for k in range(n // batch_size):
            chosen = [rows[i] for i in order[k * batch_size : (k + 1) * batch_size]]
            ids = [r["input_ids"] for r in chosen]
            expected.append({
                "input_ids": _padded(ids, pad_id),
                "attention_mask": _padded([[1] * len(r) for r in ids], 0),
                "labels": _padded([r["labels"] for r in chosen], IGNORE),
            })  # fmt: skip
    got = batches()
    for want in expected:
        assert {k: v.tolist() for k, v in next(got).items()} == want
