"""Tests that pin what mutation testing of the validators, linear_ce and masking_variants found.

``mutmut`` on ``lmlessons._checks``, ``lmlessons.linear_ce`` and ``lmlessons.masking_variants`` left
mutants alive that change the text of an error message (the argument it names, the type or value
it got), a bound of a check (a 0-dim integer tensor, ``vocab_size=1``, ``mask_token_id=0``,
``num_items_in_batch=1``, ``max_span_length=1``), a default (Google's 0.15 and 20, SpanBERT's 0.2
and 10), an argument passed on (``max_predictions_per_seq``, ``per_span``, the 80/10/10 shares), the
bias of the low-precision path, the gradient of one input alone, the gradient buffers allocated
when no gradient is wanted, the rows after a row with nothing to select, the start and the end of a
span, or a 1-D input returned as 1-D. Each test compares with a hand-written expectation, the
dense ``F.cross_entropy`` or the message the source's f-string writes. Tiny tensors, no model.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _exact import gen, raises_exactly
from _masking_data import binomial_ok
from torch.utils._python_dispatch import TorchDispatchMode

from lmlessons import _checks
from lmlessons.linear_ce import linear_cross_entropy
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


def _ids(b: int, t: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, VOCAB, (b, t), generator=gen(seed))  # (B, T)


def _no(b: int, t: int) -> torch.Tensor:
    return torch.zeros(b, t, dtype=torch.bool)  # (B, T)


# ------------------------------------------------------------------------------ _checks


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("0.5", TypeError, "p must be a float in [0, 1], got str"),
        (True, TypeError, "p must be a float in [0, 1], got bool"),
        (1.5, ValueError, "p must be in [0, 1], got 1.5"),
    ],
)
def test_check_probability_names_the_argument_and_what_it_got(value, error, message):
    raises_exactly(error, message, lambda: _checks.check_probability("p", value))


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("1", TypeError, "beta must be a number, got str"),
        (True, TypeError, "beta must be a number, got bool"),
        (-1, ValueError, "beta must be a finite number >= 0, got -1.0"),
    ],
)
def test_check_real_names_the_argument_and_what_it_got(value, error, message):
    raises_exactly(error, message, lambda: _checks.check_real("beta", value))


def test_the_replacement_shares_are_named_and_their_sum_printed():
    raises_exactly(
        ValueError,
        "random_replace_prob must be in [0, 1], got 1.5",
        lambda: _checks.check_replace_probs(0.5, 1.5),
    )
    raises_exactly(
        ValueError,
        "mask_replace_prob + random_replace_prob must be <= 1 (the rest are kept), "
        "got 0.75 + 0.5 = 1.25",
        lambda: _checks.check_replace_probs(0.75, 0.5),
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            torch.tensor([10, 11]),
            "seq_length must be an int, got a torch.int64 tensor of shape (2,)",
        ),
        (torch.tensor(10.0), "seq_length must be an int, got a torch.float32 tensor of shape ()"),
        (torch.tensor(True), "seq_length must be an int, got a torch.bool tensor of shape ()"),
        ("10", "seq_length must be an int, got str"),
    ],
)
def test_check_int_rejects_all_but_one_integer_and_names_what_it_got(value, message):
    raises_exactly(TypeError, message, lambda: num_to_predict(value))


@pytest.mark.parametrize("value", [torch.tensor(40), torch.tensor([40]), torch.tensor(40).int()])
def test_check_int_accepts_a_one_element_integer_tensor(value):
    assert num_to_predict(value) == num_to_predict(40) == 6  # round(40 * 0.15)


def test_check_int_tensor_checks_the_number_of_dimensions():
    two = torch.zeros(2, 3, dtype=torch.long)
    assert _checks.check_int_tensor("labels", two, ndim=2) is two
    raises_exactly(
        ValueError,
        "labels must have 1 dimensions, got shape (2, 3)",
        lambda: _checks.check_int_tensor("labels", two, ndim=1),
    )


@pytest.mark.parametrize(
    ("ids", "single", "shape"),
    [
        (torch.tensor([5, 6, 7]), False, (1, 3)),
        (torch.tensor([[5, 6, 7], [8, 9, 5]]), False, (2, 3)),
        (torch.tensor([5]), False, (1, 1)),
        (torch.tensor([5, 6, 7]), True, (1, 3)),
        (torch.tensor([[5, 6, 7]]), True, (1, 3)),
    ],
)
def test_check_sequences_returns_a_batch(ids, single, shape):
    out = _checks.check_sequences("input_ids", ids, single=single)
    assert tuple(out.shape) == shape
    assert out.flatten().tolist() == ids.flatten().tolist()


def test_check_sequences_accepts_a_batch_by_default():
    ids = torch.tensor([[5, 6], [7, 8]])
    assert torch.equal(_checks.check_sequences("input_ids", ids), ids)


@pytest.mark.parametrize(
    ("shape", "single", "message"),
    [
        ((0,), False, "input_ids must be of shape (T,) or (B, T) with T >= 1, got (0,)"),
        ((2, 0), False, "input_ids must be of shape (T,) or (B, T) with T >= 1, got (2, 0)"),
        ((1, 2, 3), False, "input_ids must be of shape (T,) or (B, T) with T >= 1, got (1, 2, 3)"),
        (
            (2, 3),
            True,
            "input_ids must be one sequence of shape (T,) or (1, T) with T >= 1, got (2, 3)",
        ),
        (
            (1, 0),
            True,
            "input_ids must be one sequence of shape (T,) or (1, T) with T >= 1, got (1, 0)",
        ),
    ],
)
def test_check_sequences_states_the_shape_it_wants_and_got(shape, single, message):
    ids = torch.zeros(shape, dtype=torch.long)
    raises_exactly(
        ValueError, message, lambda: _checks.check_sequences("input_ids", ids, single=single)
    )


def test_check_sequences_wants_a_tensor_of_ids():
    raises_exactly(
        TypeError,
        "input_ids must be a torch.Tensor of token ids, got list",
        lambda: _checks.check_sequences("input_ids", [5, 6]),
    )


def test_check_token_documents_returns_lists_of_ints():
    docs = [[[5, 6], torch.tensor([7])], [[8]]]
    out = _checks.check_token_documents("documents", docs)
    assert out == [[[5, 6], [7]], [[8]]]
    assert type(out[0][1]) is list and type(out[0][1][0]) is int


@pytest.mark.parametrize(
    ("docs", "error", "message"),
    [
        (
            "abc",
            TypeError,
            "documents must be a list of documents, each a list of sentences of token ids",
        ),
        ([], ValueError, "documents must not be empty"),
        (
            [[[5]], 7],
            TypeError,
            "documents[1] must be a list of sentences (lists of token ids), got int",
        ),
        (
            [[[5]], []],
            ValueError,
            "documents[1] is empty: every document needs at least one sentence",
        ),
        (
            [[[5], "ab"]],
            TypeError,
            "documents[0][1] must be a list of token ids (tokenize first), got str",
        ),
        ([[[5], []]], ValueError, "documents[0][1] is an empty sentence"),
        ([[[5, 1.5]]], TypeError, "documents[0][0] must hold int token ids"),
        ([[[5, True]]], TypeError, "documents[0][0] must hold int token ids"),
    ],
)
def test_check_token_documents_names_the_document_and_sentence(docs, error, message):
    raises_exactly(error, message, lambda: _checks.check_token_documents("documents", docs))


def test_check_generator_model_and_tokenizer_name_what_they_got():
    raises_exactly(
        TypeError,
        "generator must be a torch.Generator or None, got int",
        lambda: _checks.check_generator(0),
    )
    raises_exactly(
        TypeError,
        "model must be a torch.nn.Module (a transformers model), got str",
        lambda: _checks.check_model("bert"),
    )
    tokenizer = SimpleNamespace(pad_token_id=0, cls_token_id=2, sep_token_id=3)
    raises_exactly(
        ValueError,
        "tokenizer must define mask_token_id (a BERT-style tokenizer such as "
        "lmlessons.load_tokenizer())",
        lambda: _checks.check_tokenizer(tokenizer),
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(vocab_size=0), ValueError, "vocab_size must be >= 1, got 0"),
        (dict(vocab_size="60"), TypeError, "vocab_size must be an int, got str"),
        (dict(mask_token_id="4"), TypeError, "mask_token_id must be an int, got str"),
        (
            dict(mask_token_id=VOCAB),
            ValueError,
            "mask_token_id must be in [0, vocab_size=60), got 60",
        ),
        (dict(mask_token_id=-1), ValueError, "mask_token_id must be in [0, vocab_size=60), got -1"),
        (
            dict(input_ids=torch.tensor([[5, VOCAB]])),
            ValueError,
            "input_ids must be in [0, vocab_size=60); found ids outside it",
        ),
    ],
)
def test_check_vocab_names_the_argument_and_its_bound(kwargs, error, message):
    args: dict[str, Any] = dict(
        input_ids=torch.tensor([[5, VOCAB - 1]]), mask_token_id=MASK, vocab_size=VOCAB
    )
    args.update(kwargs)
    ids = args.pop("input_ids")
    selected = torch.ones(ids.shape, dtype=torch.bool)
    raises_exactly(error, message, lambda: replace_selected(ids, selected, per_span=True, **args))


def test_the_smallest_vocabulary_and_mask_token_id_0_are_accepted():
    """``vocab_size >= 1`` and ``mask_token_id`` in ``[0, vocab_size)``: one id, 0, is [MASK]."""
    ids = torch.zeros(1, 3, dtype=torch.long)
    sel = torch.tensor([[True, False, True]])
    masked, labels = replace_selected(
        ids,
        sel,
        mask_token_id=0,
        vocab_size=1,
        per_span=True,
        mask_replace_prob=1.0,
        random_replace_prob=0.0,
    )
    assert torch.equal(masked, ids) and labels.tolist() == [[0, -100, 0]]


# ------------------------------------------------------------------------------ linear_ce


def _lce_inputs(dtype=torch.float32, seed=0):
    g = gen(seed)
    h = torch.randn(6, 4, generator=g, dtype=dtype)  # (N, H)
    w = torch.randn(9, 4, generator=g, dtype=dtype)  # (V, H)
    b = torch.randn(9, generator=g, dtype=dtype)  # (V,)
    y = torch.tensor([3, -100, 0, 8, -100, 5])  # (N,)
    return h, w, b, y


def _dense(h, w, b, y):
    logits = F.linear(h, w, b).float()  # (N, V), upcast like transformers
    return F.cross_entropy(logits, y, ignore_index=-100)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs_add_the_bias(dtype):
    h, w, b, y = _lce_inputs(dtype)
    out = linear_cross_entropy(h, w, y, bias=b, chunk_size=2)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, _dense(h, w, b, y), rtol=2e-2, atol=2e-2)
    without = linear_cross_entropy(h, w, y, chunk_size=2)
    assert abs(float(out) - float(without)) > 0.1  # the bias moves this loss: the check can fail


@pytest.mark.parametrize("alone", ["hidden_states", "weight", "bias"])
def test_one_input_alone_gets_the_dense_gradient(alone):
    """Only one of hidden_states, weight and bias requires a gradient: it gets the dense one."""
    h, w, b, y = _lce_inputs(torch.float64)
    inputs = {"hidden_states": h, "weight": w, "bias": b}
    inputs[alone].requires_grad_()
    linear_cross_entropy(h, w, y, bias=b, chunk_size=4).backward()
    mine = inputs[alone].grad
    inputs[alone].grad = None
    F.cross_entropy(F.linear(h, w, b), y, ignore_index=-100).backward()
    torch.testing.assert_close(mine, inputs[alone].grad, rtol=1e-10, atol=1e-12)
    assert float(mine.abs().sum()) > 0


class _NewTensors(TorchDispatchMode):
    """Records the shape of every tensor an op returns in storage that none of its inputs had."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = [*args, *(kwargs or {}).values()]
        seen = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                self.shapes.add(tuple(t.shape))
        return out


