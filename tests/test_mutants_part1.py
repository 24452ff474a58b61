"""Tests that pin what mutation testing of Part I's core found unpinned.

``mutmut`` on ``lmlessons.pairs`` left mutants alive that move where a chunk of sentences closes
(one token early or late, one sentence before the document's end), put back a sentence that was
used, stop borrowing a sentence for a one-sentence chunk, draw NotNext's B from fewer documents
or always from a document's start, give B one token too many (so the pair must be truncated),
trim the wrong side of a tie, or change a bound or the text of an error message. Documents of
one-token sentences, whose ids tell their document and position, make the right answer plain:
the chunks are consecutive blocks of ``max_length - 3`` tokens, and NotNext's A's tile their
document.

On ``lmlessons.collator`` they change the stream a DataLoader worker draws from (its seed
``seed + worker id`` modulo 2**64, kept from batch to batch, made anew after pickling), the
truncation of strings to ``max_length``, the tokenizer attributes required, a bound, or an
error message. The worker is simulated in this process (``get_worker_info`` patched): the tests
that start real workers cannot run under mutmut, and these take milliseconds.

On ``lmlessons.causality`` they accept no one-token mask, or drop the ``attention_mask`` that
``logit_change`` must pass to the model (checked on a tiny bidirectional BERT, where a masked-out
token reaches no other position). Tiny inputs; one tiny model.
"""

from __future__ import annotations

import itertools
import pickle
from types import SimpleNamespace

import pytest
import torch
from _exact import gen
from _pair_data import IDS, split_rows
from _tiny import VOCAB, bert_config, seeded
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertLMHeadModel

from lmlessons import collator as collator_module
from lmlessons.causality import causal_mask, logit_change
from lmlessons.collator import MLMCollator
from lmlessons.pairs import make_nsp_pairs, make_sop_pairs, truncate_seq_pair


def _one_token_docs(lengths: list[int]) -> list[list[list[int]]]:
    """Documents of one-token sentences: document ``d``'s ``k``-th token is ``1000 (d + 1) + k``."""
    return [[[1000 * (d + 1) + k] for k in range(n)] for d, n in enumerate(lengths)]


def _doc_pos(token: int) -> tuple[int, int]:
    return token // 1000 - 1, token % 1000


def _run(tokens: list[int]) -> tuple[int, int, int]:
    """``(document, start, end)`` of tokens that must be consecutive ids of one document."""
    doc, start = _doc_pos(tokens[0])
    assert tokens == list(range(tokens[0], tokens[0] + len(tokens)))
    return doc, start, start + len(tokens)


def _blocks(n: int, m: int) -> list[list[int]]:
    """Google's chunks of one document of ``n`` one-token sentences with target ``m`` tokens:
    consecutive blocks of ``m``; a last block of one sentence gives no pair."""
    doc = [1000 + k for k in range(n)]
    return [doc[k : k + m] for k in range(0, n, m) if len(doc[k : k + m]) >= 2]


_BUILDERS = {
    "sop": lambda docs, **kw: make_sop_pairs(docs, swap_probability=0.0, **kw),
    "nsp": lambda docs, **kw: make_nsp_pairs(docs, nsp_probability=0.0, **kw),
}


@pytest.mark.parametrize("builder", sorted(_BUILDERS))
@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 30), max_length=st.integers(5, 11), seed=st.integers(0, 2**16))
def test_in_order_pairs_are_consecutive_blocks_of_max_length_minus_3(builder, n, max_length, seed):
    out = _BUILDERS[builder](
        _one_token_docs([n]), **IDS, max_length=max_length, short_seq_prob=0.0, generator=gen(seed)
    )
    pairs = sorted(split_rows(out))
    assert all(a and b for a, b in pairs)
    assert [a + b for a, b in pairs] == _blocks(n, max_length - 3)
    label_key = "sentence_order_label" if builder == "sop" else "next_sentence_label"
    assert out[label_key].eq(0).all()


@pytest.mark.parametrize("n", [2, 5, 6])
def test_a_one_sentence_chunk_borrows_the_next_sentence(n):
    # every sentence is longer than max_length - 3 = 4 tokens: each chunk closes at one sentence
    docs = [[[100 * (k + 1) + t for t in range(6)] for k in range(n)]]
    out = make_sop_pairs(
        docs, **IDS, max_length=7, swap_probability=0.0, short_seq_prob=0.0, generator=gen(0)
    )
    pairs = sorted(split_rows(out))
    assert len(pairs) == n // 2  # sentences 2k and 2k + 1; a lone last one gives nothing
    for k, (a, b) in enumerate(pairs):
        assert len(a) + len(b) == 4 and a and b
        assert set(a) <= set(docs[0][2 * k]) and set(b) <= set(docs[0][2 * k + 1])


