"""Tests that pin what mutation testing of the course layer's other modules found unpinned.

``mutmut`` on ``lmlessons.course.batches``, ``training``, ``models``, ``tokenizer``, ``corpus``,
``checkpoints`` and ``throughput`` left mutants alive that change a default (``min_frequency``,
``whole_word_frequency``, a tiny model's size), a bound of a check, the text of an error
message (the argument it names), which positions of a batch are -100, how whole words enter
a tokenizer's vocabulary, how a corpus is split and read, and what a checkpoint or a throughput
measurement records. Each test compares with a hand-written expectation, a plain computation
or the message the source's f-string writes, and fails on those mutants. Tiny inputs, tiny
models, no more than a few optimizer steps.
"""

from __future__ import annotations

import copy
import json
import re
import time
from itertools import islice
from types import SimpleNamespace

import pytest
import torch
from _exact import gen, raises_exactly, same_tensors

from lmlessons.course import corpus as corpus_module
from lmlessons.course.batches import (
    clm_batches,
    mlm_batches,
    nsp_batches,
    pack_sequences,
    row_batches,
    sop_batches,
    tokenize_documents,
)
from lmlessons.course.checkpoints import load_checkpoint, save_checkpoint, warm_start_curves
from lmlessons.course.corpus import load_corpus, split_sentences
from lmlessons.course.models import (
    tiny_bert_config,
    tiny_bert_lm_head,
    tiny_bert_mlm,
    tiny_bert_pretraining,
    tiny_gpt2,
    tiny_gpt2_config,
)
from lmlessons.course.throughput import packing_throughput, sentence_documents
from lmlessons.course.tokenizer import train_tokenizer
from lmlessons.course.training import History, evaluate, install_display, smoothed, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------------- tokenizer

_NO_MERGES = 10_000  # a min_frequency no pair reaches: the vocabulary is characters only


def _pieces(tok, text: str) -> list[str]:
    return tok.tokenize(text)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (
            123,
            TypeError,
            "documents_or_texts must be a Corpus, a str, a list of str or a list of documents "
            "(lists of str), got int",
        ),
        ([["fine", 3]], TypeError, "documents_or_texts[0][1] must be a str, got int"),
        ([5], TypeError, "documents_or_texts[0] must be a str or a list of str, got int"),
        ([b"x"], TypeError, "documents_or_texts[0] must be a str or a list of str, got bytes"),
        (["", "  "], ValueError, "documents_or_texts holds no text to train on"),
    ],
)
def test_train_tokenizer_names_the_bad_input(data, error, message):
    """Each bad input form is refused with a message naming where it is."""
    raises_exactly(error, message, lambda: train_tokenizer(data))


@pytest.mark.parametrize(
    ("whole_words", "error", "message"),
    [
        ("dog", TypeError, "whole_words must be a list of words, not one str"),
        (["dog", 7], TypeError, "whole_words must hold str, got int"),
    ],
)
def test_train_tokenizer_names_bad_whole_words(whole_words, error, message):
    """A str or a non-str entry as ``whole_words`` is refused, naming it."""
    raises_exactly(error, message, lambda: train_tokenizer(["a dog"], whole_words=whole_words))


def test_train_tokenizer_checks_whole_word_frequency():
    """``whole_word_frequency`` below 1 is refused, naming it (None turns it off)."""
    raises_exactly(
        ValueError,
        "whole_word_frequency must be >= 1, got 0",
        lambda: train_tokenizer(["a dog"], whole_word_frequency=0),
    )


@pytest.mark.parametrize(("kwargs", "pieces"), [({}, ["qz"]), ({"min_frequency": 3}, ["q", "##z"])])
def test_min_frequency_default_merges_a_pair_seen_twice(kwargs, pieces):
    """The default ``min_frequency=2`` merges a pair seen twice; 3 does not."""
    tok = train_tokenizer(["qz qz"], whole_word_frequency=None, **kwargs)
    assert tok.tokenize("qz") == pieces


def test_whole_word_frequency_default_is_five():
    """With no merges, a word seen 5 times is one token by default, one seen 4 times is not."""
    tok = train_tokenizer(["quokka " * 5 + "wombat " * 4], min_frequency=_NO_MERGES)
    assert tok.tokenize("quokka") == ["quokka"]
    assert tok.tokenize("wombat") == ["w", "##o", "##m", "##b", "##a", "##t"]


def _base_size(**kwargs) -> int:
    """The size of a character-only vocabulary (no merges, no whole words)."""
    return len(
        train_tokenizer(_WORDS, min_frequency=_NO_MERGES, whole_word_frequency=None, **kwargs)
    )


_WORDS = ["zeta " * 5 + "beta " * 4 + "alpha " * 4 + "gamma " * 3]


def test_frequent_words_are_added_most_frequent_first_then_alphabetically():
    """Room for two frequent words: the most frequent, then the first of a tie by spelling."""
    size = _base_size(lowercase=False) + 2
    tok = train_tokenizer(
        _WORDS, vocab_size=size, min_frequency=_NO_MERGES, whole_word_frequency=3, lowercase=False
    )
    whole = [w for w in ("zeta", "beta", "alpha", "gamma") if tok.tokenize(w) == [w]]
    assert (whole, len(tok)) == (["zeta", "alpha"], size)


