"""Text for the course: documents as lists of sentences, split into train / validation by document.

Three sources, one loader (:func:`load_corpus`):

* ``"course"``: the default corpus written for this course, shipped as
  ``lmlessons/data/course_<topic>.txt`` (one sentence per line, a blank line between documents,
  the input format of Google BERT's ``create_pretraining_data.py``). Every document has a topic.
* ``"python-docs"``: the documentation that ships with the interpreter: ``pydoc_data.topics``
  (the language reference behind ``help("if")``) and the standard library's docstrings, read
  with :mod:`ast` so no module is imported. Parsed once, then cached in the user cache folder.
* a path to any UTF-8 text file: a blank line ends a document; sentences are split with a
  small regular expression (or one per line with ``one_sentence_per_line=True``).

The split is by *document*, so no validation sentence has its neighbours in the training set:
next-sentence prediction and perplexity on validation are then measured on unseen text.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import random
import re
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lmlessons.course._cache import user_cache_dir

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
BUILTIN_CORPORA = ("course", "python-docs")

__all__ = ["Corpus", "load_corpus", "split_sentences", "BUILTIN_CORPORA"]


@dataclass(frozen=True, eq=False)
class Corpus:
    """Documents (each a list of sentence strings) with a topic each and a train/validation split.

    Attributes:
        name: ``"course"``, ``"python-docs"`` or the file path it was read from.
        documents: every document, in a fixed order; ``documents[i]`` is a list of sentences.
        topics: ``topics[i]`` is the topic of ``documents[i]`` (``"animals"``, ... for the course;
            the module for python-docs; the file name for a file).
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
            f"(the built-in corpora are {', '.join(map(repr, BUILTIN_CORPORA))})"
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
# The built-in corpora
# --------------------------------------------------------------------------------------------


def _course_files() -> list[Path]:
    return sorted(DATA_DIR.glob("course_*.txt"))


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


# python-docs ---------------------------------------------------------------------------------

_PYDOCS_VERSION = 1  # bump when the extraction below changes, so old caches are ignored
_SKIP_MODULES = frozenset(
    [
        "test",
        "idlelib",
        "lib2to3",
        "turtledemo",
        "ensurepip",
        "site-packages",
        "dist-packages",
        "pydoc_data",
        "encodings",
        "distutils",
        "venv",
        "this",
        "antigravity",
    ]
)
_UNDERLINE = re.compile(r"^([=\-~^*+#\"'`])\1{2,}$")
_MIN_WORDS, _MAX_WORDS = 4, 80


def _prose_sentences(text: str) -> list[str]:
    """Keep the prose of reST-ish documentation: drop headings, indented blocks (code, argument
    lists), doctests, bullets and grammar rules, then split into sentences and keep the ones
    that look like English (enough words, mostly letters, end punctuation)."""
    lines = text.replace("\r\n", "\n").split("\n")
    paragraphs: list[list[str]] = [[]]
    for i, line in enumerate(lines):
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if not line.strip() or _UNDERLINE.match(line.strip()) or _UNDERLINE.match(nxt):
            paragraphs.append([])
        else:
            paragraphs[-1].append(line)
    sentences: list[str] = []
    for para in paragraphs:
        if not para:
            continue
        first = para[0]
        if (
            first[:1].isspace()
            or any(line[:1].isspace() for line in para[1:])
            or first.lstrip().startswith((">>>", "...", "- ", "* ", ":", "|", "+", ".."))
            or "::=" in " ".join(para)
        ):
            continue
        for s in split_sentences(" ".join(para)):
            words = s.split()
            letters = sum(c.isalpha() for c in s)
            if (
                _MIN_WORDS <= len(words) <= _MAX_WORDS
                and s[-1] in ".!?"
                and s[0].isupper()
                and letters >= 0.7 * sum(not c.isspace() for c in s)
            ):
                sentences.append(s)
    return sentences


def _stdlib_files(root: Path) -> list[tuple[str, Path]]:
    """(top-level module name, file) for public standard-library modules, in a fixed order."""
    out: list[tuple[str, Path]] = []
    for entry in sorted(root.iterdir()):
        name = entry.name.removesuffix(".py")
        if name.startswith(("_", ".")) or name in _SKIP_MODULES or name.startswith("config-"):
            continue
        if entry.is_file() and entry.suffix == ".py":
            out.append((name, entry))
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            for dirpath, dirnames, filenames in os.walk(entry):
                dirnames[:] = sorted(
                    d for d in dirnames if d not in ("test", "tests", "idle_test", "__pycache__")
                )
                out.extend(
                    (name, Path(dirpath) / f) for f in sorted(filenames) if f.endswith(".py")
                )
    return out


def _docstring_documents(source: bytes) -> list[list[str]]:
    """One document per module/class/function docstring with >= 2 prose sentences."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    documents = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                sentences = _prose_sentences(doc)
                if len(sentences) >= 2:
                    documents.append(sentences)
    return documents


def _build_python_docs() -> dict[str, list]:
    documents: list[list[str]] = []
    topics: list[str] = []
    reference: dict[str, str] = {}
    try:
        from pydoc_data import topics as pydoc_topics  # a plain dict of strings
    except ImportError:  # some distributions strip it
        pass
    else:
        reference = pydoc_topics.topics
    for key in sorted(reference):
        sentences = _prose_sentences(reference[key])
        if len(sentences) >= 2:
            documents.append(sentences)
            topics.append("reference")
    root = Path(sysconfig.get_paths()["stdlib"])
    for module, path in _stdlib_files(root):
        for doc in _docstring_documents(path.read_bytes()):
            documents.append(doc)
            topics.append(module)
    return {"documents": documents, "topics": topics}


def _python_docs_cache_file() -> Path:
    major, minor, micro = sys.version_info[:3]
    tag = f"{sys.implementation.name}{major}.{minor}.{micro}"
    return user_cache_dir() / f"python-docs-v{_PYDOCS_VERSION}-{tag}.json"


@functools.lru_cache(maxsize=1)
def _python_docs_documents() -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    cache = _python_docs_cache_file()
    data = None
    if cache.is_file():
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
    if data is None:
        data = _build_python_docs()
        try:  # best effort: a read-only home just means parsing again next session
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, cache)
        except OSError:
            pass
    return tuple(tuple(d) for d in data["documents"]), tuple(data["topics"])


def _load_python_docs() -> tuple[list[list[str]], list[str]]:
    documents, topics = _python_docs_documents()
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
        source: ``"course"`` (the default, original text written for this course, 12 topics),
            ``"python-docs"`` (Python's own documentation, no download) or the path of a UTF-8
            text file (a blank line between documents). A file literally named ``course`` is
            read with ``load_corpus(Path("course"))``.
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
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if isinstance(source, str) and source in BUILTIN_CORPORA:
        name = source
        documents, topics = _load_course() if source == "course" else _load_python_docs()
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        name = str(source)
        documents = _parse_documents(_read_text(path), one_sentence_per_line=one_sentence_per_line)
        topics = [path.stem] * len(documents)
    else:
        raise TypeError(
            "source must be 'course', 'python-docs' or a path to a text file, "
            f"got {type(source).__name__}"
        )
    train_idx, val_idx = _split(topics, float(validation_fraction), seed)
    return Corpus(
        name=name,
        documents=documents,
        topics=topics,
        train_indices=train_idx,
        validation_indices=val_idx,
    )