@pytest.mark.parametrize(
    ("grad_enabled", "wanted"),
    [
        (False, ("hidden_states", "weight", "bias")),
        (True, ()),
        (True, ("hidden_states",)),
        (True, ("weight",)),
        (True, ("bias",)),
        (True, ("hidden_states", "weight", "bias")),
    ],
)
def test_gradient_buffers_are_made_only_for_the_gradients_wanted(grad_enabled, wanted):
    """Under ``no_grad`` (an evaluation) or for an input that needs no gradient, the forward
    allocates no gradient the size of that input: only the loss work is done."""
    g = gen(1)
    inputs = {
        "hidden_states": torch.randn(5, 3, generator=g),  # (N, H)
        "weight": torch.randn(11, 3, generator=g),  # (V, H)
        "bias": torch.randn(11, generator=g),  # (V,)
    }
    for name in wanted:
        inputs[name].requires_grad_()
    y = torch.tensor([1, 4, -100, 10, 0])  # (N,)
    with torch.set_grad_enabled(grad_enabled), _NewTensors() as made:
        linear_cross_entropy(
            inputs["hidden_states"], inputs["weight"], y, bias=inputs["bias"], chunk_size=2
        )
    expected = {name for name in wanted if grad_enabled}
    assert {n for n, t in inputs.items() if tuple(t.shape) in made.shapes} == expected