def test_named_whole_words_come_before_frequent_ones_within_vocab_size():
    """A named word takes the only free place; frequent words get none."""
    size = _base_size(lowercase=False) + 1
    tok = train_tokenizer(
        _WORDS,
        vocab_size=size,
        min_frequency=_NO_MERGES,
        whole_word_frequency=3,
        whole_words=["quokka"],
        lowercase=False,
    )
    assert tok.tokenize("quokka zeta") == ["quokka", "z", "##e", "##t", "##a"]
    assert len(tok) == size


def test_a_named_word_that_does_not_fit_is_refused():
    """Characters are never dropped to make room: a full vocabulary refuses a named word."""
    size = _base_size(lowercase=False)
    raises_exactly(
        ValueError,
        f"vocab_size={size} is too small to add the whole_words ['quokka']",
        lambda: train_tokenizer(
            _WORDS,
            vocab_size=size,
            min_frequency=_NO_MERGES,
            whole_word_frequency=None,
            whole_words=["quokka"],
            lowercase=False,
        ),
    )


def test_a_named_word_is_added_without_dropping_a_merge_when_room_is_left():
    """A vocabulary short of ``vocab_size`` grows by exactly the missing named word."""
    plain = train_tokenizer(["the dog. the dog."], whole_word_frequency=None)
    named = train_tokenizer(
        ["the dog. the dog."], whole_word_frequency=None, whole_words=["quokka"]
    )
    assert len(named) == len(plain) + 1
    assert set(plain.get_vocab()) <= set(named.get_vocab())


def test_lowercase_false_keeps_every_printable_character():
    """Trained on lower-case text with ``lowercase=False``, an upper-case word is not [UNK]."""
    tok = train_tokenizer(["the dog"], lowercase=False)
    assert tok.tokenize("XY") == ["X", "##Y"]


def test_special_tokens_in_text_stay_whole(tok):
    """A special token written in the text is that one token, in the course tokenizer and in a
    new one."""
    new = train_tokenizer(["the dog chased the cat"])
    for t in (tok, new):
        plain = t("the dog", add_special_tokens=False)["input_ids"]
        ids = t("the [MASK] dog", add_special_tokens=False)["input_ids"]
        assert ids == [*plain[:1], t.mask_token_id, *plain[1:]]


def test_continuation_pieces_are_ordinary_tokens():
    """Decoding with ``skip_special_tokens=True`` keeps a word's "##" pieces."""
    tok = train_tokenizer(["the dog chased the cat"], whole_word_frequency=None)
    ids = tok("wombat")["input_ids"]
    assert len(ids) > 3
    assert tok.decode(ids, skip_special_tokens=True) == "wombat"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_frequency": 0}, "min_frequency must be >= 1, got 0"),
        ({"model_max_length": 1}, "model_max_length must be >= 2, got 1"),
    ],
)
def test_train_tokenizer_checks_its_sizes(kwargs, message):
    """A size below its minimum is refused, naming the argument."""
    raises_exactly(ValueError, message, lambda: train_tokenizer(["a dog"], **kwargs))


def test_train_tokenizer_accepts_the_smallest_sizes_and_keeps_model_max_length():
    """``min_frequency=1`` and ``model_max_length=2`` are allowed; the default length is 128."""
    assert train_tokenizer(["a dog"], min_frequency=1, model_max_length=2).model_max_length == 2
    assert train_tokenizer(["a dog"]).model_max_length == 128


def test_a_trained_tokenizer_writes_bert_pairs():
    """``[CLS] A [SEP]`` has type 0 and ``B [SEP]`` type 1, as for the course tokenizer."""
    tok = train_tokenizer(["a b"], whole_word_frequency=None)
    one = tok("a")
    pair = tok("a", "b")
    assert tok.convert_ids_to_tokens(one["input_ids"]) == ["[CLS]", "a", "[SEP]"]
    assert tok.convert_ids_to_tokens(pair["input_ids"]) == ["[CLS]", "a", "[SEP]", "b", "[SEP]"]
    assert pair["token_type_ids"] == [0, 0, 0, 1, 1]


def test_a_trained_tokenizer_normalizes_like_bert():
    """Unknown characters give [UNK], accents are stripped, control characters dropped."""
    tok = train_tokenizer(["the dog"], whole_word_frequency=None)
    assert tok("\u20ac", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]
    assert tok.tokenize("Caf\u00e9") == tok.tokenize("cafe")
    assert tok.tokenize("dog\x07") == tok.tokenize("dog")


def test_load_and_wrap_name_a_missing_file_and_missing_special_tokens(tmp_path):
    """A missing file is named; a tokenizer without BERT's special tokens is refused, naming
    those it lacks and all five (catches the check dropped and either message changed)."""
    from tokenizers import Tokenizer, models

    from lmlessons.course.tokenizer import load_tokenizer, wrap_tokenizer

    path = tmp_path / "none.json"
    raises_exactly(
        FileNotFoundError, f"no tokenizer file at {str(path)!r}", lambda: load_tokenizer(path)
    )
    bare = Tokenizer(models.WordLevel({"[UNK]": 0, "[CLS]": 1, "dog": 2}, unk_token="[UNK]"))
    raises_exactly(
        ValueError,
        "tokenizer lacks the special tokens ['[PAD]', '[SEP]', '[MASK]']; "
        "BERT needs ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']",
        lambda: wrap_tokenizer(bare),
    )


# ----------------------------------------------------------------------------------- batches


