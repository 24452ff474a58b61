"""A BERT-style WordPiece tokenizer, trained with the ``tokenizers`` library.

The pipeline is BERT's (Devlin et al. 2019; ``BertTokenizer`` in transformers):
``BertNormalizer`` (clean text, lower-case, strip accents) -> ``BertPreTokenizer`` (split on
white space and punctuation) -> ``WordPiece`` (``##`` marks a word's continuation pieces) ->
the ``[CLS] A [SEP] B [SEP]`` post-processor with ``token_type_ids`` 0 for A and 1 for B.

The trained tokenizer is wrapped as ``transformers.BertTokenizer(tokenizer_object=...)`` (in
transformers 5 the ``tokenizers``-backed class; ``BertTokenizerFast`` is another name for it):
a bare ``PreTrainedTokenizerFast`` would not return ``token_type_ids``.
The course ships one, trained on the course corpus: :func:`load_tokenizer`. Rebuild it with
``python -m tools.pretrain tokenizer --out lmlessons/data``.
"""

from __future__ import annotations

import functools
import json
import string
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from lmlessons._checks import check_int
from lmlessons.course.corpus import Corpus

if TYPE_CHECKING:  # transformers is imported when a tokenizer is built (it takes seconds)
    from transformers import BertTokenizer

__all__ = [
    "COURSE_WHOLE_WORDS",
    "clear_cache",
    "SPECIAL_TOKENS",
    "TOKENIZER_FILE",
    "train_tokenizer",
    "load_tokenizer",
    "wrap_tokenizer",
]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILE = Path(__file__).resolve().parents[1] / "data" / "tokenizer.json"
DEFAULT_VOCAB_SIZE = 2500
# Words the lessons' examples use ("The dog chased the [MASK].") stay whole in the course tokenizer.
COURSE_WHOLE_WORDS = ("dog", "cat", "ball", "chased")
MIN_VOCAB_SIZE = 150  # special tokens + characters + "##" characters take ~110
DEFAULT_MAX_LENGTH = 128  # the tiny models' max_position_embeddings
# Every printable ASCII character is in the vocabulary, so an ASCII word is never [UNK]
# (WordPiece maps a whole word to [UNK] when one of its characters is unknown).
_ASCII_ALPHABET = sorted(set(string.ascii_lowercase + string.digits + string.punctuation))


def _iter_texts(data: object) -> Iterator[str]:
    """Sentences or texts from a Corpus (its training documents), a str, a list of str or a list
    of documents (lists of str)."""
    if isinstance(data, Corpus):
        data = data.train
    if isinstance(data, str):
        yield data
        return
    if not isinstance(data, Iterable):
        raise TypeError(
            "documents_or_texts must be a Corpus, a str, a list of str or a list of documents "
            f"(lists of str), got {type(data).__name__}"
        )
    for i, item in enumerate(data):
        if isinstance(item, str):
            yield item
        elif isinstance(item, Iterable) and not isinstance(item, (bytes, dict)):
            for j, sentence in enumerate(item):
                if not isinstance(sentence, str):
                    raise TypeError(
                        f"documents_or_texts[{i}][{j}] must be a str, got {type(sentence).__name__}"
                    )
                yield sentence
        else:
            raise TypeError(
                f"documents_or_texts[{i}] must be a str or a list of str, got {type(item).__name__}"
            )


def _train_wordpiece(
    tok: Tokenizer,
    texts: list[str],
    vocab_size: int,
    min_frequency: int,
    continuations: list[str],
    alphabet: list[str],
) -> dict[str, int]:
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        # Listing every "##x" up front fixes their ids (see _continuation_tokens).
        special_tokens=list(SPECIAL_TOKENS) + continuations,
        initial_alphabet=alphabet,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok.get_vocab()