def test_one_class_gives_a_zero_loss():
    """``V = 1`` is a vocabulary: log-softmax over one class is 0."""
    h = torch.randn(3, 4, generator=gen(0))  # (N, H)
    w = torch.randn(1, 4, generator=gen(1))  # (1, H)
    assert float(linear_cross_entropy(h, w, torch.tensor([0, -100, 0]))) == 0.0


@pytest.mark.parametrize(("count", "scale"), [(1, 1.0), (0.5, 2.0), (torch.tensor(1), 1.0)])
def test_any_positive_num_items_in_batch_divides_the_sum(count, scale):
    h, w, b, y = _lce_inputs(torch.float64)
    total = F.cross_entropy(F.linear(h, w, b), y, ignore_index=-100, reduction="sum")
    out = linear_cross_entropy(h, w, y, bias=b, num_items_in_batch=count)
    torch.testing.assert_close(out, scale * total, rtol=1e-12, atol=1e-12)


_COUNT = "(count the labels != -100 over all micro-batches; for CLM count after the shift)"


@pytest.mark.parametrize(
    ("count", "error", "message"),
    [
        (
            torch.tensor(True),
            TypeError,
            "num_items_in_batch must be a number or a one-element tensor, got a torch.bool "
            "tensor of shape ()",
        ),
        (
            torch.tensor(3 + 0j),
            TypeError,
            "num_items_in_batch must be a number or a one-element tensor, got a torch.complex64 "
            "tensor of shape ()",
        ),
        ("3", TypeError, "num_items_in_batch must be a number, got str"),
        (
            0,
            ValueError,
            f"num_items_in_batch must be a positive count of target tokens, got 0 {_COUNT}",
        ),
        (
            torch.tensor(-2),
            ValueError,
            f"num_items_in_batch must be a positive count of target tokens, got -2 {_COUNT}",
        ),
        (
            -2.5,
            ValueError,
            f"num_items_in_batch must be a positive count of target tokens, got -2.5 {_COUNT}",
        ),
    ],
)
def test_num_items_in_batch_messages(count, error, message):
    h, w, _, y = _lce_inputs()
    raises_exactly(error, message, lambda: linear_cross_entropy(h, w, y, num_items_in_batch=count))