def _long_docs(n: int, sentences: int, words: int) -> list[list[str]]:
    """``n`` documents of ``sentences`` sentences of ``words`` times "dog" (one token each)."""
    return [[" ".join(["dog"] * words)] * sentences for _ in range(n)]


def test_pack_sequences_checks_max_length_and_allows_three():
    """``max_length`` below 3 is refused, naming it; 3 leaves room for one token a sequence."""
    raises_exactly(
        ValueError,
        "max_length must be >= 3, got 2",
        lambda: pack_sequences([], max_length=2, cls_token_id=1, sep_token_id=2),
    )
    packed = pack_sequences([[[7, 8]]], max_length=3, cls_token_id=1, sep_token_id=2)
    assert packed == [[1, 7, 2], [1, 8, 2]]


def test_row_batches_names_batch_size_and_drops_only_the_incomplete_batch():
    """``batch_size=0`` is refused; as many rows as ``batch_size`` make one batch; 5 rows
    of batch 2 make two batches with ``drop_last``."""
    raises_exactly(
        ValueError, "batch_size must be >= 1, got 0", lambda: next(row_batches([1], 0, None))
    )
    assert [sorted(b) for b in row_batches([1, 2], 2, gen(), epochs=1)] == [[1, 2]]
    assert [len(b) for b in row_batches(list(range(5)), 2, gen(), epochs=1)] == [2, 2]


@pytest.mark.parametrize("make", ["mlm", "clm"])
def test_packed_batches_default_to_16_rows_of_64_tokens(tok, make):
    """The documented defaults: 16 sequences of at most 64 tokens."""
    fn = {"mlm": mlm_batches, "clm": clm_batches}[make]
    batch = next(fn(_long_docs(1, 1, 62 * 20), tok, generator=gen()))
    assert batch["input_ids"].shape == (16, 64)


def test_nsp_and_sop_batch_defaults(tok):
    """NSP: 16 pairs of at most 64 tokens; SOP: 32 pairs of at most 128 tokens."""
    nsp = next(nsp_batches(_long_docs(40, 2, 100), tok, generator=gen()))
    token_docs = tokenize_documents(_long_docs(80, 2, 100), tok)
    sop = next(sop_batches(token_docs, tok, generator=gen()))
    assert nsp["input_ids"].shape == (16, 64)
    assert sop["input_ids"].shape == (32, 128)


@pytest.mark.parametrize("make", ["mlm", "nsp", "sop", "clm"])
def test_one_epoch_is_finite_and_a_seed_repeats_the_batches(tok, make):
    """``epochs=1`` ends; the same seed gives the same batches (masks and pairs included)."""
    docs = [["the dog chased the cat.", "the cat sat."], ["a ball.", "the dog ran."]] * 3

    def run(seed: int) -> list[dict]:
        g = gen(seed)
        if make == "sop":
            tokens = tokenize_documents(docs, tok)
            batches = sop_batches(tokens, tok, batch_size=2, epochs=1, generator=g)
        else:
            fn = {"mlm": mlm_batches, "nsp": nsp_batches, "clm": clm_batches}[make]
            batches = fn(docs, tok, batch_size=2, max_length=16, epochs=1, generator=g)
        return list(islice(batches, 50))  # an endless stream stops at 50

    first, again = run(3), run(3)
    assert 0 < len(first) < 10
    assert len(first) == len(again) and all(map(same_tensors, first, again))


@pytest.mark.parametrize("make", ["mlm", "nsp", "sop", "clm"])
def test_batches_refuse_a_generator_that_is_not_one(tok, make):
    """``generator`` must be a ``torch.Generator`` (or None), checked at the call."""
    docs = [["the dog.", "the cat."], ["a ball.", "a cat."]]
    args = (tokenize_documents(docs, tok) if make == "sop" else docs, tok)
    fn = {"mlm": mlm_batches, "nsp": nsp_batches, "sop": sop_batches, "clm": clm_batches}[make]
    raises_exactly(
        TypeError,
        "generator must be a torch.Generator or None, got int",
        lambda: fn(*args, generator=7),
    )


def test_pair_batches_trim_the_padding_all_rows_share(tok):
    """Each NSP batch is as wide as its longest pair: its last column holds a real token."""
    docs = [["the dog.", "the cat sat on the mat."], ["a ball.", "a cat."], ["the dog ran."] * 2]
    for batch in nsp_batches(docs, tok, batch_size=2, max_length=32, epochs=3, generator=gen()):
        assert batch["attention_mask"][:, -1].any()


def test_mlm_replace_probabilities_reach_the_masking(tok):
    """With every token selected and ``mask_replace_prob=1``, every real token is [MASK]."""
    docs = [["the dog chased the cat. " * 8]]  # 48 tokens: none left unmasked by chance
    batch = next(
        mlm_batches(
            docs,
            tok,
            batch_size=1,
            mlm_probability=1.0,
            mask_replace_prob=1.0,
            random_replace_prob=0.0,
            generator=gen(),
        )
    )
    ids = batch["input_ids"][0, 1:-1]  # (T - 2,) between [CLS] and [SEP]
    assert (ids == tok.mask_token_id).all()


