"""Hidden test cases: small synthetic vocabularies and batches, built from seeded generators.

Special ids are chosen per case from a seeded permutation and never take the values popular
tokenizers use ({0, 1, 2, 3, 100, 101, 102, 103}), so a learner who hard-codes [CLS]=101 or
[PAD]=0 is caught. Everything here is deterministic: same seed, same case.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmlessons._checks import IGNORE_INDEX

#: Ids that popular tokenizers give their special tokens: 100-103 ([UNK], [CLS], [SEP], [MASK])
#: and 0 ([PAD]) in BERT's vocabulary; 0-3 in many small WordPiece and BPE vocabularies (the
#: course's own tokenizer among them), which number their special tokens first.
POPULAR_SPECIAL_IDS = frozenset({0, 1, 2, 3, 100, 101, 102, 103})


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
            doc, pos = [], 0
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
        return (
            f"{len(self.documents)} documents ({n_sent} sentences) with [CLS]={self.cls}, "
            f"[SEP]={self.sep}, [PAD]={self.pad}"
        )
