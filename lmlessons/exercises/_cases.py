"""Hidden test cases: small synthetic vocabularies and batches, built from seeded generators.

Special ids are chosen per case from a seeded permutation and never take the values popular
tokenizers use ({0, 1, 2, 3, 100, 101, 102, 103}), so a learner who hard-codes [CLS]=101 or
[PAD]=0 is caught. Everything here is deterministic: same seed, same case.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lmlessons._checks import IGNORE_INDEX

#: Ids that popular tokenizers give their special tokens: 100-103 ([UNK], [CLS], [SEP], [MASK])
#: and 0 ([PAD]) in BERT's vocabulary; 0-3 in many small WordPiece and BPE vocabularies (the
#: course's own tokenizer among them), which number their special tokens first.
POPULAR_SPECIAL_IDS = frozenset({0, 1, 2, 3, 100, 101, 102, 103})

#: In a case table, a value drawn from the case's seeded generator rather than written.
DRAWN = "drawn"


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def pick_special_ids(seed: int, size: int, count: int) -> list[int]:
    """``count`` distinct ids in [4, size) avoiding the popular special ids."""
    candidates = [i for i in range(size) if i not in POPULAR_SPECIAL_IDS]
    order = torch.randperm(len(candidates), generator=gen(seed))[:count].tolist()
    return [candidates[i] for i in order]


@dataclass(frozen=True)
class Vocab:
    size: int
    pad: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def make(cls, seed: int, size: int) -> Vocab:
        pad, cls_id, sep, mask = pick_special_ids(seed, size, 4)
        return cls(size=size, pad=pad, cls=cls_id, sep=sep, mask=mask)

    def normal_ids(self) -> torch.Tensor:
        special = {self.pad, self.cls, self.sep, self.mask}
        return torch.tensor([i for i in range(self.size) if i not in special])

    def name(self, token_id: int) -> str:
        return {self.pad: "[PAD]", self.cls: "[CLS]", self.sep: "[SEP]", self.mask: "[MASK]"}.get(
            int(token_id), f"id {int(token_id)}"
        )

    def describe(self) -> str:
        return (
            f"a vocabulary of {self.size} ids with [CLS]={self.cls}, [SEP]={self.sep}, "
            f"[PAD]={self.pad}, [MASK]={self.mask}"
        )


def mlm_batch(
    vocab: Vocab, *, batch: int, length: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLS] tokens [SEP] [PAD]...`` rows of varied length and their special-tokens mask.

    The mask is 0/1 ``torch.long``, as tokenizers return it (``return_special_tokens_mask=True``).
    """
    g = gen(seed)
    normal = vocab.normal_ids()
    ids = normal[torch.randint(len(normal), (batch, length), generator=g)]  # (B, T)
    lengths = torch.randint(max(3, length // 2), length + 1, (batch,), generator=g)
    lengths[0] = length  # one full row without padding
    for b, n in enumerate(lengths.tolist()):
        ids[b, 0] = vocab.cls
        ids[b, n - 1] = vocab.sep
        ids[b, n:] = vocab.pad
    special = ((ids == vocab.cls) | (ids == vocab.sep) | (ids == vocab.pad)).long()  # (B, T)
    return ids, special


def scattered_batch(g: torch.Generator, i: int) -> tuple[Vocab, torch.Tensor, torch.Tensor]:
    """Generated masking case ``i``: a vocabulary of 8 to 39 ids and a ``(B, T)`` batch (1 x 1
    for ``i == 0``, else up to 6 x 6) of ordinary ids, a fifth of them id 0 (an ordinary token
    here), with special positions anywhere ([PAD] there; ``special``, bool) and sometimes row 0
    all special."""
    vocab = Vocab.make(seed=300 + i, size=int(torch.randint(8, 40, (), generator=g)))
    shape = (1, 1) if i == 0 else tuple(int(x) for x in torch.randint(1, 7, (2,), generator=g))
    normal = vocab.normal_ids()
    ids = normal[torch.randint(len(normal), shape, generator=g)]  # (B, T)
    ids[torch.rand(shape, generator=g) < 0.2] = 0
    special = torch.rand(shape, generator=g) < 0.3  # (B, T)
    special[0] |= bool(torch.rand((), generator=g) < 0.2)
    return vocab, ids.masked_fill(special, vocab.pad), special


def vocab_batch(seed: int, size: int, batch: int, length: int) -> tuple[Vocab, Tensor, Tensor]:
    """A vocabulary of ``size`` ids (seeded ``seed``) and an :func:`mlm_batch` in it."""
    vocab = Vocab.make(seed=seed, size=size)
    return vocab, *mlm_batch(vocab, batch=batch, length=length, seed=seed + 1)


def random_logits(seed: int, shape: tuple[int, ...], scale: float = 1.5) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed)) * scale


def mlm_labels(
    seed: int, batch: int, length: int, vocab_size: int, per_row: list[int]
) -> torch.Tensor:
    """-100 everywhere except ``per_row[b]`` random positions of row b, which get random ids."""
    g = gen(seed)
    labels = torch.full((batch, length), IGNORE_INDEX, dtype=torch.long)
    for b, k in enumerate(per_row):
        pos = torch.randperm(length, generator=g)[:k]
        labels[b, pos] = torch.randint(vocab_size, (k,), generator=g)
    return labels