@pytest.mark.parametrize(("p", "label"), [(0.0, 0), (1.0, 1)])
def test_nsp_and_sop_probabilities_reach_the_pairs(tok, p, label):
    """``nsp_probability`` / ``swap_probability`` 0 gives only label 0, 1 only label 1."""
    docs = [["the dog ran.", "the cat sat.", "a ball fell."], ["a cat.", "the dog.", "a ball."]]
    nsp = nsp_batches(docs, tok, batch_size=8, nsp_probability=p, epochs=1, generator=gen())
    sop = sop_batches(
        tokenize_documents(docs, tok),
        tok,
        batch_size=8,
        swap_probability=p,
        epochs=1,
        generator=gen(),
    )
    assert {int(v) for b in nsp for v in b["next_sentence_label"]} == {label}
    assert {int(v) for b in sop for v in b["sentence_order_label"]} == {label}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mlm_probability": 2}, ValueError, "mlm_probability must be in [0, 1], got 2.0"),
        ({"nsp_probability": 2}, ValueError, "nsp_probability must be in [0, 1], got 2.0"),
        ({"nsp_probability": "x"}, TypeError, "nsp_probability must be a float in [0, 1], got str"),
    ],
)
def test_nsp_batches_name_a_bad_probability(tok, kwargs, error, message):
    """A probability out of [0, 1] or not a number is refused, naming it."""
    docs = [["the dog.", "the cat."], ["a ball.", "a cat."]]
    raises_exactly(error, message, lambda: nsp_batches(docs, tok, **kwargs))


def test_nsp_needs_two_documents_and_two_are_enough(tok):
    """One document cannot give NotNext pairs; two can."""
    raises_exactly(
        ValueError,
        "NSP needs at least 2 documents (NotNext segments come from another document)",
        lambda: nsp_batches([["the dog.", "the cat."]], tok),
    )
    two = nsp_batches([["the dog.", "the cat."], ["a ball.", "a cat."]], tok, epochs=1)
    assert next(two)["input_ids"].shape[0] >= 1


def test_sop_batches_name_their_bad_arguments(tok):
    """``swap_probability``, ``token_documents`` and one-sentence documents are refused by name;
    a single two-sentence document is enough."""
    ids = tok("the dog", add_special_tokens=False)["input_ids"]
    raises_exactly(
        ValueError,
        "swap_probability must be in [0, 1], got 2.0",
        lambda: sop_batches([[ids, ids]], tok, swap_probability=2),
    )
    raises_exactly(ValueError, "token_documents must not be empty", lambda: sop_batches([], tok))
    raises_exactly(
        ValueError,
        "token_documents produced no pairs: give documents with at least two sentences",
        lambda: sop_batches([[ids]], tok),
    )
    assert next(sop_batches([[ids, ids]], tok, epochs=1))["input_ids"].shape[0] == 1


def test_tokenize_documents_names_documents_that_are_not_a_list_of_lists(tok):
    """A str, a non-list, an empty list and a list of texts are refused with the message that
    names each (catches ``and`` for ``or`` in the str test and the messages' text and type)."""
    whole = "documents must be a Corpus or a list of documents (lists of sentence strings), got "
    raises_exactly(TypeError, whole + "str", lambda: tokenize_documents("the dog.", tok))
    raises_exactly(TypeError, whole + "int", lambda: tokenize_documents(5, tok))
    raises_exactly(ValueError, "documents must not be empty", lambda: tokenize_documents([], tok))
    raises_exactly(
        TypeError,
        "documents[0] must be a list of sentence strings, got str (wrap a single text as [[text]])",
        lambda: tokenize_documents(["the dog."], tok),
    )


def test_tokenize_documents_names_a_non_str_sentence_and_text_without_tokens(tok):
    """A sentence that is not a str is named by its place and type; documents with no sentence
    or only empty ones are refused (catches the message's text and type, and the tokenizer
    called on no sentences at all)."""
    raises_exactly(
        TypeError,
        "documents[0][1] must be a str, got int",
        lambda: tokenize_documents([["the dog.", 3]], tok),
    )
    for empty in ([[]], [[""], [" "]]):
        raises_exactly(
            ValueError,
            "documents hold no text the tokenizer turns into tokens",
            lambda empty=empty: tokenize_documents(empty, tok),
        )


def test_tokenize_documents_drops_each_empty_sentence_in_place(tok):
    """An empty middle sentence is dropped and its neighbours kept (catches ``ids[k - j]``)."""
    ids = tok(["the dog.", "a cat."], add_special_tokens=False)["input_ids"]
    assert tokenize_documents([["the dog.", "", "a cat."]], tok) == [ids]


def test_packed_batches_name_their_bad_sizes_and_allow_five_tokens(tok):
    """``batch_size`` 0, ``max_length`` 4 and ``epochs`` 0 are refused by name (catches each
    name and bound changed); 5 tokens a row is enough."""
    docs = [["the dog chased the cat.", "the cat sat."]]
    raises_exactly(
        ValueError, "batch_size must be >= 1, got 0", lambda: mlm_batches(docs, tok, batch_size=0)
    )
    raises_exactly(
        ValueError, "max_length must be >= 5, got 4", lambda: mlm_batches(docs, tok, max_length=4)
    )
    raises_exactly(
        ValueError, "epochs must be >= 1, got 0", lambda: mlm_batches(docs, tok, epochs=0)
    )
    batch = next(clm_batches(docs, tok, batch_size=1, max_length=5, generator=gen()))
    assert batch["input_ids"].shape == (1, 5)  # (B, T)


# ------------------------------------------------------------------------------------ models


@pytest.fixture(scope="module")
def small_tok():
    """A tokenizer of about a hundred tokens, unlike the course one (2,500)."""
    return train_tokenizer(["the dog chased the cat"], whole_word_frequency=None)