_H3 = torch.zeros(2, 3, 4)  # (B, T, H)
_W = torch.zeros(5, 4)  # (V, H)
_Y = torch.zeros(2, 3, dtype=torch.long)  # (B, T)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (
            (torch.zeros(4), _W, torch.zeros(1, dtype=torch.long)),
            {},
            ValueError,
            "hidden_states must have at least 2 dimensions, got shape (4,)",
        ),
        (
            (_H3.long(), _W, _Y),
            {},
            TypeError,
            "hidden_states must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            (torch.zeros(1, 2, 3, 4), _W, torch.zeros(1, 2, 3, dtype=torch.long)),
            {},
            ValueError,
            "hidden_states must have shape (B, T, H) or (N, H), got (1, 2, 3, 4)",
        ),
        (
            (_H3, torch.zeros(4), _Y),
            {},
            ValueError,
            "weight must have at least 2 dimensions, got shape (4,)",
        ),
        (
            (_H3, _W.long(), _Y),
            {},
            TypeError,
            "weight must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            (_H3, torch.zeros(5, 6), _Y),
            {},
            ValueError,
            "weight must have shape (V, H) with V >= 1 and H = 4 (the last dimension of "
            "hidden_states), got (5, 6)",
        ),
        (
            (_H3, torch.zeros(0, 4), torch.full((2, 3), -100)),
            {},
            ValueError,
            "weight must have shape (V, H) with V >= 1 and H = 4 (the last dimension of "
            "hidden_states), got (0, 4)",
        ),
        (
            (_H3, _W, torch.full((2, 3), 7)),
            {},
            ValueError,
            "labels must hold ids in [0, 5) or -100 (ignored); found 7",
        ),
        (
            (_H3, _W, torch.zeros(2, 2, dtype=torch.long)),
            {},
            ValueError,
            "labels must have shape (2, 3) to match hidden_states (2, 3, 4), got (2, 2)",
        ),
        (
            (_H3, _W, _Y),
            {"bias": torch.zeros(5, dtype=torch.long)},
            TypeError,
            "bias must be a floating-point tensor, got dtype torch.int64",
        ),
        (
            (_H3, _W.double(), _Y),
            {},
            TypeError,
            "weight dtype torch.float64 must equal hidden_states dtype torch.float32",
        ),
        (
            (_H3, _W, _Y),
            {"bias": torch.zeros(5, dtype=torch.float64)},
            TypeError,
            "bias dtype torch.float64 must equal hidden_states dtype torch.float32",
        ),
        ((_H3, _W, _Y), {"chunk_size": 0}, ValueError, "chunk_size must be >= 1, got 0"),
    ],
)
def test_linear_cross_entropy_names_each_argument(args, kwargs, error, message):
    raises_exactly(error, message, lambda: linear_cross_entropy(*args, **kwargs))


@pytest.mark.parametrize(
    ("on_meta", "message"),
    [
        ("weight", "weight is on meta but hidden_states is on cpu"),
        ("bias", "bias is on meta but hidden_states is on cpu"),
        ("hidden_states", "labels is on cpu but hidden_states is on meta"),
    ],
)
def test_a_tensor_on_another_device_is_named(on_meta, message):
    """The ``meta`` device stands in for a GPU: each tensor must be on hidden_states' device."""
    tensors = {"hidden_states": _H3, "weight": _W, "bias": torch.zeros(5)}
    tensors[on_meta] = tensors[on_meta].to("meta")
    if on_meta == "hidden_states":
        tensors["weight"] = _W.to("meta")
        tensors["bias"] = tensors["bias"].to("meta")
    h, w, b = tensors["hidden_states"], tensors["weight"], tensors["bias"]
    raises_exactly(ValueError, message, lambda: linear_cross_entropy(h, w, _Y, bias=b))


# ------------------------------------------------------------------------------ masking_variants


def test_the_defaults_are_google_and_spanbert_values_spelled_out():
    """0.15 and 20 (Google BERT), p = 0.2 and 10 words (SpanBERT): a default call equals the call
    with those values written out, seed for seed, on rows long enough to reach the cap of 20."""
    special = _no(6, 200)
    special[:, 0] = special[:, -1] = True
    cont = torch.rand(6, 200, generator=gen(9)) < 0.3
    ids = _ids(6, 200)
    google: dict[str, Any] = dict(mlm_probability=0.15, max_predictions_per_seq=20)
    span: dict[str, Any] = dict(mlm_probability=0.15, geometric_p=0.2, max_span_length=10)
    replace: dict[str, Any] = dict(mask_token_id=MASK, vocab_size=VOCAB)
    pairs = [
        (lambda **kw: (select_exact_count(special, generator=gen(3), **kw),), google),
        (lambda **kw: (select_whole_words(special, cont, generator=gen(3), **kw),), google),
        (lambda **kw: (select_spans(special, cont, generator=gen(3), **kw),), span),
        (lambda **kw: mask_tokens_exact_count(ids, generator=gen(3), **replace, **kw), google),
        (
            lambda **kw: mask_whole_words(
                ids, is_continuation=cont, generator=gen(3), **replace, **kw
            ),
            google,
        ),
        (
            lambda **kw: mask_spans(ids, is_continuation=cont, generator=gen(3), **replace, **kw),
            span,
        ),
    ]
    for call, spelled in pairs:
        for a, b in zip(call(), call(**spelled), strict=True):
            assert torch.equal(a, b)
    assert torch.equal(span_length_pmf(), span_length_pmf(0.2, 10))
    assert [num_to_predict(n) for n in (7, 40, 128, 200)] == [1, 6, 19, 20]