def clm_labels(
    seed: int, vocab_size: int, lengths: list[int], length: int, prompt: dict[int, int]
) -> torch.Tensor:
    """``input_ids.clone()`` with -100 on right padding (row b has ``lengths[b]`` tokens) and on
    the first ``prompt[b]`` positions of some rows (a prompt that is not learned)."""
    g = gen(seed)
    labels = torch.randint(vocab_size, (len(lengths), length), generator=g)
    for b, n in enumerate(lengths):
        labels[b, n:] = IGNORE_INDEX
        labels[b, : prompt.get(b, 0)] = IGNORE_INDEX
    return labels


@dataclass(frozen=True)
class Corpus:
    """Documents of sentences of *unique* token ids, so every token tells where it came from."""

    documents: list[list[list[int]]]
    where: dict[int, tuple[int, int]]  # token id -> (document, position in its token stream)
    cls: int
    sep: int
    pad: int

    @classmethod
    def make(
        cls,
        seed: int,
        *,
        n_docs: int,
        sentences: tuple[int, int],
        tokens: tuple[int, int],
        vocab_size: int = 5000,
    ) -> Corpus:
        g = gen(seed)
        cls_id, sep, pad = pick_special_ids(seed + 1, vocab_size, 3)
        pool = [
            i
            for i in torch.randperm(vocab_size, generator=g).tolist()
            if i not in POPULAR_SPECIAL_IDS
        ]
        pool = [i for i in pool if i not in (cls_id, sep, pad)]
        documents: list[list[list[int]]] = []
        where: dict[int, tuple[int, int]] = {}
        k = 0
        for d in range(n_docs):
            n_sent = int(torch.randint(sentences[0], sentences[1] + 1, (), generator=g))
            doc = []
            pos = 0
            for _ in range(n_sent):
                n_tok = int(torch.randint(tokens[0], tokens[1] + 1, (), generator=g))
                sentence = pool[k : k + n_tok]
                k += n_tok
                for t in sentence:
                    where[t] = (d, pos)
                    pos += 1
                doc.append(sentence)
            documents.append(doc)
        if k > len(pool):  # pragma: no cover - a case-design error, not a learner's
            raise RuntimeError("corpus needs a larger vocabulary")
        return cls(documents=documents, where=where, cls=cls_id, sep=sep, pad=pad)

    def describe(self) -> str:
        n_sent = sum(len(d) for d in self.documents)
        single = sum(len(d) == 1 for d in self.documents)
        n_sent_text = f"{n_sent} sentences" + (f"; {single} of one sentence" if single else "")
        return (
            f"{len(self.documents)} documents ({n_sent_text}) with [CLS]={self.cls}, "
            f"[SEP]={self.sep}, [PAD]={self.pad}"
        )


#: A row of :func:`word_batch`: the word lengths (in pieces) of each segment, and the number of
#: [PAD] after it. A negative length is a word whose first piece is a ``##`` piece too (right
#: after [CLS] or [SEP]: a word of its own, see :func:`lmlessons.masking_variants.word_ids`).
RowSpec = tuple[tuple[tuple[int, ...], ...], int]


@dataclass(frozen=True)
class WordBatch:
    special: torch.Tensor  # (B, T) long 0/1, as tokenizers return it
    cont: torch.Tensor  # (B, T) bool, True at "##" pieces
    attn: torch.Tensor  # (B, T) long 0/1
    words: list[list[list[int]]]  # words[b][w]: the positions of word w of row b


def word_batch(rows: list[RowSpec], *, pad_is_special: bool = True) -> WordBatch:
    """``[CLS] words [SEP] words [SEP] [PAD]...`` rows from their word lengths."""
    lengths = [1 + sum(sum(abs(n) for n in seg) + 1 for seg in segs) for segs, _ in rows]
    width = max(n + pad for n, (_, pad) in zip(lengths, rows))
    special = []
    cont = []
    words = []
    for (segs, _), length in zip(rows, lengths):
        row_special = [1] + [0] * (length - 2) + [1] + [int(pad_is_special)] * (width - length)
        row_cont = [False] * width
        row_words = []
        t = 1  # position 0 is [CLS]
        for seg in segs:
            for n in seg:
                pieces = list(range(t, t + abs(n)))
                row_words.append(pieces)
                # a word's first piece starts it, unless it is a `##` piece too (n < 0)
                for position in pieces if n < 0 else pieces[1:]:
                    row_cont[position] = True
                t += abs(n)
            row_special[t] = 1  # [SEP]
            t += 1
        special.append(row_special)
        cont.append(row_cont)
        words.append(row_words)
    attn = [[1] * n + [0] * (width - n) for n in lengths]
    return WordBatch(torch.tensor(special), torch.tensor(cont), torch.tensor(attn), words)


def random_word_rows(g: torch.Generator, n: int) -> list[RowSpec]:
    """``n`` rows of one or two segments of 0 to 5 words of 1 to 3 pieces (a third of the
    segments start with a ``##`` piece), then 0 to 3 [PAD]."""

    def draw(low: int, high: int, size: int = 1) -> list[int]:
        return torch.randint(low, high + 1, (size,), generator=g).tolist()

    rows: list[RowSpec] = []
    for _ in range(n):
        segs = []
        for _ in range(draw(1, 2)[0]):
            seg = draw(1, 3, draw(0, 5)[0])
            if seg and draw(0, 2)[0] == 0:
                seg[0] = -seg[0]
            segs.append(tuple(seg))
        rows.append((tuple(segs), draw(0, 3)[0]))
    return rows