_SMALL = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 16,
}


@pytest.mark.parametrize(
    ("make", "kwargs", "message"),
    [
        (
            tiny_bert_config,
            {"hidden_size": 30, "num_attention_heads": 4},
            "hidden_size (30) must be a multiple of num_attention_heads (4)",
        ),
        (
            tiny_gpt2_config,
            {"n_embd": 30, "n_head": 4},
            "n_embd (30) must be a multiple of n_head (4)",
        ),
    ],
)
def test_configs_name_a_size_heads_do_not_divide(tok, make, kwargs, message):
    """The width must split evenly over the heads; the message names both."""
    raises_exactly(ValueError, message, lambda: make(tok, **kwargs))


def test_configs_pass_overrides_and_positions_through(tok):
    """Extra keywords reach the transformers config; ``n_positions`` is the one given."""
    assert tiny_bert_config(tok, type_vocab_size=3).type_vocab_size == 3
    gpt2 = tiny_gpt2_config(tok, n_positions=32, n_inner=24)
    assert (gpt2.n_positions, gpt2.n_inner) == (32, 24)


@pytest.mark.parametrize(
    "make", [tiny_bert_mlm, tiny_bert_pretraining, tiny_bert_lm_head, tiny_gpt2]
)
def test_factories_default_to_seed_zero_and_use_the_tokenizer(small_tok, make):
    """The default seed is 0; the vocabulary is the given tokenizer's; config keywords arrive."""
    kwargs = _SMALL if make is not tiny_gpt2 else {"n_embd": 16, "n_layer": 1, "n_head": 2}
    model = make(small_tok, **kwargs)
    first = next(model.parameters())
    assert torch.equal(first, next(make(small_tok, seed=0, **kwargs).parameters()))
    assert not torch.equal(first, next(make(small_tok, seed=1, **kwargs).parameters()))
    width = model.config.hidden_size if make is not tiny_gpt2 else model.config.n_embd
    assert (model.config.vocab_size, width) == (len(small_tok), 16)


def test_tiny_bert_lm_head_is_a_decoder_by_default(small_tok):
    """``is_decoder`` defaults to True (causal attention); a non-bool is refused, naming it."""
    assert tiny_bert_lm_head(small_tok, **_SMALL).config.is_decoder is True
    raises_exactly(
        TypeError,
        "is_decoder must be a bool, got int",
        lambda: tiny_bert_lm_head(small_tok, is_decoder=1),
    )


class _ThreeIdTokenizer:
    """A tokenizer with a pad, a [CLS] and a [SEP] id but no [MASK] id, of 50 tokens."""

    pad_token_id, cls_token_id, sep_token_id, mask_token_id = 0, 1, 2, None

    def __len__(self) -> int:
        return 50


def test_configs_need_only_the_pad_cls_and_sep_ids():
    """A config needs no [MASK] id (catches the default checks of every BERT id applied)."""
    tok = _ThreeIdTokenizer()
    config = tiny_gpt2_config(tok, n_embd=16, n_layer=1, n_head=2)
    assert (config.vocab_size, config.bos_token_id, config.eos_token_id) == (50, 1, 2)


