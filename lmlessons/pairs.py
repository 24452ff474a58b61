"""Sentence pairs for next-sentence prediction (NSP), as in Google BERT's
``create_pretraining_data.py`` (``create_instances_from_document``, ``truncate_seq_pair``).

Each example is ``[CLS] A [SEP] B [SEP]``. A is the first few sentences of a chunk of one
document; B is either the rest of the chunk (``next_sentence_label`` 0 = IsNext) or, with
probability ``nsp_probability``, text from a *different* document (1 = NotNext). Negatives from
another document matter: a "random token ids" negative is not language at all, and a classifier
can tell it apart without understanding anything.

Deliberate differences from Google's script, so that the label rate equals ``nsp_probability``
exactly: a chunk with a single sentence borrows the document's next sentence (Google forces a
negative there, which pushes the NotNext rate above 0.5), a lone last sentence of a document is
dropped, and the other document is drawn uniformly among the others (no 10 retries that can
end on the same document).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmlessons._checks import check_generator, check_int, check_probability


def _uniform(g: torch.Generator | None) -> float:
    return float(torch.rand((), generator=g))


def _randint(low: int, high: int, g: torch.Generator | None) -> int:
    """A random int in [low, high] (both inclusive, like Python's ``random.randint``)."""
    return int(torch.randint(low, high + 1, (), generator=g))


def truncate_seq_pair(
    tokens_a: Sequence[int],
    tokens_b: Sequence[int],
    max_num_tokens: int,
    *,
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[int]]:
    """Trim the pair to at most ``max_num_tokens`` tokens in total, one token at a time from the
    longer side, from its front or back at random (Google's ``truncate_seq_pair``; trimming both
    ends avoids a bias towards sentence starts). Returns new lists; the inputs are not modified.
    """
    max_num_tokens = check_int("max_num_tokens", max_num_tokens, minimum=2)
    generator = check_generator(generator)
    a, b = list(tokens_a), list(tokens_b)
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if _uniform(generator) < 0.5:
            del longer[0]
        else:
            longer.pop()
    return a, b


def _check_documents(documents: object) -> list[list[list[int]]]:
    if not isinstance(documents, Sequence) or isinstance(documents, (str, bytes)):
        raise TypeError(
            "documents must be a list of documents, each a list of sentences of token ids"
        )
    if len(documents) == 0:
        raise ValueError("documents must not be empty")
    out = []
    for d, doc in enumerate(documents):
        if not isinstance(doc, Sequence) or isinstance(doc, (str, bytes)):
            raise TypeError(
                f"documents[{d}] must be a list of sentences (lists of token ids), got {type(doc).__name__}"
            )
        if len(doc) == 0:
            raise ValueError(f"documents[{d}] is empty: every document needs at least one sentence")
        sents = []
        for s, sent in enumerate(doc):
            if isinstance(sent, torch.Tensor):
                sent = sent.tolist()
            if not isinstance(sent, Sequence) or isinstance(sent, (str, bytes)):
                raise TypeError(
                    f"documents[{d}][{s}] must be a list of token ids (tokenize first), got {type(sent).__name__}"
                )
            if len(sent) == 0:
                raise ValueError(f"documents[{d}][{s}] is an empty sentence")
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in sent):
                raise TypeError(f"documents[{d}][{s}] must hold int token ids")
            sents.append(list(sent))
        out.append(sents)
    return out


def _check_pair_args(
    cls_token_id: object, sep_token_id: object, pad_token_id: object, max_length: object
) -> tuple[dict[str, int], int]:
    """The special-token ids (by name) and ``max_length`` of a pair builder, checked."""
    ids = {
        name: check_int(name, value, minimum=0)
        for name, value in (
            ("cls_token_id", cls_token_id),
            ("sep_token_id", sep_token_id),
            ("pad_token_id", pad_token_id),
        )
    }
    max_length = check_int("max_length", max_length)
    if max_length < 5:
        raise ValueError(
            f"max_length must be >= 5 to fit [CLS] A [SEP] B [SEP] with one token each in A and B, got {max_length}"
        )
    return ids, max_length


def _target_length(max_num_tokens: int, short_seq_prob: float, g: torch.Generator | None) -> int:
    """A chunk's target length: ``max_num_tokens``, or with probability ``short_seq_prob`` a
    random shorter one (Google's ``short_seq_prob``)."""
    target_len = max_num_tokens
    if _uniform(g) < short_seq_prob:
        target_len = _randint(2, max_num_tokens, g)
    return target_len


def _shuffled(
    examples: list[tuple[list[int], list[int], int]], g: torch.Generator | None
) -> list[tuple[list[int], list[int], int]]:
    """The examples in a random order (Google shuffles instances too); none at all is an error."""
    if not examples:
        raise ValueError("documents produced no pairs: give documents with at least two sentences")
    order = torch.randperm(len(examples), generator=g).tolist()
    return [examples[k] for k in order]