@pytest.mark.parametrize(("cap", "per_row"), [(3, 3), (None, 30), (0, 0)])
def test_max_predictions_per_seq_is_passed_on(cap, per_row):
    """200 one-piece words per row, 15%: 30 targets, or the cap."""
    ids, cont = _ids(2, 200), _no(2, 200)
    kw = dict(max_predictions_per_seq=cap, generator=gen(0))
    rows = [
        select_exact_count(cont, **kw),
        select_whole_words(cont, cont, **kw),
        mask_tokens_exact_count(ids, mask_token_id=MASK, vocab_size=VOCAB, **kw)[1] != -100,
        mask_whole_words(ids, is_continuation=cont, mask_token_id=MASK, vocab_size=VOCAB, **kw)[1]
        != -100,
    ]
    for selected in rows:
        assert selected.sum(1).tolist() == [per_row, per_row]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: num_to_predict(-1), "seq_length must be >= 0, got -1"),
        (lambda: num_to_predict(10, 1.5), "mlm_probability must be in [0, 1], got 1.5"),
        (lambda: num_to_predict(10, 0.15, -1), "max_predictions_per_seq must be >= 0, got -1"),
        (
            lambda: select_whole_words(_no(1, 4), _no(1, 4), max_predictions_per_seq=-1),
            "max_predictions_per_seq must be >= 0, got -1",
        ),
        (
            lambda: select_spans(_no(1, 4), _no(1, 4), mlm_probability=2),
            "mlm_probability must be in [0, 1], got 2.0",
        ),
        (
            lambda: span_length_pmf(1.5),
            "geometric_p must be in [0, 1], got 1.5",
        ),
        (lambda: span_length_pmf(0.0), "geometric_p must be in (0, 1] (SpanBERT: 0.2), got 0"),
        (lambda: span_length_pmf(0.2, 0), "max_span_length must be >= 1, got 0"),
        (lambda: sample_span_lengths(-1), "n must be >= 0, got -1"),
    ],
)
def test_counts_and_span_arguments_are_named(call, message):
    raises_exactly(ValueError, message, call)


def test_a_cap_of_0_and_one_word_spans_are_accepted():
    assert num_to_predict(10, 0.5, 0) == 0
    assert span_length_pmf(0.2, 1).tolist() == [1.0]
    assert sample_span_lengths(5, max_span_length=1).tolist() == [1] * 5


def test_sample_span_lengths_of_none_is_an_empty_long_tensor():
    out = sample_span_lengths(0)
    assert out.shape == (0,) and out.dtype == torch.long


def test_sample_span_lengths_keep_the_max_span_length():
    out = sample_span_lengths(200, geometric_p=0.01, max_span_length=2, generator=gen(0))
    assert set(out.tolist()) == {1, 2}