def test_tiny_mixtral_config_names_its_bad_sizes_and_passes_the_good_ones(small_tok):
    """Each refusal names its arguments and bound; one expert, ``top_k`` equal to the experts and
    the given sizes and tokenizer reach the config (catches names, bounds and fields dropped)."""
    from lmlessons.course.models import tiny_mixtral_config

    bad = [
        ({"hidden_size": 30}, "hidden_size (30) must be a multiple of num_attention_heads (4)"),
        (
            {"num_key_value_heads": 3},
            "num_attention_heads (4) must be a multiple of num_key_value_heads (3)",
        ),
        ({"num_local_experts": 0}, "num_local_experts must be >= 1, got 0"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok must be >= 1, got 0"),
    ]
    for kwargs, message in bad:
        raises_exactly(ValueError, message, lambda k=kwargs: tiny_mixtral_config(small_tok, **k))
    one = tiny_mixtral_config(small_tok, num_local_experts=1, num_experts_per_tok=1)
    assert (one.num_local_experts, one.num_experts_per_tok) == (1, 1)
    sized = tiny_mixtral_config(
        small_tok, num_hidden_layers=1, num_experts_per_tok=4, max_position_embeddings=32
    )
    fields = (sized.num_hidden_layers, sized.num_experts_per_tok, sized.max_position_embeddings)
    assert fields == (1, 4, 32)
    assert sized.vocab_size == len(small_tok)


def test_tiny_mixtral_defaults_to_seed_zero_and_uses_the_tokenizer(small_tok):
    """The default seed is 0 and the vocabulary the given tokenizer's (catches ``seed=1`` and
    the tokenizer not passed on)."""
    from lmlessons.course.models import tiny_mixtral

    small = {"hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 16}
    first = next(tiny_mixtral(small_tok, **small).parameters())
    assert torch.equal(first, next(tiny_mixtral(small_tok, seed=0, **small).parameters()))
    assert not torch.equal(first, next(tiny_mixtral(small_tok, seed=1, **small).parameters()))
    assert tiny_mixtral(small_tok, **small).config.vocab_size == len(small_tok)


# ------------------------------------------------------------------------------- checkpoints


def _tiny_gpt2(tok):
    return tiny_gpt2(tok, n_embd=16, n_layer=1, n_head=2)


def test_save_checkpoint_writes_its_files_into_a_new_folder(small_tok, tmp_path):
    """Missing parent folders are made; the weights carry their name, the config every field,
    the metrics sorted JSON indented by 2 with a final newline."""
    from safetensors import safe_open
    from transformers import GPT2Config

    folder = tmp_path / "a" / "b"
    paths = save_checkpoint(_tiny_gpt2(small_tok), "gpt2", folder, metrics={"b": 1, "a": 2})
    assert paths == [
        folder / "gpt2.safetensors",
        folder / "gpt2.config.json",
        folder / "gpt2.metrics.json",
    ]
    with safe_open(str(paths[0]), framework="pt") as f:
        metadata = f.metadata()
    assert (metadata["format"], metadata["lmlessons_checkpoint"]) == ("pt", "gpt2")
    config = json.loads(paths[1].read_text(encoding="utf-8"))
    assert set(GPT2Config().to_dict()) - {"transformers_version"} <= set(config)
    assert paths[2].read_text(encoding="utf-8") == '{\n  "a": 2,\n  "b": 1\n}\n'


def test_load_checkpoint_needs_both_files_and_names_a_bad_weights_file(small_tok, tmp_path):
    """Weights without a config are "not found" (naming the folder); unreadable weights name
    the file; a good pair loads with eager attention."""
    weights, config = save_checkpoint(_tiny_gpt2(small_tok), "gpt2", tmp_path)
    assert load_checkpoint("gpt2", directory=tmp_path).config._attn_implementation == "eager"
    config.unlink()
    raises_exactly(
        FileNotFoundError,
        f"checkpoint 'gpt2' not found in {str(tmp_path)!r}; build it with "
        "`python -m tools.pretrain gpt2 --out DIR`",
        lambda: load_checkpoint("gpt2", directory=tmp_path),
    )
    save_checkpoint(_tiny_gpt2(small_tok), "gpt2", tmp_path)
    weights.write_bytes(b"not safetensors")
    prefix = f"checkpoint 'gpt2': {str(weights)!r} is not a readable safetensors file ("
    with pytest.raises(ValueError, match=f"^{re.escape(prefix)}"):
        load_checkpoint("gpt2", directory=tmp_path)


def test_warm_start_curves_reads_the_given_folder(tmp_path):
    """``directory`` is where the file is read from; a missing file is named; the default is
    the shipped folder."""
    path = tmp_path / "bert.warm_start_curves.json"
    raises_exactly(
        FileNotFoundError,
        f"no warm-start curves at {str(path)!r}",
        lambda: warm_start_curves(directory=tmp_path),
    )
    path.write_text('{"runs": {"caf\u00e9": 1}}', encoding="utf-8")
    assert warm_start_curves(directory=tmp_path) == {"runs": {"caf\u00e9": 1}}
    assert {run["arm"] for run in warm_start_curves()["runs"]} == {"scratch", "warm"}


def test_moe_checkpoints_name_the_router_class_they_need(small_tok, tmp_path):
    """The refusal of the wrong routers names the class exactly (catches either name changed)."""
    from lmlessons.course.models import tiny_mixtral
    from lmlessons.course.moe_runs import use_biased_routers

    plain = tiny_mixtral(small_tok, hidden_size=16, num_hidden_layers=1, intermediate_size=16)
    raises_exactly(
        TypeError,
        "checkpoint 'moe-bias' holds a model whose every router is a BiasedRouter",
        lambda: save_checkpoint(plain, "moe-bias", tmp_path),
    )
    use_biased_routers(plain)
    raises_exactly(
        TypeError,
        "checkpoint 'moe' holds a model whose every router is a MixtralTopKRouter",
        lambda: save_checkpoint(plain, "moe", tmp_path),
    )


def test_checkpoint_metrics_names_the_missing_file(tmp_path):
    """A checkpoint without metrics names itself and the path (catches ``str(None)``)."""
    from lmlessons.course.checkpoints import checkpoint_metrics

    path = tmp_path / "gpt2.metrics.json"
    raises_exactly(
        FileNotFoundError,
        f"no metrics for checkpoint 'gpt2' at {str(path)!r}",
        lambda: checkpoint_metrics("gpt2", directory=tmp_path),
    )


# -------------------------------------------------------------------------------- throughput


def test_sentence_documents_checks_count_and_generator(tok):
    """``count`` from 1 to the number of sentences is allowed, others refused by name; the
    generator is checked; a seed repeats the draw."""
    sentences = ["the dog ran.", "a cat sat.", "the ball fell."]
    raises_exactly(
        ValueError,
        "count must be >= 1, got 0",
        lambda: sentence_documents(sentences, tok, count=0, generator=gen()),
    )
    raises_exactly(
        TypeError,
        "generator must be a torch.Generator or None, got int",
        lambda: sentence_documents(sentences, tok, count=1, generator=7),
    )
    assert len(sentence_documents(sentences, tok, count=1, generator=gen())) == 1
    every = sentence_documents(sentences, tok, count=3, generator=gen(5))
    assert every == sentence_documents(sentences, tok, count=3, generator=gen(5))
    assert sorted(every) == sorted(tok(sentences)["input_ids"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"repeats": 0}, "repeats must be >= 1, got 0"),
        ({"block_size": 1}, "block_size must be >= 2, got 1"),
    ],
)
def test_packing_throughput_names_a_bad_size(small_tok, kwargs, message):
    """Each size below its minimum is refused, naming it."""
    kwargs = {"batch_size": 2, **kwargs}
    raises_exactly(
        ValueError,
        message,
        lambda: packing_throughput(_tiny_gpt2(small_tok), [[2, 5, 3]], pad_token_id=0, **kwargs),
    )