def _pad_pairs(
    examples: list[tuple[list[int], list[int], int]], ids: dict[str, int], label_key: str
) -> dict[str, torch.Tensor]:
    """``(A, B, label)`` examples as ``[CLS] A [SEP] B [SEP]`` LongTensors padded with
    ``ids["pad_token_id"]`` to the longest: ``input_ids``, ``token_type_ids`` (1 for ``B [SEP]``),
    ``attention_mask`` ``(N, L)`` and the labels ``(N,)`` under ``label_key``."""
    width = max(len(a) + len(b) + 3 for a, b, _ in examples)
    n = len(examples)
    input_ids = torch.full((n, width), ids["pad_token_id"], dtype=torch.long)  # (N, L)
    token_type_ids = torch.zeros((n, width), dtype=torch.long)  # (N, L)
    attention_mask = torch.zeros((n, width), dtype=torch.long)  # (N, L)
    for row, (a, b, _) in enumerate(examples):
        seq = [ids["cls_token_id"], *a, ids["sep_token_id"], *b, ids["sep_token_id"]]
        input_ids[row, : len(seq)] = torch.tensor(seq)
        token_type_ids[row, len(a) + 2 : len(seq)] = 1
        attention_mask[row, : len(seq)] = 1
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        label_key: torch.tensor([lab for _, _, lab in examples], dtype=torch.long),  # (N,)
    }


def make_nsp_pairs(
    documents: Sequence[Sequence[Sequence[int]]],
    *,
    cls_token_id: int,
    sep_token_id: int,
    pad_token_id: int,
    max_length: int,
    nsp_probability: float = 0.5,
    short_seq_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Build NSP examples ``[CLS] A [SEP] B [SEP]`` from tokenized documents.

    Args:
        documents: a list of documents, each a list of sentences, each a list of token ids.
        cls_token_id, sep_token_id, pad_token_id: from the tokenizer (never hard-coded).
        max_length: the longest example, special tokens included (BERT: 128 or 512).
        nsp_probability: chance that B comes from another document (label 1 = NotNext).
        short_seq_prob: chance of a shorter target length (Google: 0.1), so the model also sees
            short sequences at pretraining time.
        generator: a ``torch.Generator``; the same seed gives the same pairs.

    Returns a dict of LongTensors, padded with ``pad_token_id`` to the longest example:
        ``input_ids`` ``(N, L)``, ``token_type_ids`` ``(N, L)`` (0 up to and including the first
        [SEP], 1 for B and its [SEP], 0 on padding), ``attention_mask`` ``(N, L)`` and
        ``next_sentence_label`` ``(N,)`` (0 = IsNext, 1 = NotNext, as in BERT and transformers).
    """
    docs = _check_documents(documents)
    ids, max_length = _check_pair_args(cls_token_id, sep_token_id, pad_token_id, max_length)
    nsp_probability = check_probability("nsp_probability", nsp_probability)
    short_seq_prob = check_probability("short_seq_prob", short_seq_prob)
    g = check_generator(generator)
    if nsp_probability > 0 and len(docs) < 2:
        raise ValueError(
            "documents must hold at least 2 documents to draw NotNext examples from another document"
        )

    max_num_tokens = max_length - 3  # room for [CLS], [SEP], [SEP]
    examples: list[tuple[list[int], list[int], int]] = []
    for doc_index, doc in enumerate(docs):
        target_len = _target_length(max_num_tokens, short_seq_prob, g)
        chunk: list[list[int]] = []
        chunk_len = 0
        i = 0
        while i < len(doc):
            chunk.append(doc[i])
            chunk_len += len(doc[i])
            if i == len(doc) - 1 or chunk_len >= target_len:
                if len(chunk) == 1:  # decided before the label draw, so the rate stays exact
                    if i + 1 < len(doc):  # borrow the next sentence so that B can follow A
                        i += 1
                        chunk.append(doc[i])
                    else:  # a lone last sentence cannot be a positive: drop it
                        chunk, chunk_len = [], 0
                        i += 1
                        continue
                is_random_next = _uniform(g) < nsp_probability
                a_end = _randint(
                    1, len(chunk) - 1, g
                )  # A = chunk[:a_end], at least one sentence each
                tokens_a = [t for s in chunk[:a_end] for t in s]
                if is_random_next:
                    other = _randint(0, len(docs) - 2, g)
                    other += other >= doc_index  # uniform over the *other* documents
                    random_doc = docs[other]
                    target_b_len = max(1, target_len - len(tokens_a))
                    tokens_b: list[int] = []
                    for j in range(_randint(0, len(random_doc) - 1, g), len(random_doc)):
                        tokens_b.extend(random_doc[j])
                        if len(tokens_b) >= target_b_len:
                            break
                    i -= len(chunk) - a_end  # put the unused sentences back
                else:
                    tokens_b = [t for s in chunk[a_end:] for t in s]
                tokens_a, tokens_b = truncate_seq_pair(
                    tokens_a, tokens_b, max_num_tokens, generator=g
                )
                examples.append((tokens_a, tokens_b, int(is_random_next)))
                chunk, chunk_len = [], 0
            i += 1

    return _pad_pairs(_shuffled(examples, g), ids, "next_sentence_label")