_1X1X2 = torch.zeros(1, 1, 2, dtype=torch.bool)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: select_exact_count([0, 1]),  # type: ignore[arg-type]
            TypeError,
            "special_tokens_mask must be a torch.Tensor of 0/1 or bool, got list",
        ),
        (
            lambda: select_exact_count(torch.zeros(3)),
            TypeError,
            "special_tokens_mask must hold bool or 0/1 integers, got dtype torch.float32",
        ),
        (
            lambda: select_exact_count(_1X1X2),
            ValueError,
            "special_tokens_mask must have shape (B, T) or (T,), got (1, 1, 2)",
        ),
        (
            lambda: select_exact_count(_no(1, 4), attention_mask=torch.ones(1, 3)),
            TypeError,
            "attention_mask must hold bool or 0/1 integers, got dtype torch.float32",
        ),
        (
            lambda: select_exact_count(_no(1, 4), attention_mask=_no(1, 3)),
            ValueError,
            "attention_mask must have shape (1, 4) (that of input_ids), got (1, 3)",
        ),
        (
            lambda: select_whole_words([0, 1], _no(1, 2)),  # type: ignore[arg-type]
            TypeError,
            "special_tokens_mask must be a torch.Tensor of 0/1 or bool, got list",
        ),
        (
            lambda: select_whole_words(_1X1X2, _1X1X2),
            ValueError,
            "special_tokens_mask must have shape (B, T) or (T,), got (1, 1, 2)",
        ),
        (
            lambda: select_spans(_no(1, 4), _no(1, 3)),
            ValueError,
            "is_continuation must have shape (1, 4) (that of input_ids), got (1, 3)",
        ),
        (
            lambda: select_spans(_no(1, 4), _no(1, 4), attention_mask=_no(1, 3)),
            ValueError,
            "attention_mask must have shape (1, 4) (that of input_ids), got (1, 3)",
        ),
        (
            lambda: word_ids([True]),  # type: ignore[arg-type]
            TypeError,
            "is_continuation must be a torch.Tensor of 0/1 or bool, got list",
        ),
        (
            lambda: word_ids(torch.zeros(3)),
            TypeError,
            "is_continuation must hold bool or 0/1 integers, got dtype torch.float32",
        ),
        (
            lambda: word_ids(_1X1X2),
            ValueError,
            "is_continuation must have shape (B, T) or (T,), got (1, 1, 2)",
        ),
        (
            lambda: word_ids(_no(1, 2), _no(2, 2)),
            ValueError,
            "special_tokens_mask must have shape (1, 2) (that of input_ids), got (2, 2)",
        ),
        (
            lambda: word_ids(torch.tensor([0, 2])),
            ValueError,
            "is_continuation must hold only 0 and 1",
        ),
    ],
)
def test_the_masks_are_named(call, error, message):
    raises_exactly(error, message, call)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            dict(input_ids=[[5, 6]]),
            TypeError,
            "input_ids must be a torch.Tensor of token ids, got list",
        ),
        (
            dict(input_ids=torch.ones(1, 1, 2, dtype=torch.long) * 5),
            ValueError,
            "input_ids must have shape (B, T) or (T,), got (1, 1, 2)",
        ),
        (
            dict(special_tokens_mask="no"),
            TypeError,
            "special_tokens_mask must be a torch.Tensor of 0/1 or bool, got str",
        ),
        (
            dict(special_tokens_mask=_no(2, 2)),
            ValueError,
            "special_tokens_mask must have shape (1, 2) (that of input_ids), got (2, 2)",
        ),
        (
            dict(mlm_probability="0.15"),
            TypeError,
            "mlm_probability must be a float in [0, 1], got str",
        ),
    ],
)
@pytest.mark.parametrize("fn", [mask_tokens_exact_count, mask_whole_words, mask_spans])
def test_the_one_call_versions_name_each_argument(fn, kwargs, error, message):
    args = dict(input_ids=torch.tensor([[5, 6]]), mask_token_id=MASK, vocab_size=VOCAB)
    if fn is not mask_tokens_exact_count:
        args["is_continuation"] = _no(1, 2)
    args.update(kwargs)
    ids = args.pop("input_ids")
    raises_exactly(error, message, lambda: fn(ids, **args))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: replace_selected(
                [5, 6],  # type: ignore[arg-type]
                _no(1, 2),
                mask_token_id=MASK,
                vocab_size=VOCAB,
            ),
            TypeError,
            "input_ids must be a torch.Tensor of token ids, got list",
        ),
        (
            lambda: replace_selected(
                _ids(2, 6), _no(2, 5), mask_token_id=MASK, vocab_size=VOCAB, per_span=True
            ),
            ValueError,
            "selected must have shape (2, 6) (that of input_ids), got (2, 5)",
        ),
        (
            lambda: replace_selected(
                _ids(2, 6),
                _no(2, 6),
                mask_token_id=MASK,
                vocab_size=VOCAB,
                per_span=1,  # type: ignore[arg-type]
            ),
            TypeError,
            "per_span must be a bool, got int",
        ),
        (
            lambda: replace_selected(
                torch.ones(1, 1, 2, dtype=torch.long) * 5,
                _1X1X2,
                mask_token_id=MASK,
                vocab_size=VOCAB,
                per_span=True,
            ),
            ValueError,
            "input_ids must have shape (B, T) or (T,), got (1, 1, 2)",
        ),
    ],
)
def test_replace_selected_names_each_argument(call, error, message):
    raises_exactly(error, message, call)


class _Pieces:
    """A tokenizer whose token for id ``i`` is ``"##i"`` for odd ``i`` and ``"i"`` otherwise."""

    def convert_ids_to_tokens(self, ids):
        return [f"##{i}" if i % 2 else str(i) for i in ids]


def test_wordpiece_continuation_mask_names_its_arguments():
    raises_exactly(
        TypeError,
        "input_ids must hold integer ids (torch.long), got dtype torch.float32",
        lambda: wordpiece_continuation_mask(torch.zeros(3), _Pieces()),
    )
    raises_exactly(
        TypeError,
        "tokenizer must have convert_ids_to_tokens (a transformers tokenizer)",
        lambda: wordpiece_continuation_mask(torch.zeros(3, dtype=torch.long), object()),
    )
    raises_exactly(
        ValueError,
        "input_ids must have shape (B, T) or (T,), got (1, 1, 2)",
        lambda: wordpiece_continuation_mask(torch.zeros(1, 1, 2, dtype=torch.long), _Pieces()),
    )


@pytest.mark.parametrize("shape", [(0,), (0, 5), (2, 0), (3,)])
def test_wordpiece_continuation_mask_is_bool_of_the_input_shape(shape):
    ids = torch.arange(int(torch.tensor(shape).prod())).reshape(shape)
    out = wordpiece_continuation_mask(ids, _Pieces())
    assert out.dtype == torch.bool and out.shape == shape
    assert out.tolist() == (ids % 2 == 1).tolist()


def test_word_ids_without_special_tokens_mask():
    cont = torch.tensor([False, True, False, True, True])
    assert word_ids(cont).tolist() == [0, 0, 1, 1, 1]


