"""Graded hints: level 1 nudges, level 2 names the tools, level 3 is nearly the solution."""

from __future__ import annotations

HINTS: dict[str, tuple[str, str, str]] = {
    "mask_tokens": (
        (
            "Work in three steps: (1) decide which positions are *selected*, (2) build the "
            "labels,\n"
            "(3) corrupt a copy of the input at the selected positions.\n"
            "\n"
            "Special tokens and padding must never be selected: `special_tokens_mask` is 1 there. "
            "Every random\n"
            "draw takes `generator=generator`."
        ),
        (
            "- Selection: a probability matrix `torch.full(input_ids.shape, mlm_probability)`, set "
            "to 0 where\n"
            "`special_tokens_mask.bool()` is True, then `torch.bernoulli(probs, "
            "generator=generator).bool()`.\n"
            "- Labels: `torch.where(selected, input_ids, -100)`.\n"
            "- Corruption: start from `input_ids.clone()`. A second Bernoulli draw with "
            "`mask_replace_prob` picks\n"
            "the [MASK] positions among the selected; a third one picks the random ones among the "
            "selected\n"
            "positions that were *not* masked."
        ),
        (
            "The random draw is conditional: among the selected positions not turned into [MASK], "
            "the\n"
            "share that becomes random is `random_replace_prob / (1 - mask_replace_prob)` (0.1 / "
            "0.2 = 0.5 at\n"
            "BERT's defaults), so that overall `random_replace_prob` of the selected are random.\n"
            "\n"
            "    to_mask = torch.bernoulli(torch.full(shape, mask_replace_prob), "
            "generator=generator).bool() & selected\n"
            "    masked[to_mask] = mask_token_id\n"
            "    p = random_replace_prob / (1 - mask_replace_prob)   # guard mask_replace_prob == "
            "1\n"
            "    to_random = torch.bernoulli(torch.full(shape, p), generator=generator).bool() & "
            "selected & ~to_mask\n"
            "    masked[to_random] = torch.randint(vocab_size, shape, "
            "generator=generator)[to_random]"
        ),
    ),
    "mlm_loss": (
        (
            "The loss is a cross-entropy over the positions that were masked, and only those: "
            "their\n"
            "label is a token id, every other label is -100.\n"
            "\n"
            "Think about the *denominator*: how many positions does the mean run over? And what "
            "should an empty\n"
            "batch (no label at all) give?"
        ),
        (
            "`F.cross_entropy` wants `(N, V)` scores and `(N,)` targets, and it skips targets "
            "equal to -100\n"
            "by itself (`ignore_index=-100`). Flatten with `logits.reshape(-1, logits.size(-1))` "
            "and\n"
            "`labels.reshape(-1)`.\n"
            "\n"
            '`reduction="mean"` divides by the number of non-ignored targets, which is 0 / 0 = '
            "NaN for an empty\n"
            'batch. Use `reduction="sum"` and divide yourself.'
        ),
        (
            "    total = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), "
            'reduction="sum")\n'
            "    if num_items_in_batch is not None:\n"
            "        return total / num_items_in_batch        # gradient accumulation\n"
            "    return total / (labels != -100).sum().clamp(min=1)   # 0, not NaN, when empty"
        ),
    ),
    "clm_loss": (
        (
            "The labels you receive are the input ids themselves (with -100 on padding). The "
            "logits at\n"
            "position t are the model's guess for the token at position t + 1. Which logits have "
            "no target,\n"
            "and which labels have no logits predicting them?"
        ),
        (
            "Shift inside the loss, exactly once: pair `logits[:, :-1]` with `labels[:, 1:]`. Do "
            "not shift\n"
            "the labels before calling the loss as well (that trains next-next-token prediction).\n"
            "\n"
            "Keep the -100 labels as they are: `F.cross_entropy` ignores them. Sum and divide by "
            "the count of\n"
            "targets *after* the shift (or by `num_items_in_batch`), so that padding never counts "
            "and an empty\n"
            "batch gives 0."
        ),
        (
            "    shift_logits = logits[:, :-1, :]           # (B, T-1, V)\n"
            "    shift_labels = labels[:, 1:]               # (B, T-1)\n"
            "    total = F.cross_entropy(shift_logits.reshape(-1, V), shift_labels.reshape(-1), "
            'reduction="sum")\n'
            "    if num_items_in_batch is not None:\n"
            "        return total / num_items_in_batch\n"
            "    return total / (shift_labels != -100).sum().clamp(min=1)"
        ),
    ),
    "make_nsp_pairs": (
        (
            "Each example is `[CLS] A [SEP] B [SEP]`. A is consecutive text from one document. B "
            "is either\n"
            "the text that follows A in the *same* document (label 0, IsNext) or, with "
            "probability\n"
            "`nsp_probability`, text from a *different* document (label 1, NotNext). Never random "
            "token ids.\n"
            "\n"
            "Take the special ids from the arguments."
        ),
        (
            "- Walk over each document's sentence boundaries; A = the sentence(s) before a "
            "boundary.\n"
            "- Draw `torch.rand((), generator=generator) < nsp_probability` to decide NotNext; "
            "pick the other\n"
            "document with `torch.randint(...)` over the *other* documents only.\n"
            "- Trim pairs longer than `max_length - 3` tokens, one token at a time from the longer "
            "segment.\n"
            "- Segment ids: 0 for [CLS], A and the first [SEP]; 1 for B and the final [SEP]; 0 on "
            "padding.\n"
            "- Pad every row to the longest one with `pad_token_id`; the attention mask is 1 on "
            "real tokens."
        ),
        (
            "    for d, doc in enumerate(documents):\n"
            "        for split in range(1, len(doc)):\n"
            "            a = [t for s in doc[max(0, split - 2):split] for t in s]\n"
            "            if torch.rand((), generator=generator) < nsp_probability:\n"
            "                other = int(torch.randint(len(documents) - 1, (), "
            "generator=generator))\n"
            "                other += other >= d                       # skip A's own document\n"
            "                start = int(torch.randint(len(documents[other]), (), "
            "generator=generator))\n"
            "                b, label = [t for s in documents[other][start:start + 2] for t in s], "
            "1\n"
            "            else:\n"
            "                b, label = [t for s in doc[split:split + 2] for t in s], 0\n"
            "            ...  # trim, then build [CLS] a [SEP] b [SEP] and token types "
            "[0]*(len(a)+2) + [1]*(len(b)+1)"
        ),
    ),
    "bert_pretraining_loss": (
        (
            "BERT's pretraining loss is a *sum* of two losses: the MLM loss over masked tokens and "
            "the NSP\n"
            "classification loss over sequences, each multiplied by its weight."
        ),
        (
            "- MLM part: exactly your `mlm_loss` (mean over positions whose label is not -100, 0 "
            "when there\n"
            "are none).\n"
            "- NSP part: `F.cross_entropy(nsp_logits, nsp_labels)` with `(B, 2)` scores; label 0 = "
            "IsNext,\n"
            "1 = NotNext (BERT's and transformers' convention).\n"
            "- Total: `mlm_weight * mlm + nsp_weight * nsp`. Not an average, not normalised by the "
            "weights."
        ),
        (
            "    total = F.cross_entropy(mlm_logits.reshape(-1, V), mlm_labels.reshape(-1), "
            'reduction="sum")\n'
            "    mlm = total / (mlm_labels != -100).sum().clamp(min=1)\n"
            "    nsp = F.cross_entropy(nsp_logits, nsp_labels)\n"
            "    return mlm_weight * mlm + nsp_weight * nsp"
        ),
    ),
    "select_whole_words": (
        (
            "Work in three steps for each row: (1) group the positions into *words*, (2) compute "
            "the row's\n"
            "count of pieces to predict, (3) visit the words in random order and take a word "
            "whole if it\n"
            "still fits in the count. Special tokens and padding belong to no word."
        ),
        (
            "- Eligible positions: `~special_tokens_mask.bool()`, and `attention_mask.bool()` "
            "when it is given.\n"
            "- A word starts at an eligible position that is not a `##` piece "
            "(`is_continuation`); a `##`\n"
            "piece joins the word of the eligible position just before it.\n"
            "- The count is in pieces: `min(max_predictions_per_seq, max(1, round(length * "
            "mlm_probability)))`,\n"
            "where `length = attention_mask[row].sum()` counts [CLS] and [SEP] (0 when "
            "`mlm_probability` is 0).\n"
            "- The random order: `torch.randperm(len(words), generator=generator)`."
        ),
        (
            "    taken = 0\n"
            "    for w in torch.randperm(len(words), generator=generator).tolist():\n"
            "        if taken + len(words[w]) <= count:     # a word that does not fit is "
            "skipped,\n"
            "            selected[row, words[w]] = True     # and the next ones are still "
            "tried\n"
            "            taken += len(words[w])"
        ),
    ),
    "truncate_seq_pair": (
        (
            "Remove one token at a time until the pair fits. Which side loses it? The one that "
            "is longer\n"
            "*at that moment*. Which end? Front or back at random, drawn anew for every token. "
            "Do not\n"
            "change the caller's lists."
        ),
        (
            "- Work on copies: `a, b = list(tokens_a), list(tokens_b)`.\n"
            "- Loop `while len(a) + len(b) > max_num_tokens:` and pick `longer = a if len(a) > "
            "len(b) else b`.\n"
            "- One draw per removed token: `torch.rand((), generator=generator) < 0.5` -> "
            "`del longer[0]`,\n"
            "otherwise `longer.pop()`. Return `a, b`."
        ),
        (
            "    a, b = list(tokens_a), list(tokens_b)\n"
            "    while len(a) + len(b) > max_num_tokens:\n"
            "        longer = a if len(a) > len(b) else b\n"
            "        if torch.rand((), generator=generator) < 0.5:\n"
            "            del longer[0]\n"
            "        else:\n"
            "            longer.pop()\n"
            "    return a, b"
        ),
    ),
    "rank_loss": (
        (
            "DDP averages the ranks' gradients. Ask: what must each rank return so that the "
            "*average* of\n"
            "the ranks' losses is the loss of the whole batch, the mean over every target "
            "token of every\n"
            "rank? The numerator is local; the denominator is not."
        ),
        (
            "- Shift as in `clm_loss` (`logits[:, :-1]` against `labels[:, 1:]`) and take the "
            "*sum* of the\n"
            'per-token losses (`reduction="sum"`).\n'
            "- The count of targets after the shift is a tensor: `(labels[:, 1:] != "
            "-100).sum()`; `all_reduce`\n"
            "of it gives the count on all ranks. Every rank calls it, even one with 0 targets.\n"
            "- Divide by that global count, then multiply by `world_size` to undo DDP's average."
        ),
        (
            "    total = F.cross_entropy(logits[:, :-1].reshape(-1, V), "
            'labels[:, 1:].reshape(-1), reduction="sum")\n'
            "    count = all_reduce((labels[:, 1:] != -100).sum())   # targets on all ranks\n"
            "    return world_size * total / count.clamp(min=1)"
        ),
    ),
    "chunked_cross_entropy": (
        (
            "The full logits are `hidden @ weight.T`, (N, V). Never build them: loop over the "
            "rows,\n"
            "`chunk_size` at a time, and compute each chunk's logits and loss inside the loop. "
            "Think about\n"
            "how the chunks' losses combine into one mean, and about what autograd keeps of each "
            "chunk\n"
            "for the backward pass."
        ),
        (
            "- `for start in range(0, N, chunk_size):` and slice `[start:start + chunk_size]` "
            "(the last chunk\n"
            "may be shorter).\n"
            '- Per chunk: `F.cross_entropy(chunk_logits, chunk_labels, reduction="sum")`: a '
            "*sum*, which is 0\n"
            "for a chunk whose labels are all -100 (a mean would be NaN there).\n"
            "- After the loop, divide once: by `num_items_in_batch` if given, else by "
            "`(labels != -100).sum()`\n"
            "(at least 1).\n"
            "- Plain autograd saves every chunk's (C, V) softmax for backward: N x V again. Put "
            "each chunk's\n"
            "sum in a `torch.autograd.Function` that saves only its inputs and recomputes the "
            "logits in\n"
            "`backward`, where d(sum of CE)/d(logits) = softmax - one_hot(labels) (0 on rows "
            "labelled -100)."
        ),
        (
            "    class ChunkSum(torch.autograd.Function):\n"
            "        @staticmethod\n"
            "        def forward(ctx, h, w, y):\n"
            "            ctx.save_for_backward(h, w, y)                     # inputs only\n"
            '            return F.cross_entropy(h @ w.T, y, reduction="sum")\n'
            "\n"
            "        @staticmethod\n"
            "        def backward(ctx, grad_sum):\n"
            "            h, w, y = ctx.saved_tensors\n"
            "            probs = torch.softmax(h @ w.T, dim=-1)             # (C, V) recomputed\n"
            "            rows = torch.arange(len(y))[y != -100]\n"
            "            probs[rows, y[rows]] -= 1                          # softmax - one_hot\n"
            "            probs[y == -100] = 0\n"
            "            g = grad_sum * probs\n"
            "            return g @ w, g.T @ h, None\n"
            "\n"
            "    total = hidden.new_zeros(())\n"
            "    for start in range(0, hidden.shape[0], chunk_size):\n"
            "        chunk = slice(start, start + chunk_size)\n"
            "        total = total + ChunkSum.apply(hidden[chunk], weight, labels[chunk])\n"
            "    if num_items_in_batch is not None:\n"
            "        return total / num_items_in_batch\n"
            "    return total / (labels != -100).sum().clamp(min=1)"
        ),
    ),
}