def _required_words(
    counts: Counter[str],
    whole_word_frequency: int | None,
    whole_words: Iterable[str],
    normalize: Callable[[str], str],
    pre_tokenize: Callable[[str], list],
) -> tuple[list[str], list[str]]:
    """(words asked for by name, frequent words most frequent first); a fixed order."""
    if isinstance(whole_words, str):
        raise TypeError("whole_words must be a list of words, not one str")
    named: list[str] = []
    for word in whole_words:
        if not isinstance(word, str):
            raise TypeError(f"whole_words must hold str, got {type(word).__name__}")
        pieces = [w for w, _ in pre_tokenize(normalize(word))]
        if len(pieces) != 1:
            raise ValueError(
                f"whole_words entry {word!r} is not one word for the pre-tokenizer: {pieces}"
            )
        if pieces[0] not in named:
            named.append(pieces[0])
    frequent: list[str] = []
    if whole_word_frequency is not None:
        frequent = sorted(
            (w for w, n in counts.items() if n >= whole_word_frequency and w not in named),
            key=lambda w: (-counts[w], w),
        )
    return named, frequent


def _with_whole_words(
    vocab: dict[str, int], named: list[str], frequent: list[str], vocab_size: int
) -> dict[str, int]:
    """Add the whole words missing from ``vocab``, making room by dropping the merges learned
    last (the least frequent pairs); characters and special tokens always stay, so every word
    can still be spelled. WordPiece matches the longest entry first, so an added word is then
    always one token. ``named`` words are all added; ``frequent`` ones while room is left
    (most frequent first). Returns exactly ``vocab_size`` contiguous ids (fewer only if the
    text is too small to fill it)."""
    protected = set(named) | set(frequent) | set(SPECIAL_TOKENS)
    ordered = sorted(vocab, key=lambda token: vocab[token])  # by id
    removable = [
        t for t in reversed(ordered) if len(t.removeprefix("##")) > 1 and t not in protected
    ]
    missing_named = [w for w in named if w not in vocab]
    missing_frequent = [w for w in frequent if w not in vocab]
    room = vocab_size - len(vocab) + len(removable)  # how many words can be added at most
    if len(missing_named) > room:
        raise ValueError(
            f"vocab_size={vocab_size} is too small to add the whole_words {missing_named}"
        )
    added = missing_named + missing_frequent[: room - len(missing_named)]
    if not added:
        return vocab
    drop = set(removable[: max(0, len(vocab) + len(added) - vocab_size)])
    tokens = [t for t in ordered if t not in drop] + added
    return {t: i for i, t in enumerate(tokens)}


def _continuation_tokens(counts: Counter[str], alphabet: list[str]) -> list[str]:
    """Every "##x" token training can create, sorted.

    ``WordPieceTrainer`` creates these continuation tokens lazily while iterating over a hash
    map of word counts, so their ids (which break ties between equally frequent merges) change
    from run to run and so can the vocabulary (huggingface/tokenizers#1794). Registering them
    all up front, in sorted order, makes training deterministic. Alphanumeric ASCII characters
    are always included, so any ASCII word can be spelled and is never [UNK].
    """
    chars = {c for c in alphabet if c.isalnum()}
    for word in counts:
        chars.update(word[1:])
    return ["##" + c for c in sorted(chars)]


def wrap_tokenizer(
    tokenizer: Tokenizer, *, model_max_length: int = DEFAULT_MAX_LENGTH
) -> BertTokenizer:
    """Wrap a ``tokenizers.Tokenizer`` (with the five BERT special tokens) for transformers."""
    missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise ValueError(
            f"tokenizer lacks the special tokens {missing}; BERT needs {list(SPECIAL_TOKENS)}"
        )
    from transformers import BertTokenizer

    return BertTokenizer(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )


def train_tokenizer(
    documents_or_texts: Corpus | str | Iterable[str] | Iterable[Iterable[str]],
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    min_frequency: int = 2,
    whole_word_frequency: int | None = 5,
    whole_words: Iterable[str] = (),
    lowercase: bool = True,
    model_max_length: int = DEFAULT_MAX_LENGTH,
) -> BertTokenizer:
    """Train a WordPiece tokenizer and return it as a transformers BERT tokenizer.

    Args:
        documents_or_texts: a :class:`~lmlessons.course.corpus.Corpus` (its *training* documents are
            used, so validation text stays unseen), one string, a list of strings or a list of
            documents (lists of sentence strings).
        vocab_size: the size of the vocabulary, special tokens and single characters included.
            Small (the default 2,500) keeps tiny models fast.
        min_frequency: a merge must occur at least this often to enter the vocabulary.
        whole_word_frequency: words seen at least this often become single tokens, most
            frequent first, as long as room is left in ``vocab_size`` (None: off).
            ``WordPieceTrainer`` learns its vocabulary with BPE merges (huggingface/tokenizers
            #570), which can leave frequent words in pieces; Google's WordPiece favoured whole
            words. Room is made by dropping the merges learned last.
        whole_words: words that must be single tokens however rare (the course's example
            words, e.g. ``"chased"``). Each must be one word for the pre-tokenizer.
        lowercase: lower-case and strip accents (``bert-base-uncased``).
        model_max_length: the longest sequence the tokenizer truncates to (``truncation=True``).

    The special tokens get ids 0-4 in the order ``[PAD] [UNK] [CLS] [SEP] [MASK]``; always read
    them from the tokenizer (``tokenizer.mask_token_id``) rather than assume them.
    """
    _check_sizes(vocab_size, min_frequency, model_max_length, whole_word_frequency)
    texts = [t for t in _iter_texts(documents_or_texts) if t.strip()]
    if not texts:
        raise ValueError("documents_or_texts holds no text to train on")
    tok = _bert_pipeline(lowercase)
    alphabet = _ASCII_ALPHABET if lowercase else sorted(set(string.printable.strip()))
    normalize, pre_tokenize = tok.normalizer.normalize_str, tok.pre_tokenizer.pre_tokenize_str
    counts: Counter[str] = Counter(w for t in texts for w, _ in pre_tokenize(normalize(t)))
    named, frequent = _required_words(
        counts, whole_word_frequency, whole_words, normalize, pre_tokenize
    )
    continuations = _continuation_tokens(counts, alphabet)
    vocab = _train_wordpiece(tok, texts, vocab_size, min_frequency, continuations, alphabet)
    spec = json.loads(tok.to_str())
    # The "##x" entries stay in the vocabulary as ordinary tokens, not as special tokens.
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SPECIAL_TOKENS]
    spec["model"]["vocab"] = _with_whole_words(vocab, named, frequent, vocab_size)
    tok = Tokenizer.from_str(json.dumps(spec))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return wrap_tokenizer(tok, model_max_length=model_max_length)


def _check_sizes(
    vocab_size: int, min_frequency: int, model_max_length: int, whole_word_frequency: int | None
) -> None:
    for name, value, minimum in (
        ("vocab_size", vocab_size, MIN_VOCAB_SIZE),
        ("min_frequency", min_frequency, 1),
        ("model_max_length", model_max_length, 2),
        ("whole_word_frequency", 1 if whole_word_frequency is None else whole_word_frequency, 1),
    ):
        check_int(name, value, minimum=minimum)


def _bert_pipeline(lowercase: bool) -> Tokenizer:
    """An untrained WordPiece tokenizer with BERT's normalizer, pre-tokenizer and decoder."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, lowercase=lowercase, strip_accents=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


@functools.lru_cache(maxsize=4)
def _tokenizer_json(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def clear_cache() -> None:
    """Forget the read ``tokenizer.json`` files: the next :func:`load_tokenizer` reads its file
    again (a cold load, as ``python -m tools.budgets`` measures it)."""
    _tokenizer_json.cache_clear()


def load_tokenizer(path: str | Path | None = None) -> BertTokenizer:
    """The course tokenizer (``lmlessons/data/tokenizer.json``), or one saved at ``path``.

    The file is read once per session (cached); every call returns a fresh tokenizer object, so
    changing one (e.g. ``model_max_length``) does not change the others.
    """
    path = TOKENIZER_FILE if path is None else Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer file at {str(path)!r}")
    return wrap_tokenizer(Tokenizer.from_str(_tokenizer_json(str(path.resolve()))))