@pytest.mark.parametrize("n_docs", [2, 3])
def test_notnext_b_comes_from_any_other_document_and_any_sentence(n_docs):
    m = 6  # max_length - 3
    n = 25
    out = make_nsp_pairs(
        _one_token_docs([n] * n_docs),
        **IDS,
        max_length=m + 3,
        nsp_probability=1.0,
        short_seq_prob=0.0,
        generator=gen(0),
    )
    assert out["next_sentence_label"].eq(1).all()
    a_runs: dict[int, list[tuple[int, int]]] = {d: [] for d in range(n_docs)}
    b_docs: dict[int, set[int]] = {d: set() for d in range(n_docs)}
    b_starts = set()
    for a, b in split_rows(out):
        doc_a, a_start, a_end = _run(a)
        doc_b, b_start, b_end = _run(b)
        assert doc_b != doc_a
        # B: from its first sentence until max_length - 3 tokens in all, or its document's end
        assert b_end - b_start == min(m - len(a), n - b_start)
        a_runs[doc_a].append((a_start, a_end))
        b_docs[doc_a].add(doc_b)
        b_starts.add(b_start)
    for d in range(n_docs):
        # NotNext puts B's sentences back: the A's tile the document, up to its lone last token
        runs = sorted(a_runs[d])
        assert runs[0][0] == 0 and runs[-1][1] == n - 1
        assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(runs))
        assert b_docs[d] == set(range(n_docs)) - {d}
    assert len(b_starts) > 1  # not always a document's first sentence


@pytest.mark.parametrize("make_pairs", [make_nsp_pairs, make_sop_pairs])
def test_max_length_5_with_only_short_targets(make_pairs):
    # the shortest max_length, and a random target length drawn in [2, max_length - 3] = [2, 2]
    out = make_pairs(
        _one_token_docs([9, 7]), **IDS, max_length=5, short_seq_prob=1.0, generator=gen(1)
    )
    assert out["input_ids"].shape[1] == 5
    assert all(len(a) == 1 and len(b) == 1 for a, b in split_rows(out))


@pytest.mark.parametrize("seed", range(4))
def test_truncate_seq_pair_trims_b_on_a_tie(seed):
    # Google: ``trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b``
    a, b = truncate_seq_pair([1, 2], [3, 4], 3, generator=gen(seed))
    assert a == [1, 2] and b in ([3], [4])


def _message(exc_type, fn, *args, **kwargs) -> str:
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_truncate_seq_pair_bad_max_num_tokens():
    assert _message(ValueError, truncate_seq_pair, [1], [2], 1) == (
        "max_num_tokens must be >= 2, got 1"
    )
    assert _message(TypeError, truncate_seq_pair, [1], [2], "3") == (
        "max_num_tokens must be an int, got str"
    )


@pytest.mark.parametrize(
    ("make_pairs", "kwargs", "exc_type", "message"),
    [
        (make_nsp_pairs, {"max_length": "9"}, TypeError, "max_length must be an int, got str"),
        (
            make_sop_pairs,
            {"max_length": 4},
            ValueError,
            "max_length must be >= 5 to fit [CLS] A [SEP] B [SEP] with one token each in A and B, "
            "got 4",
        ),
        (
            make_nsp_pairs,
            {"nsp_probability": 1.5},
            ValueError,
            "nsp_probability must be in [0, 1], got 1.5",
        ),
        (
            make_sop_pairs,
            {"swap_probability": 2.0},
            ValueError,
            "swap_probability must be in [0, 1], got 2.0",
        ),
        (
            make_nsp_pairs,
            {"short_seq_prob": -0.5},
            ValueError,
            "short_seq_prob must be in [0, 1], got -0.5",
        ),
        (
            make_sop_pairs,
            {"short_seq_prob": -0.5},
            ValueError,
            "short_seq_prob must be in [0, 1], got -0.5",
        ),
    ],
)
def test_bad_argument_messages(make_pairs, kwargs, exc_type, message):
    base = {"max_length": 9, **kwargs}
    assert _message(exc_type, make_pairs, _one_token_docs([4, 4]), **IDS, **base) == message


def test_one_document_messages():
    one = _one_token_docs([4])
    assert make_nsp_pairs(one, **IDS, max_length=9, nsp_probability=0.0)["input_ids"].shape[0] > 0
    assert _message(ValueError, make_nsp_pairs, one, **IDS, max_length=9) == (
        "documents must hold at least 2 documents to draw NotNext examples from another document"
    )
    assert _message(ValueError, make_sop_pairs, _one_token_docs([1]), **IDS, max_length=9) == (
        "documents produced no pairs: give documents with at least two sentences"
    )


# --- lmlessons.collator ---------------------------------------------------------------------

TEXTS = ["the cat sat on the mat", "a dog ran", "it rained all day and all night long"]


def _in_worker(monkeypatch, worker_id: int) -> None:
    """Make ``process_generator`` see DataLoader worker ``worker_id`` in this very process."""
    info = SimpleNamespace(id=worker_id)
    monkeypatch.setattr(collator_module, "get_worker_info", lambda: info)