def test_packing_throughput_defaults_and_smallest_sizes(small_tok):
    """3 timed passes of 128-token blocks by default, each at most the CPU time of the call;
    ``repeats=1`` and ``block_size=2`` are allowed."""
    model = _tiny_gpt2(small_tok)
    docs = [[2, *range(5, 5 + n), 3] for n in (40, 70, 90, 60)]  # 268 tokens
    before = time.process_time()
    result = packing_throughput(model, docs, batch_size=2, pad_token_id=small_tok.pad_token_id)
    spent = time.process_time() - before
    assert all(len(t) == 3 and max(t) <= spent for t in result.times.values())
    assert result.positions["grouped"] == 256  # two blocks of 128, the rest dropped
    one = packing_throughput(model, docs[:1], batch_size=1, pad_token_id=0, repeats=1, block_size=2)
    assert all(len(t) == 1 for t in one.times.values())


# ---------------------------------------------------------------------------------- training


def test_smoothed_and_final_defaults():
    """``beta`` defaults to 0.9 (bias-corrected EMA); ``final`` averages the last 20 values."""
    expected = [1.0, 0.09 / 0.19]
    assert smoothed([1.0, 0.0]) == pytest.approx(expected)
    history = History(objective="clm", vocab_size=10, loss=[1.0, 0.0])
    assert history.smoothed() == pytest.approx(expected)
    history.loss = [float(v) for v in range(25)]
    assert history.final() == pytest.approx(14.5)  # mean of 5..24


def test_history_plot_needs_a_display_and_passes_its_defaults():
    """Without a display ``plot`` says what to import; with one it hands over the history, the
    axes, ``x="step"`` and ``reference=True``."""
    history = History(objective="clm", vocab_size=10)
    calls = []
    fake = SimpleNamespace(plot=lambda *args, **kwargs: calls.append((args, kwargs)) or "ax")
    previous = install_display(None)
    try:
        raises_exactly(
            RuntimeError,
            "History.plot draws with lmlessons.widgets: run `import lmlessons.widgets` first",
            history.plot,
        )
        install_display(fake)
        assert history.plot("my-ax") == "ax"
    finally:
        install_display(previous)
    assert calls == [((history, "my-ax"), {"x": "step", "reference": True})]


def _nsp_batches(tok, **kwargs) -> list[dict]:
    docs = [["the dog ran.", "the cat sat.", "a ball fell."], ["a cat.", "the dog.", "a ball."]]
    return list(
        nsp_batches(docs, tok, batch_size=4, max_length=16, epochs=2, generator=gen(), **kwargs)
    )


def test_train_records_steps_tokens_and_the_nsp_accuracy_before_each_step(tok):
    """Steps count from 1; ``tokens_seen`` adds the non-padding tokens from 0; the NSP accuracy
    is that of the model the step started from."""
    model = tiny_bert_pretraining(tok, **_SMALL)
    batches = _nsp_batches(tok)[:2]
    with torch.no_grad():
        chosen = model(**batches[0]).seq_relationship_logits.argmax(-1)  # (B,)
    batches[0]["next_sentence_label"] = chosen  # the model before step 1 is right on every row
    history = train(model, iter(batches), max_steps=2, live=False)
    assert history.step == [1, 2]
    sizes = [int(b["attention_mask"].sum()) for b in batches]
    assert history.tokens_seen == [sizes[0], sizes[0] + sizes[1]]
    assert history.nsp_accuracy[0] == 1.0


def test_evaluate_counts_the_hits_of_the_models_own_predictions(tok):
    """Targets set to the model's own top-1 choices: MLM and NSP accuracy are exactly 1."""
    model = tiny_bert_pretraining(tok, **_SMALL)
    batch = dict(_nsp_batches(tok)[0])
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = model(**inputs)
    keep = batch["labels"] != -100  # (B, T)
    assert keep.any()
    batch["labels"] = torch.where(keep, out.prediction_logits.argmax(-1), -100)  # (B, T)
    batch["next_sentence_label"] = out.seq_relationship_logits.argmax(-1)  # (B,)
    metrics = evaluate(model, [batch])
    assert metrics["mlm_accuracy"] == 1.0 and metrics["nsp_accuracy"] == 1.0


def test_train_without_mlm_targets_has_mlm_loss_zero(tok):
    """With ``mlm_probability=0`` no token is a target: the step's MLM loss is 0, not NaN."""
    model = tiny_bert_pretraining(tok, **_SMALL)
    history = train(model, iter(_nsp_batches(tok, mlm_probability=0.0)), max_steps=1, live=False)
    assert history.mlm_loss == [0.0]


def test_train_counts_every_token_of_a_batch_without_attention_mask(tok):
    """No ``attention_mask``: every input token counts; the CLM loss is the model's own."""
    model = tiny_gpt2(tok, n_embd=16, n_layer=1, n_head=2)
    start = copy.deepcopy(model)
    ids = torch.tensor([[tok.cls_token_id, 7, 8, 9, tok.sep_token_id]])  # (1, 5)
    batch = {"input_ids": ids, "labels": ids.clone()}
    history = train(model, iter([batch]), max_steps=1, live=False)
    assert history.tokens_seen == [5]
    with torch.no_grad():
        assert history.loss[0] == pytest.approx(start(**batch).loss.item(), rel=1e-5)