def test_a_0_1_integer_mask_means_what_the_bool_mask_means():
    special = torch.tensor([[1, 0, 0, 0, 0, 1]])
    as_bool = special.bool()
    cont = torch.tensor([[0, 0, 1, 0, 1, 0]])
    assert torch.equal(word_ids(cont, special), word_ids(cont.bool(), as_bool))
    for select in (select_exact_count, lambda s, **kw: select_whole_words(s, cont, **kw)):
        ints, bools = select(special, generator=gen(0)), select(as_bool, generator=gen(0))
        assert torch.equal(ints, bools)


_SELECTORS = {
    "exact_count": lambda s, a, **kw: select_exact_count(s, attention_mask=a, **kw),
    "whole_words": lambda s, a, **kw: select_whole_words(
        s, torch.zeros_like(s, dtype=torch.bool), attention_mask=a, **kw
    ),
    "spans": lambda s, a, **kw: select_spans(
        s, torch.zeros_like(s, dtype=torch.bool), attention_mask=a, **kw
    ),
}


@pytest.mark.parametrize("name", sorted(_SELECTORS))
def test_padding_is_never_selected_even_if_not_marked_special(name):
    """``attention_mask`` 0 is padding: with ``mlm_probability=1`` exactly the real tokens."""
    attention = torch.tensor([[1] * 4 + [0] * 8, [1] * 7 + [0] * 5])
    for seed in range(5):
        selected = _SELECTORS[name](_no(2, 12), attention, mlm_probability=1.0, generator=gen(seed))
        assert torch.equal(selected, attention.bool())


@pytest.mark.parametrize("name", sorted(_SELECTORS))
def test_a_row_with_nothing_to_select_leaves_the_next_rows_alone(name):
    special = _no(3, 10)
    special[1] = True  # row 1: all special, nothing to select
    attention = torch.ones(3, 10, dtype=torch.long)
    attention[0] = 0  # row 0: all padding
    selected = _SELECTORS[name](special, attention, mlm_probability=0.5, generator=gen(0))
    assert selected.sum(1).tolist() == [0, 0, 5]


@pytest.mark.parametrize("name", sorted(_SELECTORS))
def test_a_1d_input_gives_the_first_row_of_the_2d_result(name):
    special = torch.tensor([True] + [False] * 10 + [True])
    one = _SELECTORS[name](special, None, mlm_probability=0.5, generator=gen(4))
    two = _SELECTORS[name](special[None], None, mlm_probability=0.5, generator=gen(4))
    assert one.shape == (12,) and torch.equal(one, two[0])


def test_a_word_that_would_overshoot_the_count_is_skipped_not_the_rest():
    """Google: "If adding a whole-word mask would exceed the maximum number of predictions, then
    just skip this candidate": a 3-piece word and three 1-piece words, count 2 -> always 2."""
    cont = torch.tensor([[False, True, True, False, False, False]])
    special = _no(1, 6)
    for seed in range(20):
        selected = select_whole_words(
            special, cont, mlm_probability=0.4, max_predictions_per_seq=2, generator=gen(seed)
        )
        assert int(selected.sum()) == 2 and not selected[0, :3].any()


def test_one_word_spans_select_a_uniform_subset():
    """``geometric_p=1`` or ``max_span_length=1``: each span is one word, so 2 of 10 one-piece
    words are a uniform pair, adjacent with probability 9/45 (long spans: about 3/4)."""
    special, rows = _no(200, 10), 200
    ids = _ids(rows, 10)
    calls = [
        lambda: select_spans(
            special, special, mlm_probability=0.2, geometric_p=1.0, generator=gen(0)
        ),
        lambda: select_spans(
            special, special, mlm_probability=0.2, max_span_length=1, generator=gen(1)
        ),
        lambda: (
            mask_spans(
                ids,
                is_continuation=special,
                mask_token_id=MASK,
                vocab_size=VOCAB,
                mlm_probability=0.2,
                max_span_length=1,
                generator=gen(2),
            )[1]
            != -100
        ),
    ]
    for call in calls:
        selected = call()
        assert (selected.sum(1) == 2).all()
        adjacent = int((selected[:, 1:] & selected[:, :-1]).any(1).sum())
        assert binomial_ok(adjacent, rows, 9 / 45)


def test_a_span_starts_at_a_word_token_never_at_padding():
    """Two words then ten [PAD]: count 1, so one word, each half the time."""
    special = _no(200, 12)
    special[:, 2:] = True
    selected = select_spans(special, _no(200, 12), mlm_probability=0.5, generator=gen(0))
    assert (selected.sum(1) == 1).all()
    assert binomial_ok(int(selected[:, 0].sum()), 200, 0.5)


def test_a_span_stops_at_sep():
    """``[CLS] a [SEP] b c [SEP]``, count 2: a and b are both taken only if the first span starts
    at a (then the second takes b or c) or is one word at b followed by a: 1/6 + pmf[0] / 6."""
    special = torch.tensor([[True, False, True, False, False, True]]).repeat(600, 1)
    selected = select_spans(special, _no(600, 6), mlm_probability=0.5, generator=gen(0))
    assert (selected.sum(1) == 2).all()
    both = int((selected[:, 1] & selected[:, 3]).sum())
    assert binomial_ok(both, 600, 1 / 6 + float(span_length_pmf()[0]) / 6)