def test_each_loader_process_draws_its_own_stream_seeded_seed_plus_id(tok, monkeypatch):
    collator = MLMCollator(tok, generator=gen(2**64 - 1))
    _in_worker(monkeypatch, 0)
    g0 = collator.process_generator()
    assert g0 is not None and collator.generator is not None
    assert g0 is not collator.generator and g0.initial_seed() == 2**64 - 1
    first = collator(TEXTS)["labels"]
    assert collator.process_generator() is g0  # the stream goes on from batch to batch
    assert not torch.equal(collator(TEXTS)["labels"], first)
    _in_worker(monkeypatch, 1)
    g1 = collator.process_generator()
    assert g1 is not None
    assert g1.initial_seed() == 0  # (2**64 - 1 + 1) mod 2**64
    assert g1.device == collator.generator.device
    assert collator.process_generator() is g1


def test_a_pickled_collator_starts_the_loader_stream_anew(tok, monkeypatch):
    _in_worker(monkeypatch, 0)
    collator = MLMCollator(tok, generator=gen(7))
    first = collator(TEXTS)["labels"]
    copy = pickle.loads(pickle.dumps(collator))  # what a spawned worker receives
    assert torch.equal(copy(TEXTS)["labels"], first)
    unseeded = pickle.loads(pickle.dumps(MLMCollator(tok)))
    assert unseeded.generator is None and unseeded.process_generator() is None


def test_a_seeded_collator_in_another_process_names_the_generator(tok, monkeypatch):
    other = SimpleNamespace(name="ForkPoolWorker-1")
    monkeypatch.setattr(collator_module.multiprocessing, "current_process", lambda: other)
    assert _message(ValueError, MLMCollator(tok, generator=gen(0)).process_generator) == (
        "generator: this process is neither the main process nor a DataLoader worker, so it "
        "cannot get its own random stream (every copy would draw the same masks); use a "
        "DataLoader with num_workers, or generator=None"
    )


def test_strings_are_truncated_to_max_length_only_when_given(tok):
    long_text = " ".join(["word"] * 100)
    n_tokens = len(tok(long_text)["input_ids"])
    assert n_tokens > tok.model_max_length  # without max_length nothing is cut, not even there
    assert MLMCollator(tok, max_length=2)([long_text])["input_ids"].shape == (1, 2)
    assert MLMCollator(tok)([long_text])["input_ids"].shape == (1, n_tokens)
    assert MLMCollator(tok, pad_to_multiple_of=1)(TEXTS)["input_ids"].shape[0] == 3


def test_a_tokenizer_needs_only_mask_pad_and_special_ids():
    tokenizer = SimpleNamespace(mask_token_id=4, pad_token_id=0, all_special_ids=[0, 4])
    assert MLMCollator(tokenizer).special_ids.tolist() == [0, 4]


@pytest.mark.parametrize(
    ("examples", "exc_type", "message"),
    [
        ([], ValueError, "examples must be a non-empty list"),
        (
            [{"input_ids": [5, 6], "labels": [5, 6]}],
            ValueError,
            "examples[0] holds 'labels': MLMCollator makes the MLM labels itself; drop that "
            "field or give it another name",
        ),
        (
            [{"input_ids": [5, 6], "x": 1}, {"input_ids": [5, 6]}],
            ValueError,
            "examples[1] has the fields ['input_ids'], examples[0] has ['input_ids', 'x']: "
            "every example needs the same fields",
        ),
        (
            [1.5, 2.5],
            TypeError,
            "examples must all be strings, all dicts with 'input_ids', or all lists of token ids",
        ),
    ],
)
def test_bad_examples_messages(tok, examples, exc_type, message):
    assert _message(exc_type, MLMCollator(tok), examples) == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mlm_probability": 1.5}, "mlm_probability must be in [0, 1], got 1.5"),
        ({"max_length": 1}, "max_length must be >= 2, got 1"),
        ({"pad_to_multiple_of": 0}, "pad_to_multiple_of must be >= 1, got 0"),
    ],
)
def test_bad_argument_messages_name_the_argument(tok, kwargs, message):
    assert _message(ValueError, MLMCollator, tok, **kwargs) == message


# --- lmlessons.causality --------------------------------------------------------------------


def test_causal_mask_of_one_token_and_its_message():
    assert causal_mask(1).tolist() == [[True]]
    assert _message(ValueError, causal_mask, 0) == "seq_len must be >= 1, got 0"


def test_logit_change_passes_the_attention_mask_to_the_model():
    # bidirectional BERT: a replaced token that is masked out reaches no other position
    model = seeded(BertLMHeadModel, bert_config(is_decoder=False), 0)
    ids = torch.randint(5, VOCAB, (1, 6), generator=gen(0))  # (1, T)
    position = 2
    other = 5 if int(ids[0, position]) != 5 else 6
    mask = torch.ones(6, dtype=torch.long)
    mask[position] = 0
    masked = logit_change(model, ids, position, other, attention_mask=mask)  # (T,)
    assert masked[position] > 1e-4  # its own logits move
    assert torch.cat([masked[:position], masked[position + 1 :]]).eq(0).all()
    assert (logit_change(model, ids, position, other) > 1e-4).all()  # without the mask: all move
