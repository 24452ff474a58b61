"""lmlessons.course.tokenizer: the shipped WordPiece tokenizer and train_tokenizer."""

from __future__ import annotations

import pytest
from transformers import BertTokenizer  # import the class now: time the load, not the import

from lmlessons import load_corpus, load_tokenizer, train_tokenizer
from lmlessons.course import tokenizer as tokenizer_module
from lmlessons.course.tokenizer import COURSE_WHOLE_WORDS, SPECIAL_TOKENS


def test_the_file_is_read_once_and_each_call_gets_its_own_tokenizer() -> None:
    tokenizer_module._tokenizer_json.cache_clear()
    first = load_tokenizer()
    second = load_tokenizer()
    assert tokenizer_module._tokenizer_json.cache_info().misses == 1
    assert isinstance(first, BertTokenizer) and first is not second


def test_special_tokens_and_ids(tok: BertTokenizer) -> None:
    assert [tok.pad_token, tok.unk_token, tok.cls_token, tok.sep_token, tok.mask_token] == list(
        SPECIAL_TOKENS
    )
    ids = {
        tok.pad_token_id,
        tok.unk_token_id,
        tok.cls_token_id,
        tok.sep_token_id,
        tok.mask_token_id,
    }
    assert len(ids) == 5 and set(tok.all_special_ids) == ids
    assert 2000 <= len(tok) <= 4000
    assert tok.model_max_length == 128


def test_bert_pair_template_with_token_type_ids(tok: BertTokenizer) -> None:
    enc = tok("The dog chased the ball.", "It ran back.")
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    assert tokens == [
        "[CLS]",
        "the",
        "dog",
        "chased",
        "the",
        "ball",
        ".",
        "[SEP]",
        "it",
        "ran",
        "back",
        ".",
        "[SEP]",
    ]
    assert enc["token_type_ids"] == [0] * 8 + [1] * 5
    assert enc["attention_mask"] == [1] * 13
    assert (
        tok.decode(enc["input_ids"], skip_special_tokens=True)
        == "the dog chased the ball. it ran back."
    )
    masked = tok.convert_ids_to_tokens(tok("The dog chased the [MASK].")["input_ids"])
    assert masked == ["[CLS]", "the", "dog", "chased", "the", "[MASK]", ".", "[SEP]"]


def test_common_words_are_whole_and_nothing_is_unknown(tok: BertTokenizer) -> None:
    vocab = tok.get_vocab()
    for word in (
        "dog",
        "cat",
        "ball",
        "chased",
        "the",
        "rain",
        "bread",
        "garden",
        "music",
        "farmer",
    ):
        assert word in vocab, word
    pieces = tok.tokenize("Unbelievably")  # a word the corpus never uses: spelled in pieces
    assert len(pieces) > 1 and all(p.startswith("##") for p in pieces[1:])
    assert "".join(p.removeprefix("##") for p in pieces) == "unbelievably"
    ids = [
        i
        for doc in load_corpus("course").validation
        for s in doc
        for i in tok(s, add_special_tokens=False)["input_ids"]
    ]
    assert tok.unk_token_id not in ids  # every printable ASCII word can be spelled
    assert tok.unk_token_id not in tok("Zyzzyva 42 x_y {z} naïve")["input_ids"]


def test_padding_and_truncation(tok: BertTokenizer) -> None:
    batch = tok(["a dog", "a dog ran to the sea"], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 8)
    assert batch["input_ids"][0, -1].item() == tok.pad_token_id
    assert batch["attention_mask"][0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    long = tok("word " * 500, truncation=True)["input_ids"]
    assert len(long) == 128 and long[-1] == tok.sep_token_id


def test_shipped_tokenizer_is_the_trained_one(tok: BertTokenizer) -> None:
    """tokenizer.json is what `python -m lmlessons.course.tokenizer` trains from the course corpus
    (so it is current with the corpus files, and training is deterministic)."""
    retrained = train_tokenizer(load_corpus("course"), whole_words=COURSE_WHOLE_WORDS)
    assert retrained.get_vocab() == tok.get_vocab()


def test_training_is_deterministic_and_sized() -> None:
    docs = load_corpus("course").train[:60]
    a = train_tokenizer(docs, vocab_size=600)
    b = train_tokenizer(docs, vocab_size=600)
    assert len(a) == 600
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()


def test_whole_words_and_input_forms() -> None:
    texts = [s for doc in load_corpus("course").train[:40] for s in doc] + ["A quokka smiled."]
    tok = train_tokenizer(texts, vocab_size=300, whole_word_frequency=None, whole_words=["Quokka"])
    assert "quokka" in tok.get_vocab() and len(tok) == 300
    assert tok.tokenize("Quokka") == ["quokka"]
    without = train_tokenizer(texts, vocab_size=300, whole_word_frequency=None)
    assert "quokka" not in without.get_vocab()
    frequent = train_tokenizer(texts, vocab_size=300, whole_word_frequency=3)
    assert len(frequent) == 300 and "the" in frequent.get_vocab()
    one_text = train_tokenizer(" ".join(texts), vocab_size=300)
    from_docs = train_tokenizer([texts[:20], texts[20:]], vocab_size=300)
    assert len(one_text) == len(from_docs) == 300


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="documents_or_texts"):
        train_tokenizer(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"documents_or_texts\[0\]\[1\]"):
        train_tokenizer([["fine", 3]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no text"):
        train_tokenizer(["", "   "])
    with pytest.raises(ValueError, match="vocab_size must be >="):
        train_tokenizer(["some text"], vocab_size=10)
    with pytest.raises(TypeError, match="vocab_size"):
        train_tokenizer(["some text"], vocab_size=2000.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one word"):
        train_tokenizer(["some text"], whole_words=["two words"])
    with pytest.raises(TypeError, match="whole_words"):
        train_tokenizer(["some text"], whole_words="dog")
    with pytest.raises(FileNotFoundError):
        load_tokenizer("/nonexistent/tokenizer.json")


def test_each_load_is_independent() -> None:
    a, b = load_tokenizer(), load_tokenizer()
    a.model_max_length = 16
    assert b.model_max_length == 128 and a is not b