@pytest.mark.parametrize("per_span", [False, True])
@pytest.mark.parametrize(
    ("mask_replace_prob", "random_replace_prob", "becomes_mask"),
    [(1.0, 0.0, True), (0.0, 0.0, False)],
)
def test_the_shares_are_passed_on_and_every_selected_position_is_a_target(
    per_span, mask_replace_prob, random_replace_prob, becomes_mask
):
    ids = _ids(4, 12)
    sel = torch.rand(4, 12, generator=gen(1)) < 0.5
    sel[0] = False
    sel[1, 3] = True
    sel[1, 4:] = False  # row 1: one span, or several
    masked, labels = replace_selected(
        ids,
        sel,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
        per_span=per_span,
        generator=gen(0),
    )
    assert torch.equal(labels, torch.where(sel, ids, -100))
    assert torch.equal(masked, torch.where(sel, MASK, ids) if becomes_mask else ids)


def test_one_span_alone_is_replaced():
    ids = _ids(1, 8)
    sel = torch.tensor([[False, False, True, True, True, False, False, False]])
    masked, _ = replace_selected(
        ids,
        sel,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_replace_prob=1.0,
        random_replace_prob=0.0,
        per_span=True,
    )
    assert torch.equal(masked, torch.where(sel, MASK, ids))


@pytest.mark.parametrize("per_span", [False, True])
def test_nothing_selected_gives_the_input_back_and_no_target(per_span):
    ids = _ids(2, 5)
    masked, labels = replace_selected(
        ids, _no(2, 5), mask_token_id=MASK, vocab_size=VOCAB, per_span=per_span
    )
    assert torch.equal(masked, ids) and (labels == -100).all()


@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_an_empty_batch_gives_empty_outputs(shape):
    ids = torch.zeros(shape, dtype=torch.long)
    masked, labels = replace_selected(
        ids,
        torch.zeros(shape, dtype=torch.bool),
        mask_token_id=MASK,
        vocab_size=VOCAB,
        per_span=True,
    )
    assert masked.shape == labels.shape == shape


def test_per_span_random_replacements_keep_the_dtype_of_the_input():
    ids = _ids(2, 6).int()
    sel = torch.tensor([[False, True, True, False, True, False]] * 2)
    masked, labels = replace_selected(
        ids,
        sel,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mask_replace_prob=0.0,
        random_replace_prob=1.0,
        per_span=True,
        generator=gen(0),
    )
    assert masked.dtype == labels.dtype == torch.int32
    assert torch.equal(masked[~sel], ids[~sel]) and ((masked >= 0) & (masked < VOCAB)).all()


def test_a_1d_input_gives_1d_outputs_per_span():
    ids = _ids(1, 8)
    sel = torch.tensor([[False, True, True, False, True, True, True, False]])
    kw: dict[str, Any] = dict(mask_token_id=MASK, vocab_size=VOCAB, per_span=True)
    one = replace_selected(ids[0], sel[0], generator=gen(3), **kw)
    two = replace_selected(ids, sel, generator=gen(3), **kw)
    for a, b in zip(one, two):
        assert a.shape == (8,) and torch.equal(a, b[0])


def _mixed_runs(masked: torch.Tensor, labels: torch.Tensor) -> int:
    """How many maximal runs of targets are part [MASK], part not."""
    mixed = 0
    for row_m, row_l in zip(masked.tolist(), labels.tolist()):
        run: list[bool] = []
        for m, lab in [*zip(row_m, row_l), (0, -100)]:
            if lab != -100:
                run.append(m == MASK)
            elif run:
                mixed += len(set(run)) == 2
                run = []
    return mixed


@pytest.mark.parametrize(
    ("fn", "per_span"),
    [(mask_tokens_exact_count, False), (mask_whole_words, False), (mask_spans, True)],
)
def test_replacement_is_drawn_per_span_only_for_spans(fn, per_span):
    """SpanBERT draws 80/10/10 once per span; Google BERT once per token (and per piece)."""
    ids = _ids(40, 24)
    cont = torch.rand(40, 24, generator=gen(5)) < 0.5
    kw: dict[str, object] = {"max_predictions_per_seq": None}
    if fn is not mask_tokens_exact_count:
        kw = {"is_continuation": cont} if fn is mask_spans else {**kw, "is_continuation": cont}
    masked, labels = fn(
        ids,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        mlm_probability=0.5,
        mask_replace_prob=0.5,
        random_replace_prob=0.0,
        generator=gen(0),
        **kw,
    )
    assert (_mixed_runs(masked, labels) == 0) == per_span


@pytest.mark.parametrize("select", [select_whole_words, select_spans])
def test_rows_without_tokens_select_nothing(select):
    """A batch of empty rows, ``(B, 0)``, selects nothing (it raised in select_whole_words)."""
    empty = torch.zeros(2, 0, dtype=torch.bool)
    selected = select(empty, empty, generator=gen(0))
    assert selected.shape == (2, 0) and selected.dtype == torch.bool
