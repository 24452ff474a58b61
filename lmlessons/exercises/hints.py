"""Graded hints: level 1 nudges, level 2 names the tools, level 3 is nearly the solution."""

from __future__ import annotations

HINTS: dict[str, tuple[str, str, str]] = {
    "mask_tokens": (
        """Work in three steps: (1) decide which positions are *selected*, (2) build the labels,
(3) corrupt a copy of the input at the selected positions.

Special tokens and padding must never be selected: `special_tokens_mask` is 1 there. Every random
draw takes `generator=generator`.""",
        """- Selection: a probability matrix `torch.full(input_ids.shape, mlm_probability)`, set to 0 where
`special_tokens_mask.bool()` is True, then `torch.bernoulli(probs, generator=generator).bool()`.
- Labels: `torch.where(selected, input_ids, -100)`.
- Corruption: start from `input_ids.clone()`. A second Bernoulli draw with `mask_replace_prob` picks
the [MASK] positions among the selected; a third one picks the random ones among the selected
positions that were *not* masked.""",
        """The random draw is conditional: among the selected positions not turned into [MASK], the
share that becomes random is `random_replace_prob / (1 - mask_replace_prob)` (0.1 / 0.2 = 0.5 at
BERT's defaults), so that overall `random_replace_prob` of the selected are random.

    to_mask = torch.bernoulli(torch.full(shape, mask_replace_prob), generator=generator).bool() & selected
    masked[to_mask] = mask_token_id
    p = random_replace_prob / (1 - mask_replace_prob)   # guard mask_replace_prob == 1
    to_random = torch.bernoulli(torch.full(shape, p), generator=generator).bool() & selected & ~to_mask
    masked[to_random] = torch.randint(vocab_size, shape, generator=generator)[to_random]""",
    ),
    "mlm_loss": (
        """The loss is a cross-entropy over the positions that were masked, and only those: their
label is a token id, every other label is -100.

Think about the *denominator*: how many positions does the mean run over? And what should an empty
batch (no label at all) give?""",
        """`F.cross_entropy` wants `(N, V)` scores and `(N,)` targets, and it skips targets equal to -100
by itself (`ignore_index=-100`). Flatten with `logits.reshape(-1, logits.size(-1))` and
`labels.reshape(-1)`.

`reduction="mean"` divides by the number of non-ignored targets, which is 0 / 0 = NaN for an empty
batch. Use `reduction="sum"` and divide yourself.""",
        """    total = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="sum")
    if num_items_in_batch is not None:
        return total / num_items_in_batch        # gradient accumulation
    return total / (labels != -100).sum().clamp(min=1)   # 0, not NaN, when empty""",
    ),
    "clm_loss": (
        """The labels you receive are the input ids themselves (with -100 on padding). The logits at
position t are the model's guess for the token at position t + 1. Which logits have no target,
and which labels have no logits predicting them?""",
        """Shift inside the loss, exactly once: pair `logits[:, :-1]` with `labels[:, 1:]`. Do not shift
the labels before calling the loss as well (that trains next-next-token prediction).

Keep the -100 labels as they are: `F.cross_entropy` ignores them. Sum and divide by the count of
targets *after* the shift (or by `num_items_in_batch`), so that padding never counts and an empty
batch gives 0.""",
        """    shift_logits = logits[:, :-1, :]           # (B, T-1, V)
    shift_labels = labels[:, 1:]               # (B, T-1)
    total = F.cross_entropy(shift_logits.reshape(-1, V), shift_labels.reshape(-1), reduction="sum")
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (shift_labels != -100).sum().clamp(min=1)""",
    ),
    "make_nsp_pairs": (
        """Each example is `[CLS] A [SEP] B [SEP]`. A is consecutive text from one document. B is either
the text that follows A in the *same* document (label 0, IsNext) or, with probability
`nsp_probability`, text from a *different* document (label 1, NotNext). Never random token ids.

Take the special ids from the arguments.""",
        """- Walk over each document's sentence boundaries; A = the sentence(s) before a boundary.
- Draw `torch.rand((), generator=generator) < nsp_probability` to decide NotNext; pick the other
document with `torch.randint(...)` over the *other* documents only.
- Trim pairs longer than `max_length - 3` tokens, one token at a time from the longer segment.
- Segment ids: 0 for [CLS], A and the first [SEP]; 1 for B and the final [SEP]; 0 on padding.
- Pad every row to the longest one with `pad_token_id`; the attention mask is 1 on real tokens.""",
        """    for d, doc in enumerate(documents):
        for split in range(1, len(doc)):
            a = [t for s in doc[max(0, split - 2):split] for t in s]
            if torch.rand((), generator=generator) < nsp_probability:
                other = int(torch.randint(len(documents) - 1, (), generator=generator))
                other += other >= d                       # skip A's own document
                start = int(torch.randint(len(documents[other]), (), generator=generator))
                b, label = [t for s in documents[other][start:start + 2] for t in s], 1
            else:
                b, label = [t for s in doc[split:split + 2] for t in s], 0
            ...  # trim, then build [CLS] a [SEP] b [SEP] and token types [0]*(len(a)+2) + [1]*(len(b)+1)""",
    ),
    "bert_pretraining_loss": (
        """BERT's pretraining loss is a *sum* of two losses: the MLM loss over masked tokens and the NSP
classification loss over sequences, each multiplied by its weight.""",
        """- MLM part: exactly your `mlm_loss` (mean over positions whose label is not -100, 0 when there
are none).
- NSP part: `F.cross_entropy(nsp_logits, nsp_labels)` with `(B, 2)` scores; label 0 = IsNext,
1 = NotNext (BERT's and transformers' convention).
- Total: `mlm_weight * mlm + nsp_weight * nsp`. Not an average, not normalised by the weights.""",
        """    total = F.cross_entropy(mlm_logits.reshape(-1, V), mlm_labels.reshape(-1), reduction="sum")
    mlm = total / (mlm_labels != -100).sum().clamp(min=1)
    nsp = F.cross_entropy(nsp_logits, nsp_labels)
    return mlm_weight * mlm + nsp_weight * nsp""",
    ),
}