def test_evaluate_accuracies_are_the_argmax_hits(tok):
    """``mlm_accuracy`` and ``nsp_accuracy`` are the top-1 hits counted by hand."""
    model = tiny_bert_pretraining(tok, **_SMALL).eval()
    batches = _nsp_batches(tok)
    metrics = evaluate(model, batches, objective="pretraining")
    hits = targets = nsp_hits = rows = 0
    with torch.no_grad():
        for b in batches:
            out = model(**b)
            keep = b["labels"] != -100  # (B, T)
            hits += int((out.prediction_logits[keep].argmax(-1) == b["labels"][keep]).sum())
            targets += int(keep.sum())
            nsp_hits += int(
                (out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum()
            )
            rows += b["input_ids"].shape[0]
    assert metrics["mlm_accuracy"] == pytest.approx(hits / targets)
    assert metrics["nsp_accuracy"] == pytest.approx(nsp_hits / rows)


# ------------------------------------------------------------------------------------ corpus


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("! Hi there.", ["!", "Hi there."]),  # nothing before the first boundary
        ("We saw (e.g. Rome) there. Then we left.", ["We saw (e.g. Rome) there.", "Then we left."]),
        ("It was at NASA. Then we left.", ["It was at NASA.", "Then we left."]),
    ],
)
def test_split_sentences_edge_cases(text, sentences):
    """An empty first sentence is dropped; an abbreviation after "(" does not end a sentence;
    an upper-case word that is not an initial does."""
    assert split_sentences(text) == sentences


def test_split_sentences_names_a_non_str():
    """A non-str ``text`` is refused with its type."""
    raises_exactly(TypeError, "text must be a str, got int", lambda: split_sentences(5))


def _file(tmp_path, data: bytes, name: str = "c.txt"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_load_corpus_names_each_unreadable_file(tmp_path):
    """Missing, a directory, binary, not UTF-8, empty: each message names the path."""
    missing = tmp_path / "no.txt"
    cases = [
        (
            missing,
            FileNotFoundError,
            f"load_corpus: no such file: {str(missing)!r} (built-in corpora: 'course')",
        ),
        (
            tmp_path,
            ValueError,
            f"load_corpus: {str(tmp_path)!r} is a directory; expected a UTF-8 text file",
        ),
    ]
    binary = _file(tmp_path, b"a\x00b", "bin.txt")
    latin = _file(tmp_path, b"caf\xe9", "latin.txt")
    empty = _file(tmp_path, b" \n ", "empty.txt")
    cases += [
        (
            binary,
            ValueError,
            f"load_corpus: {str(binary)!r} is not a text file "
            "(it contains NUL bytes: binary data?)",
        ),
        (
            latin,
            ValueError,
            f"load_corpus: {str(latin)!r} is not UTF-8 text (invalid byte 0xe9 at position 3); "
            "save it as UTF-8 first",
        ),
        (empty, ValueError, f"load_corpus: {str(empty)!r} is empty (no text to read)"),
    ]
    for path, error, message in cases:
        raises_exactly(error, message, lambda p=path: load_corpus(p))


def test_load_corpus_reads_windows_and_old_mac_line_ends(tmp_path):
    """``\\r\\n`` and ``\\r`` end lines like ``\\n``: a blank line still ends a document."""
    path = _file(tmp_path, b"A one.\r\nB two.\r\rC three.\n")
    corpus = load_corpus(path, one_sentence_per_line=True, validation_fraction=0.0)
    assert corpus.documents == [["A one.", "B two."], ["C three."]]
    assert corpus.name == str(path)


@pytest.mark.parametrize(
    ("documents", "fraction", "validation"),
    [(2, 0.1, 1), (3, 0.1, 1), (2, 0.9, 1), (2, 0.0, 0)],
)
def test_load_corpus_split_bounds(tmp_path, documents, fraction, validation):
    """A topic of two or more documents gives at least one to validation when the fraction is
    > 0 (and at most all but one)."""
    text = "\n\n".join(f"Doc {i} here." for i in range(documents)).encode()
    corpus = load_corpus(_file(tmp_path, text), validation_fraction=fraction)
    assert (len(corpus.train_indices), len(corpus.validation_indices)) == (
        documents - validation,
        validation,
    )


def test_load_corpus_default_source_and_bad_arguments():
    """The default source is the course corpus; bad arguments are refused by name."""
    assert load_corpus().name == "course"
    raises_exactly(
        TypeError,
        "validation_fraction must be a float in [0, 1), got str",
        lambda: load_corpus(validation_fraction="0.1"),
    )
    raises_exactly(TypeError, "seed must be an int, got str", lambda: load_corpus(seed="0"))
    raises_exactly(
        TypeError,
        "source must be 'course' or a path to a text file, got int",
        lambda: load_corpus(5),
    )


def test_load_corpus_says_where_the_course_files_are_missing(monkeypatch, tmp_path):
    """No ``course_*.txt`` in the data folder: the error names the folder."""
    monkeypatch.setattr(corpus_module, "DATA_DIR", tmp_path)
    raises_exactly(
        FileNotFoundError,
        f"the course corpus is missing: no course_*.txt in {tmp_path}",
        lambda: load_corpus("course"),
    )
