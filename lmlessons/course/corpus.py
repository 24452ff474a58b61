"""Text for the course: documents as lists of sentences, split into train / validation by document.

Two sources, one loader (:func:`load_corpus`):

* ``"course"``: the default corpus written for this course, shipped as
  ``lmlessons/data/course_<topic>.txt`` (one sentence per line, a blank line between documents,
  the input format of Google BERT's ``create_pretraining_data.py``). Every document has a topic.
* a path to any UTF-8 text file: a blank line ends a document; sentences are split with a
  small regular expression (or one per line with ``one_sentence_per_line=True``).

The split is by *document*, so no validation sentence has its neighbours in the training set:
next-sentence prediction and perplexity on validation are then measured on unseen text.
"""

from __future__ import annotations

import functools
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lmlessons._checks import check_int

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
BUILTIN_CORPORA = ("course",)

__all__ = ["Corpus", "load_corpus", "split_sentences", "clear_cache", "BUILTIN_CORPORA"]


@dataclass(frozen=True, eq=False)
class Corpus:
    """Documents (each a list of sentence strings) with a topic each and a train/validation split.

    Attributes:
        name: ``"course"`` or the file path it was read from.
        documents: every document, in a fixed order; ``documents[i]`` is a list of sentences.
        topics: ``topics[i]`` is the topic of ``documents[i]`` (``"animals"``, ... for the course;
            the file name for a file).
        train_indices, validation_indices: positions in ``documents`` of each split (sorted).
    """

    name: str
    documents: list[list[str]]
    topics: list[str]
    train_indices: tuple[int, ...]
    validation_indices: tuple[int, ...]

    @property
    def train(self) -> list[list[str]]:
        """The training documents (lists of sentences)."""
        return [self.documents[i] for i in self.train_indices]

    @property
    def validation(self) -> list[list[str]]:
        """The held-out documents (lists of sentences)."""
        return [self.documents[i] for i in self.validation_indices]

    @property
    def train_topics(self) -> list[str]:
        return [self.topics[i] for i in self.train_indices]

    @property
    def validation_topics(self) -> list[str]:
        return [self.topics[i] for i in self.validation_indices]

    @property
    def topic_names(self) -> list[str]:
        """The distinct topics, sorted."""
        return sorted(set(self.topics))

    @property
    def sentences(self) -> list[str]:
        """Every sentence of every document, in order."""
        return [s for doc in self.documents for s in doc]

    @property
    def num_sentences(self) -> int:
        return sum(len(doc) for doc in self.documents)

    @property
    def num_words(self) -> int:
        """Whitespace-separated words (a rough count, before tokenization)."""
        return sum(len(s.split()) for doc in self.documents for s in doc)

    def __len__(self) -> int:
        return len(self.documents)

    def __repr__(self) -> str:
        return (
            f"Corpus({self.name!r}: {len(self.documents):,} documents "
            f"({len(self.train_indices):,} train / {len(self.validation_indices):,} validation), "
            f"{self.num_sentences:,} sentences, {self.num_words:,} words, "
            f"{len(self.topic_names):,} topics)"
        )


# --------------------------------------------------------------------------------------------
# Sentence splitting
# --------------------------------------------------------------------------------------------

# End punctuation (plus closing quotes/brackets), whitespace, then something that can start a
# sentence. Lower-case continuations ("3.5 and", "e.g. the") never split.
_BOUNDARY = re.compile(r"([.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "jr",
        "sr",
        "vs",
        "e.g",
        "i.e",
        "cf",
        "fig",
        "no",
        "vol",
        "approx",
        "dept",
        "est",
        "inc",
        "ltd",
        "co",
    ]
)


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences with a small rule: ``.``, ``!`` or ``?`` followed by
    white space and an upper-case letter, a digit or an opening quote ends a sentence, except
    after a common abbreviation ("Dr.", "e.g.") or an initial ("J. Smith").

    Good enough for plain prose; it is a teaching tool, not a full segmenter (``tokenizers``
    pre-tokenizers split words, not sentences). Line breaks inside ``text`` count as spaces.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = " ".join(text.split())
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        words = text[start : m.start(1)].split()
        last = words[-1] if words else ""
        if m.group(1).startswith(".") and (
            last.lower().lstrip("(\"'") in _ABBREVIATIONS or (len(last) == 1 and last.isupper())
        ):
            continue
        sentences.append(text[start : m.end(1)])
        start = m.end()
    if start < len(text):
        sentences.append(text[start:])
    return [s for s in sentences if s]


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------

_BLANK_LINES = re.compile(r"\n[ \t\f\v]*\n\s*")


