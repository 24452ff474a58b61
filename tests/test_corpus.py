"""lmlessons.course.corpus: the course corpus, any text file; splits and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmlessons import load_corpus, split_sentences
from lmlessons.course import corpus as corpus_module
from lmlessons.course.corpus import Corpus

TOPICS = {
    "animals",
    "cooking",
    "weather",
    "sport",
    "travel",
    "school",
    "gardening",
    "music",
    "health",
    "space",
    "farming",
    "sea",
}


@pytest.fixture(scope="module")
def course_corpus() -> Corpus:
    return load_corpus("course")


def test_course_corpus_size_and_topics(course_corpus: Corpus) -> None:
    assert len(course_corpus) >= 300
    assert course_corpus.num_words >= 40_000
    assert set(course_corpus.topics) == TOPICS
    assert len(course_corpus.topics) == len(course_corpus.documents)
    assert (
        min(len(doc) for doc in course_corpus.documents) >= 4
    )  # every document has >= 4 sentences
    assert all(
        isinstance(s, str) and s == s.strip() and s for doc in course_corpus.documents for s in doc
    )


def test_course_files_are_one_sentence_per_line() -> None:
    # The shipped format (BERT's create_pretraining_data.py input): no empty "sentences".
    for path in sorted(corpus_module.DATA_DIR.glob("course_*.txt")):
        text = path.read_text(encoding="utf-8")
        assert "\t" not in text, path.name
        assert text.strip(), path.name


def test_split_is_by_document_deterministic_and_stratified(course_corpus: Corpus) -> None:
    train, val = set(course_corpus.train_indices), set(course_corpus.validation_indices)
    assert not train & val
    assert train | val == set(range(len(course_corpus)))
    assert 0.07 < len(val) / len(course_corpus) < 0.13
    assert set(course_corpus.validation_topics) == TOPICS  # every topic is held out
    again = load_corpus("course")
    assert again.validation_indices == course_corpus.validation_indices
    assert again.validation == course_corpus.validation
    other = load_corpus("course", seed=1)
    assert other.validation_indices != course_corpus.validation_indices
    assert load_corpus("course", validation_fraction=0.0).validation == []


def test_returned_documents_are_fresh_copies(course_corpus: Corpus) -> None:
    fresh = load_corpus("course")
    fresh.documents[0].append("A sentence a learner added.")
    assert load_corpus("course").documents[0] == course_corpus.documents[0]


def test_the_course_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse is memoised: a second load reads no text (speed is measured by make bench)."""
    corpus_module._course_documents.cache_clear()
    calls = []
    real = corpus_module._parse_documents
    monkeypatch.setattr(
        corpus_module, "_parse_documents", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    first = load_corpus("course")
    parsed = len(calls)
    again = load_corpus("course")
    assert parsed >= 1 and len(calls) == parsed
    assert again.documents == first.documents


def test_repr_summarises(course_corpus: Corpus) -> None:
    text = repr(course_corpus)
    assert "course" in text and "documents" in text and "12 topics" in text


# ---------------------------------------------------------------------------------------------
# Any text file


def test_text_file_documents_and_sentences(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text(
        "\ufeffThe first document starts here. It has two sentences!\n"
        "And a third one on a new line?\r\n"
        "   \n\n"
        "Dr. Smith wrote the second document. It cites e.g. one book.\n",
        encoding="utf-8",
    )
    c = load_corpus(path, validation_fraction=0.5)
    assert c.documents == [
        [
            "The first document starts here.",
            "It has two sentences!",
            "And a third one on a new line?",
        ],
        ["Dr. Smith wrote the second document.", "It cites e.g. one book."],
    ]
    assert c.topics == ["notes", "notes"]
    assert len(c.train) == 1 and len(c.validation) == 1
    lines = load_corpus(str(path), one_sentence_per_line=True)
    assert lines.documents[0] == [
        "The first document starts here. It has two sentences!",
        "And a third one on a new line?",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("Mr. Brown met J. Smith. They talked.", ["Mr. Brown met J. Smith.", "They talked."]),
        ("Pi is 3.14 and e is 2.72. Nice.", ["Pi is 3.14 and e is 2.72.", "Nice."]),
        ('She said "Stop." Then left.', ['She said "Stop."', "Then left."]),
        ("no capital after. stays together", ["no capital after. stays together"]),
        ("  spaced\n out\ttext.  ", ["spaced out text."]),
        ("", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="text must be a str"):
        split_sentences(b"bytes")  # type: ignore[arg-type]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no such file.*built-in corpora: 'course'"):
        load_corpus(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError):
        load_corpus("corse")  # a typo of "course" is a missing file, with the hint


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b" \n\n\t\n", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a text file"),
        ("caf\u00e9 cr\u00e8me".encode("latin-1"), "not UTF-8"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_corpus(path)


def test_directory_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a directory"):
        load_corpus(tmp_path)
    with pytest.raises(TypeError, match="source must be"):
        load_corpus(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="validation_fraction"):
        load_corpus("course", validation_fraction=1.0)
    with pytest.raises(TypeError, match="validation_fraction"):
        load_corpus("course", validation_fraction="0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed"):
        load_corpus("course", seed=1.5)  # type: ignore[arg-type]