def _read_text(path: Path) -> str:
    """Read a UTF-8 text file, with a clear error for a missing, empty or binary file."""
    if not path.exists():
        raise FileNotFoundError(
            f"load_corpus: no such file: {str(path)!r} "
            f"(built-in corpora: {', '.join(map(repr, BUILTIN_CORPORA))})"
        )
    if path.is_dir():
        raise ValueError(f"load_corpus: {str(path)!r} is a directory; expected a UTF-8 text file")
    data = path.read_bytes()
    if b"\x00" in data:
        raise ValueError(
            f"load_corpus: {str(path)!r} is not a text file (it contains NUL bytes: binary data?)"
        )
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark is dropped
    except UnicodeDecodeError as err:
        raise ValueError(
            f"load_corpus: {str(path)!r} is not UTF-8 text (invalid byte "
            f"0x{data[err.start]:02x} at position {err.start}); save it as UTF-8 first"
        ) from None
    if not text.strip():
        raise ValueError(f"load_corpus: {str(path)!r} is empty (no text to read)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _parse_documents(text: str, *, one_sentence_per_line: bool) -> list[list[str]]:
    """Blank line = document boundary. Each block becomes a list of sentences."""
    documents = []
    for block in _BLANK_LINES.split(text.strip()):
        if one_sentence_per_line:
            sentences = [" ".join(line.split()) for line in block.split("\n") if line.strip()]
        else:
            sentences = split_sentences(block)
        if sentences:
            documents.append(sentences)
    return documents


# --------------------------------------------------------------------------------------------
# The built-in corpus
# --------------------------------------------------------------------------------------------


def _course_files() -> list[Path]:
    return sorted(DATA_DIR.glob("course_*.txt"))


def clear_cache() -> None:
    """Forget the parsed course files: the next :func:`load_corpus` reads them again (a cold
    load, as ``python -m tools.budgets`` measures it)."""
    _course_documents.cache_clear()


@functools.lru_cache(maxsize=4)
def _course_documents(
    signature: tuple[tuple[str, int, int], ...],
) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """Parse every ``course_<topic>.txt`` (cached per set of file names, sizes and mtimes)."""
    documents: list[tuple[str, ...]] = []
    topics: list[str] = []
    for name, _, _ in signature:
        path = DATA_DIR / name
        topic = path.stem.removeprefix("course_")
        for doc in _parse_documents(_read_text(path), one_sentence_per_line=True):
            documents.append(tuple(doc))
            topics.append(topic)
    return tuple(documents), tuple(topics)


def _load_course() -> tuple[list[list[str]], list[str]]:
    files = _course_files()
    if not files:
        raise FileNotFoundError(f"the course corpus is missing: no course_*.txt in {DATA_DIR}")
    signature = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    documents, topics = _course_documents(signature)
    return [list(d) for d in documents], list(topics)


# --------------------------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------------------------


def _split(
    topics: Sequence[str], validation_fraction: float, seed: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Stratified by topic: from each topic, ``round(fraction * n)`` documents (at least one when
    the topic has two or more and the fraction is > 0) go to validation, chosen by ``seed``."""
    rng = random.Random(seed)  # Random.shuffle with an int seed is stable across Python versions
    by_topic: dict[str, list[int]] = {}
    for i, t in enumerate(topics):
        by_topic.setdefault(t, []).append(i)
    validation: list[int] = []
    for t in sorted(by_topic):
        idx = by_topic[t]
        k = round(validation_fraction * len(idx))
        if validation_fraction > 0 and len(idx) >= 2:
            k = max(k, 1)
        k = min(k, len(idx) - 1) if validation_fraction < 1 else len(idx)
        shuffled = idx[:]
        rng.shuffle(shuffled)
        validation.extend(shuffled[:k])
    val = set(validation)
    return tuple(i for i in range(len(topics)) if i not in val), tuple(sorted(val))


def load_corpus(
    source: str | os.PathLike[str] = "course",
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    one_sentence_per_line: bool = False,
) -> Corpus:
    """Load documents as lists of sentences, split into train / validation by document.

    Args:
        source: ``"course"`` (the default, original text written for this course, 12 topics)
            or the path of a UTF-8 text file (a blank line between documents). A file literally
            named ``course`` is read with ``load_corpus(Path("course"))``.
        validation_fraction: share of documents (per topic) held out for validation.
        seed: chooses the validation documents; the same seed gives the same split everywhere.
        one_sentence_per_line: for a file, treat each line as one sentence (BERT's
            ``create_pretraining_data.py`` format) instead of splitting sentences with a rule.

    Returns:
        a :class:`Corpus` (``.train``, ``.validation``, ``.documents``, ``.topics``).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is empty, a directory, binary or not UTF-8; a bad fraction.
        TypeError: ``source`` is not a string or a path.
    """
    if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, (int, float)):
        raise TypeError(
            "validation_fraction must be a float in [0, 1), "
            f"got {type(validation_fraction).__name__}"
        )
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    seed = check_int("seed", seed)
    if isinstance(source, str) and source in BUILTIN_CORPORA:
        name = source
        documents, topics = _load_course()
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        name = str(source)
        documents = _parse_documents(_read_text(path), one_sentence_per_line=one_sentence_per_line)
        topics = [path.stem] * len(documents)
    else:
        raise TypeError(
            f"source must be 'course' or a path to a text file, got {type(source).__name__}"
        )
    train_idx, val_idx = _split(topics, float(validation_fraction), seed)
    return Corpus(
        name=name,
        documents=documents,
        topics=topics,
        train_indices=train_idx,
        validation_indices=val_idx,
    )
