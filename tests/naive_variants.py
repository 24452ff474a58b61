"""Wrong (and a few right) implementations of the exercises, as test fixtures for the checkers.

All of them are written for this course, in the exercises' signatures. Each naive variant has
exactly the defect its name says, except the ``*_draft_*`` ones: naive first drafts of each
function, as a learner might write them before the lesson, with several defects at once (the
global random generator, hard-coded special ids, fixed 80/10/10 thresholds, a boolean mask
instead of -100 labels, a ``(loss, info)`` tuple returned, sentence pairs across document
boundaries, random ids as NotNext segments, ...). ``EXPECTED[name]`` is the mistake code the
checker must report (for a draft, the first defect its hidden cases meet). ``VALID`` lists
correct implementations that differ from the package's, which the checkers must accept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmlessons import shift_labels

IGNORE = -100

# ----------------------------------------------------------------------------- mask_tokens


def _select(input_ids, special_tokens_mask, p, generator, *, exclude_special=True):
    probs = torch.full(input_ids.shape, p)
    if exclude_special and special_tokens_mask is not None:
        probs[special_tokens_mask.bool()] = 0.0
    return torch.bernoulli(probs, generator=generator).bool()


def _corrupt(
    input_ids, selected, mask_token_id, vocab_size, p_mask, p_random, generator, *, conditional=True
):
    masked = input_ids.clone()
    to_mask = (
        torch.bernoulli(torch.full(input_ids.shape, p_mask), generator=generator).bool() & selected
    )
    masked[to_mask] = mask_token_id
    p = (p_random / (1 - p_mask) if p_mask < 1 else 0.0) if conditional else p_random
    to_random = (
        torch.bernoulli(torch.full(input_ids.shape, p), generator=generator).bool()
        & selected
        & ~to_mask
    )
    masked[to_random] = torch.randint(vocab_size, input_ids.shape, generator=generator)[to_random]
    return masked


def mask_draft_as_written(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """A first draft: global RNG, specials not excluded, fixed 80/10/10 thresholds (its
    probability arguments unused), and a boolean mask returned instead of labels."""
    u = torch.rand(input_ids.shape)
    chosen = u < mlm_probability
    out = input_ids.clone()
    how = torch.rand(input_ids.shape)
    out[chosen & (how < 0.8)] = mask_token_id
    rnd = chosen & (how >= 0.8) & (how < 0.9)
    out[rnd] = torch.randint(0, vocab_size, input_ids.shape)[rnd]
    return out, chosen


def mask_draft_with_labels(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """The first draft with -100 labels bolted on: still masks specials, ignores the replace
    probabilities and the generator."""
    out, chosen = mask_draft_as_written(
        input_ids,
        mask_token_id=mask_token_id,
        vocab_size=vocab_size,
        mlm_probability=mlm_probability,
    )
    return out, torch.where(chosen, input_ids, IGNORE)


def mask_specials(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(
        input_ids, special_tokens_mask, mlm_probability, generator, exclude_special=False
    )
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_hard_coded_ids(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    """Excludes BERT's [PAD]=0, [CLS]=101, [SEP]=102 by value instead of using the mask."""
    probs = torch.full(input_ids.shape, mlm_probability)
    probs[(input_ids == 0) | (input_ids == 101) | (input_ids == 102)] = 0.0
    selected = torch.bernoulli(probs, generator=generator).bool()
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_fixed_replace_probs(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _corrupt(input_ids, selected, mask_token_id, vocab_size, 0.8, 0.1, generator)
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_fixed_mlm_probability(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, 0.15, generator)
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_labels_copy(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, input_ids.clone()


def mask_labels_zero(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, input_ids * selected


def mask_labels_corrupted(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, torch.where(selected, masked, IGNORE)


def mask_in_place(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    labels = torch.where(selected, input_ids, IGNORE)
    to_mask = (
        torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob), generator=generator).bool()
        & selected
    )
    input_ids[to_mask] = mask_token_id  # writes into the caller's tensor
    return input_ids, labels


def mask_global_rng(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, None)
    masked = _corrupt(
        input_ids, selected, mask_token_id, vocab_size, mask_replace_prob, random_replace_prob, None
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_own_generator(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    g = torch.Generator().manual_seed(1234)  # ignores the argument
    selected = _select(input_ids, special_tokens_mask, mlm_probability, g)
    masked = _corrupt(
        input_ids, selected, mask_token_id, vocab_size, mask_replace_prob, random_replace_prob, g
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_random_unconditional(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
        conditional=False,
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_tilde_on_long(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    probs = torch.full(input_ids.shape, mlm_probability)
    probs = probs.masked_fill(~special_tokens_mask, 0.0)  # ~ on a 0/1 long tensor, not a bool one
    selected = torch.bernoulli(probs, generator=generator).bool()
    return input_ids.clone(), torch.where(selected, input_ids, IGNORE)


def mask_none_crashes(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    probs = torch.full(input_ids.shape, mlm_probability)
    probs[special_tokens_mask.bool()] = 0.0  # fails for the default special_tokens_mask=None
    selected = torch.bernoulli(probs, generator=generator).bool()
    masked = _corrupt(
        input_ids,
        selected,
        mask_token_id,
        vocab_size,
        mask_replace_prob,
        random_replace_prob,
        generator,
    )
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_unguarded_division(
    input_ids,
    *,
    mask_token_id,
    vocab_size,
    special_tokens_mask=None,
    mlm_probability=0.15,
    mask_replace_prob=0.8,
    random_replace_prob=0.1,
    generator=None,
):
    selected = _select(input_ids, special_tokens_mask, mlm_probability, generator)
    masked = input_ids.clone()
    to_mask = (
        torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob), generator=generator).bool()
        & selected
    )
    masked[to_mask] = mask_token_id
    p = random_replace_prob / (1 - mask_replace_prob)  # ZeroDivisionError at mask_replace_prob=1
    to_random = (
        torch.bernoulli(torch.full(input_ids.shape, p), generator=generator).bool()
        & selected
        & ~to_mask
    )
    masked[to_random] = torch.randint(vocab_size, input_ids.shape, generator=generator)[to_random]
    return masked, torch.where(selected, input_ids, IGNORE)


def mask_int32(input_ids, **kwargs):
    masked, labels = mask_specials(input_ids, **kwargs)
    return masked.int(), labels.int()


def mask_single_tensor(input_ids, **kwargs):
    return mask_specials(input_ids, **kwargs)[0]


# ----------------------------------------------------------------------------- mlm_loss


def _flat(logits, labels):
    return logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)


def mlm_draft_as_written(logits, labels, *, num_items_in_batch=None):
    """A first draft: selects the masked rows, mean cross-entropy, returns (loss, info)."""
    x, y = _flat(logits, labels)
    keep = y != IGNORE
    loss = F.cross_entropy(x[keep], y[keep])
    return loss, {"loss": loss.item(), "num_masked": int(keep.sum())}


def mlm_draft_loss_only(logits, labels, *, num_items_in_batch=None):
    """The first draft returning just the loss: NaN when nothing is masked."""
    return mlm_draft_as_written(logits, labels)[0]


def mlm_counts_unmasked(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    return F.cross_entropy(x, y, reduction="sum") / y.numel()


def mlm_clamped_labels(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    return F.cross_entropy(x, y.clamp(min=0))


def mlm_per_row_mean(logits, labels, *, num_items_in_batch=None):
    rows = [F.cross_entropy(lg, lb) for lg, lb in zip(logits, labels) if (lb != IGNORE).any()]
    return torch.stack(rows).mean()


def mlm_sum(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    return F.cross_entropy(x, y, reduction="sum")


def mlm_item(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    return torch.tensor(F.cross_entropy(x, y).item())


def mlm_python_float(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    return F.cross_entropy(x, y).item()


def mlm_in_place_labels(logits, labels, *, num_items_in_batch=None):
    labels[labels == IGNORE] = 0  # the caller's labels
    x, y = _flat(logits, labels)
    return F.cross_entropy(x, y, ignore_index=0)


def mlm_ignores_num_items(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    total = F.cross_entropy(x, y, reduction="sum")
    return total / (y != IGNORE).sum().clamp(min=1)


def mlm_divides_mean(logits, labels, *, num_items_in_batch=None):
    loss = mlm_ignores_num_items(logits, labels)
    return loss / num_items_in_batch if num_items_in_batch is not None else loss


def mlm_no_flatten(logits, labels, *, num_items_in_batch=None):
    return F.cross_entropy(logits, labels)


def mlm_manual_gather(logits, labels, *, num_items_in_batch=None):
    logp = logits.log_softmax(-1)
    return -logp.gather(-1, labels.unsqueeze(-1)).mean()  # -100 is used as an index


def mlm_empty_constant(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    n = int((y != IGNORE).sum())
    if n == 0:
        return torch.tensor(0.0)
    total = F.cross_entropy(x, y, reduction="sum")
    return total / (num_items_in_batch if num_items_in_batch is not None else n)


def mlm_nll_on_logits(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits, labels)
    return F.nll_loss(x, y)


def mlm_reduction_none(logits, labels, *, num_items_in_batch=None):
    return F.cross_entropy(*_flat(logits, labels), reduction="none")


def mlm_manual_valid(logits, labels, *, num_items_in_batch=None):
    """Correct, written by hand: log_softmax, gather at the targets, sum / count."""
    keep = labels != IGNORE
    logp = logits.log_softmax(-1)  # (B, T, V)
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * keep
    count = keep.sum() if num_items_in_batch is None else num_items_in_batch
    return nll.sum() / (count if num_items_in_batch is not None else count.clamp(min=1))


# ----------------------------------------------------------------------------- clm_loss


def clm_draft_as_written(logits, labels, *, num_items_in_batch=None):
    """A first draft: shift, mean over *every* position (it is given input_ids with [PAD]=0,
    so padding is a target), returns (loss, info)."""
    seen = labels.masked_fill(labels == IGNORE, 0)  # the input_ids the draft was written for
    x = logits[:, :-1].contiguous()
    y = seen[:, 1:].contiguous()
    loss = F.cross_entropy(x.view(-1, x.shape[-1]), y.view(-1))
    return loss, {"loss": loss.item(), "perplexity": loss.exp().item()}


def clm_draft_loss_only(logits, labels, *, num_items_in_batch=None):
    return clm_draft_as_written(logits, labels)[0]


def clm_not_shifted(logits, labels, *, num_items_in_batch=None):
    return F.cross_entropy(*_flat(logits, labels))


def clm_shifted_twice(logits, labels, *, num_items_in_batch=None):
    pre = torch.full_like(labels, IGNORE)
    pre[:, :-1] = labels[:, 1:]  # the caller's "pre-shift" ...
    return F.cross_entropy(*_flat(logits[:, :-1], pre[:, 1:]))  # ... and the loss shifts again


def clm_wrong_way(logits, labels, *, num_items_in_batch=None):
    return F.cross_entropy(*_flat(logits[:, 1:], labels[:, :-1]))


def clm_counts_padding(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits[:, :-1], labels[:, 1:])
    return F.cross_entropy(x, y, reduction="sum") / y.numel()


def clm_pad_as_token(logits, labels, *, num_items_in_batch=None):
    """Replaces -100 with an ordinary id (7) before the loss: padding is scored."""
    y = labels.masked_fill(labels == IGNORE, 7)
    return F.cross_entropy(*_flat(logits[:, :-1], y[:, 1:]))


def clm_mean_nan(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits[:, :-1], labels[:, 1:])
    total = F.cross_entropy(x, y, reduction="sum")
    return total / (num_items_in_batch if num_items_in_batch is not None else (y != IGNORE).sum())


def clm_ignores_num_items(logits, labels, *, num_items_in_batch=None):
    x, y = _flat(logits[:, :-1], labels[:, 1:])
    return F.cross_entropy(x, y, reduction="sum") / (y != IGNORE).sum().clamp(min=1)


def clm_valid_with_shift_labels(logits, labels, *, num_items_in_batch=None):
    """Correct, the transformers way: pad the labels with -100 and drop their first column."""
    x, y = _flat(logits, shift_labels(labels))
    total = F.cross_entropy(x, y, reduction="sum")
    return total / (
        num_items_in_batch if num_items_in_batch is not None else (y != IGNORE).sum().clamp(min=1)
    )


# ------------------------------------------------------------------------ bert_pretraining_loss


def _mlm(logits, labels):
    x, y = _flat(logits, labels)
    return F.cross_entropy(x, y, reduction="sum") / (y != IGNORE).sum().clamp(min=1)


def bert_draft_as_written(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    """A first draft: the draft MLM loss (mean over selected rows: NaN when none) plus NSP."""
    x, y = _flat(mlm_logits, mlm_labels)
    keep = y != IGNORE
    mlm = F.cross_entropy(x[keep], y[keep])
    nsp = F.cross_entropy(nsp_logits, nsp_labels)
    return mlm_weight * mlm + nsp_weight * nsp


def bert_unweighted(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    return _mlm(mlm_logits, mlm_labels) + F.cross_entropy(nsp_logits, nsp_labels)


def bert_swapped_weights(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    return nsp_weight * _mlm(mlm_logits, mlm_labels) + mlm_weight * F.cross_entropy(
        nsp_logits, nsp_labels
    )


def bert_normalised(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    total = mlm_weight * _mlm(mlm_logits, mlm_labels) + nsp_weight * F.cross_entropy(
        nsp_logits, nsp_labels
    )
    return total / (mlm_weight + nsp_weight)


def bert_averaged(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    total = mlm_weight * _mlm(mlm_logits, mlm_labels) + nsp_weight * F.cross_entropy(
        nsp_logits, nsp_labels
    )
    return total / 2


def bert_swapped_nsp_labels(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    nsp = F.cross_entropy(nsp_logits, 1 - nsp_labels)  # reads 1 as IsNext (d2l's convention)
    return mlm_weight * _mlm(mlm_logits, mlm_labels) + nsp_weight * nsp


def bert_missing_nsp(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    return mlm_weight * _mlm(mlm_logits, mlm_labels)


def bert_mlm_counts_unmasked(
    mlm_logits, nsp_logits, mlm_labels, nsp_labels, *, mlm_weight=1.0, nsp_weight=1.0
):
    x, y = _flat(mlm_logits, mlm_labels)
    mlm = F.cross_entropy(x, y, reduction="sum") / y.numel()
    return mlm_weight * mlm + nsp_weight * F.cross_entropy(nsp_logits, nsp_labels)


# ----------------------------------------------------------------------------- make_nsp_pairs


def _pad_rows(examples, pad_id):
    width = max(len(a) + len(b) + 3 for a, b, _, _ in examples)
    n = len(examples)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    types = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, (a, _, _, seq) in enumerate(examples):
        ids[i, : len(seq)] = torch.tensor(seq)
        types[i, len(a) + 2 : len(seq)] = 1
        mask[i, : len(seq)] = 1
    return ids, types, mask, torch.tensor([lab for _, _, lab, _ in examples], dtype=torch.long)


def _negative(documents, d, doc, split, generator, negative):
    """The B sentences of a NotNext example of document ``d`` (with the chosen defect)."""

    def randint(n):
        return int(torch.randint(n, (), generator=generator))

    if negative == "random_ids":
        n = len(doc[split])
        return [torch.randint(0, 1000, (n,), generator=generator).tolist()]
    if negative == "any_doc":  # d2l: a random sentence of a random paragraph, maybe A's own
        o = randint(len(documents))
        return [documents[o][randint(len(documents[o]))]]
    o = randint(len(documents) - 1)
    o += o >= d
    s = randint(len(documents[o]))
    return documents[o][s : s + 2]


def _mark_segments(types, examples, segments):
    """Put [SEP] in the wrong segment, as the ``segments`` defect says."""
    if segments == "first_sep_in_b":
        for i, (a, _, _, _) in enumerate(examples):
            types[i, len(a) + 1] = 1
    elif segments == "last_sep_in_a":
        for i, (_, _, _, seq) in enumerate(examples):
            types[i, len(seq) - 1] = 0


def _nsp_generic(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability,
    generator,
    negative="other_doc",
    swap_labels=False,
    segments="right",
    truncate=True,
    fixed_half=False,
    in_place_truncate=False,
):
    """One example per sentence boundary, with switchable defects."""
    examples = []
    for d, doc in enumerate(documents):
        for split in range(1, len(doc)):
            a_sents = doc[max(0, split - 2) : split]
            if fixed_half:
                is_random = split % 2 == 0
            else:
                is_random = float(torch.rand((), generator=generator)) < nsp_probability
            if is_random:
                b_sents = _negative(documents, d, doc, split, generator, negative)
            else:
                b_sents = doc[split : split + 2]
            if in_place_truncate:
                a, b = a_sents[-1], b_sents[0]  # the caller's sentence lists themselves
            else:
                a = [t for s in a_sents for t in s]
                b = [t for s in b_sents for t in s]
            while truncate and len(a) + len(b) > max_length - 3:
                (a if len(a) > len(b) else b).pop()
            label = int(is_random) if not swap_labels else 1 - int(is_random)
            seq = [cls_token_id, *a, sep_token_id, *b, sep_token_id]
            examples.append((list(a), list(b), label, seq))
    ids, types, mask, labels = _pad_rows(examples, pad_token_id)
    _mark_segments(types, examples, segments)
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "attention_mask": mask,
        "next_sentence_label": labels,
    }


def _variant(**defects):
    def make_nsp_pairs(
        documents,
        *,
        cls_token_id,
        sep_token_id,
        pad_token_id,
        max_length,
        nsp_probability=0.5,
        generator=None,
    ):
        return _nsp_generic(
            documents,
            cls_token_id=cls_token_id,
            sep_token_id=sep_token_id,
            pad_token_id=pad_token_id,
            max_length=max_length,
            nsp_probability=nsp_probability,
            generator=generator,
            **defects,
        )

    return make_nsp_pairs


def nsp_draft_as_written(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """A first draft: documents flattened into one list of sentences; sentences 2i
    and 2i+1 form a positive with label 1; the negative pairs sentence 2i with random token ids,
    label 0; [CLS]=1, [SEP]=2, [PAD]=0 hard-coded; no truncation; global RNG; a tuple returned."""
    sentences = [s for doc in documents for s in doc]
    rows, types, labels = [], [], []
    for i in range(len(sentences) // 2):
        a, b = sentences[2 * i], sentences[2 * i + 1]
        for b_seq, lab in ((b, 1), (torch.randint(0, 30000, (len(b),)).tolist(), 0)):
            rows.append([1, *a, 2, *b_seq, 2])
            types.append([0] * (len(a) + 2) + [1] * (len(b_seq) + 1))
            labels.append(lab)
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    seg = torch.tensor([t + [0] * (width - len(t)) for t in types])
    return ids, seg, torch.tensor(labels)


def nsp_draft_as_dict(documents, **kwargs):
    """The first draft's pairs in the exercise's dict (attention mask derived from [PAD]=0)."""
    ids, seg, labels = nsp_draft_as_written(documents, **kwargs)
    return {
        "input_ids": ids,
        "token_type_ids": seg,
        "attention_mask": (ids != 0).long(),
        "next_sentence_label": labels,
    }


def nsp_flat_positives(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    """Right ids and negatives, but positives pair sentences 2i, 2i+1 of the flattened corpus."""
    flat = [(d, s) for d, doc in enumerate(documents) for s in doc]
    examples = []
    for i in range(len(flat) // 2):
        (d, a), (_, b) = flat[2 * i], flat[2 * i + 1]
        if float(torch.rand((), generator=generator)) < nsp_probability:
            o = int(torch.randint(len(documents) - 1, (), generator=generator))
            o += o >= d
            b, label = documents[o][0], 1
        else:
            label = 0
        a, b = list(a), list(b)
        while len(a) + len(b) > max_length - 3:
            (a if len(a) > len(b) else b).pop()
        examples.append((a, b, label, [cls_token_id, *a, sep_token_id, *b, sep_token_id]))
    ids, types, mask, labels = _pad_rows(examples, pad_token_id)
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "attention_mask": mask,
        "next_sentence_label": labels,
    }


def nsp_hard_coded_ids(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    return _nsp_generic(
        documents,
        cls_token_id=101,
        sep_token_id=102,
        pad_token_id=0,
        max_length=max_length,
        nsp_probability=nsp_probability,
        generator=generator,
    )


def nsp_global_rng(
    documents,
    *,
    cls_token_id,
    sep_token_id,
    pad_token_id,
    max_length,
    nsp_probability=0.5,
    generator=None,
):
    return _nsp_generic(
        documents,
        cls_token_id=cls_token_id,
        sep_token_id=sep_token_id,
        pad_token_id=pad_token_id,
        max_length=max_length,
        nsp_probability=nsp_probability,
        generator=None,
    )


def nsp_int32(documents, **kwargs):
    return {k: v.int() for k, v in _variant()(documents, **kwargs).items()}


nsp_random_negatives = _variant(negative="random_ids")
nsp_same_document_negatives = _variant(negative="any_doc")
nsp_swapped_labels = _variant(swap_labels=True)
nsp_first_sep_in_b = _variant(segments="first_sep_in_b")
nsp_last_sep_in_a = _variant(segments="last_sep_in_a")
nsp_no_truncation = _variant(truncate=False)
nsp_fixed_half = _variant(fixed_half=True)
nsp_in_place = _variant(in_place_truncate=True)
nsp_valid_per_boundary = _variant()


# ----------------------------------------------------------------------------- select_whole_words


def _words(special_tokens_mask, is_continuation, attention_mask, row, *, use_attention=True):
    """The eligible positions of ``row`` grouped into words (a "##" piece joins the word before)."""
    ok = ~special_tokens_mask[row].bool()
    if use_attention and attention_mask is not None:
        ok &= attention_mask[row].bool()
    ok, cont = ok.tolist(), is_continuation[row].tolist()
    words = []
    for t in range(len(ok)):
        if ok[t] and cont[t] and t > 0 and ok[t - 1]:
            words[-1].append(t)
        elif ok[t]:
            words.append([t])
    return words


def _count(length, p, cap, *, rounding=round):
    if p == 0:
        return 0
    n = max(1, rounding(length * p))
    return n if cap is None else min(cap, n)


def _wwm(
    special_tokens_mask,
    is_continuation,
    attention_mask,
    p,
    cap,
    generator,
    *,
    order="random",
    length_from="attention",
    rounding=round,
    on_misfit="skip",
    count_words=False,
    use_attention=True,
):
    """Google's whole-word selection with switchable defects."""
    B, T = special_tokens_mask.shape
    selected = torch.zeros((B, T), dtype=torch.bool)
    for row in range(B):
        words = _words(
            special_tokens_mask, is_continuation, attention_mask, row, use_attention=use_attention
        )
        real = T if attention_mask is None else int(attention_mask[row].sum())
        count = _count(T if length_from == "padded" else real, p, cap, rounding=rounding)
        if order == "random":
            visit = torch.randperm(len(words), generator=generator).tolist()
        else:
            visit = list(range(len(words)))
        taken = 0
        for w in visit:
            size = 1 if count_words else len(words[w])
            if taken + size > count:
                if on_misfit == "stop":
                    break
                continue
            selected[row, words[w]] = True
            taken += size
    return selected


def wwm_draft_as_written(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """A first draft: each eligible piece on its own with probability p, from the global
    generator, without a count."""
    eligible = ~special_tokens_mask.bool()
    return (torch.rand(special_tokens_mask.shape) < mlm_probability) & eligible


def wwm_pieces_exact_count(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Google's exact count, but over pieces (``select_exact_count``): words get split."""
    from lmlessons.masking_variants import select_exact_count

    return select_exact_count(
        special_tokens_mask,
        attention_mask=attention_mask,
        mlm_probability=mlm_probability,
        max_predictions_per_seq=max_predictions_per_seq,
        generator=generator,
    )


def _wwm_variant(**defects):
    def select(
        special_tokens_mask,
        is_continuation,
        *,
        attention_mask=None,
        mlm_probability=0.15,
        max_predictions_per_seq=20,
        generator=None,
    ):
        return _wwm(
            special_tokens_mask,
            is_continuation,
            attention_mask,
            mlm_probability,
            max_predictions_per_seq,
            generator,
            **defects,
        )

    return select


wwm_counts_words = _wwm_variant(count_words=True)
wwm_padded_length = _wwm_variant(length_from="padded")
wwm_int_count = _wwm_variant(rounding=int)
wwm_stops_early = _wwm_variant(on_misfit="stop")
wwm_left_to_right = _wwm_variant(order="in_order")
wwm_selects_padding = _wwm_variant(use_attention=False)
wwm_valid_generic = _wwm_variant()


def wwm_selects_specials(
    special_tokens_mask, is_continuation, *, attention_mask=None, generator=None, **kwargs
):
    """Builds words over every real position: [CLS] and [SEP] become one-token words."""
    return wwm_valid_generic(
        torch.zeros_like(special_tokens_mask),
        is_continuation,
        attention_mask=attention_mask,
        generator=generator,
        **kwargs,
    )


def wwm_ignores_cap(special_tokens_mask, is_continuation, *, max_predictions_per_seq=20, **kw):
    return wwm_valid_generic(
        special_tokens_mask, is_continuation, max_predictions_per_seq=None, **kw
    )


def wwm_bernoulli_words(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Each whole word with probability ``mlm_probability``: words stay whole, the count varies."""
    selected = torch.zeros(special_tokens_mask.shape, dtype=torch.bool)
    for row in range(selected.shape[0]):
        words = _words(special_tokens_mask, is_continuation, attention_mask, row)
        draws = torch.rand(len(words), generator=generator) < mlm_probability
        for word, chosen in zip(words, draws.tolist()):
            selected[row, word] = chosen
    return selected


def wwm_by_piece(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Shuffles the *pieces* and takes the word of each piece if it fits: long words win."""
    B, T = special_tokens_mask.shape
    selected = torch.zeros((B, T), dtype=torch.bool)
    for row in range(B):
        words = _words(special_tokens_mask, is_continuation, attention_mask, row)
        owner = {t: i for i, w in enumerate(words) for t in w}
        real = T if attention_mask is None else int(attention_mask[row].sum())
        count, taken, done = _count(real, mlm_probability, max_predictions_per_seq), 0, set()
        pieces = sorted(owner)
        for k in torch.randperm(len(pieces), generator=generator).tolist():
            w = owner[pieces[k]]
            if w not in done and taken + len(words[w]) <= count:
                selected[row, words[w]] = True
                taken += len(words[w])
            done.add(w)
    return selected


def wwm_none_crashes(special_tokens_mask, is_continuation, *, attention_mask=None, **kwargs):
    """Reads the row lengths from ``attention_mask`` even when it is None."""
    lengths = attention_mask.sum(dim=1)  # fails on None
    assert lengths.numel() == special_tokens_mask.shape[0]
    return wwm_valid_generic(
        special_tokens_mask, is_continuation, attention_mask=attention_mask, **kwargs
    )


def wwm_global_rng(special_tokens_mask, is_continuation, *, generator=None, **kwargs):
    return wwm_valid_generic(special_tokens_mask, is_continuation, generator=None, **kwargs)


def wwm_valid_random_keys(
    special_tokens_mask,
    is_continuation,
    *,
    attention_mask=None,
    mlm_probability=0.15,
    max_predictions_per_seq=20,
    generator=None,
):
    """Correct, another random procedure: one uniform key per word, visited by sorted key."""
    B, T = special_tokens_mask.shape
    selected = torch.zeros((B, T), dtype=torch.bool)
    for row in range(B):
        words = _words(special_tokens_mask, is_continuation, attention_mask, row)
        real = T if attention_mask is None else int(attention_mask[row].sum())
        count = _count(real, mlm_probability, max_predictions_per_seq)
        keys = torch.rand(len(words), generator=generator)
        taken = 0
        for w in keys.argsort(descending=True).tolist():
            if taken + len(words[w]) <= count:
                selected[row, words[w]] = True
                taken += len(words[w])
    return selected


def wwm_int_mask(special_tokens_mask, is_continuation, **kwargs):
    """Right positions, but a 0/1 ``torch.long`` mask where the task states a bool one."""
    return wwm_valid_random_keys(special_tokens_mask, is_continuation, **kwargs).long()


# ----------------------------------------------------------------------------- truncate_seq_pair


def truncate_draft_as_written(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Google's original: trims the caller's lists in place, returns None, Python's random."""
    import random

    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if random.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def _truncate(tokens_a, tokens_b, max_num_tokens, generator, *, side="longer", front=None):
    a, b = list(tokens_a), list(tokens_b)
    turn = 0
    while len(a) + len(b) > max_num_tokens:
        if side == "longer":
            cut = a if len(a) > len(b) else b
        elif side == "shorter":
            cut = a if (len(a) < len(b) and a) or not b else b
        else:  # both, in turn
            cut = a if (turn % 2 == 0 and a) or not b else b
            turn += 1
        at_front = (
            front() if front is not None else float(torch.rand((), generator=generator)) < 0.5
        )
        if at_front:
            del cut[0]
        else:
            cut.pop()
    return a, b


def truncate_always_end(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    return _truncate(tokens_a, tokens_b, max_num_tokens, generator, front=lambda: False)


def truncate_always_front(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    return _truncate(tokens_a, tokens_b, max_num_tokens, generator, front=lambda: True)


def truncate_shorter_side(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    return _truncate(tokens_a, tokens_b, max_num_tokens, generator, side="shorter")


def truncate_both_sides(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    return _truncate(tokens_a, tokens_b, max_num_tokens, generator, side="both")


def truncate_off_by_one(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Trims while ``len(a) + len(b) >= max_num_tokens``: one token too many."""
    return _truncate(tokens_a, tokens_b, max_num_tokens - 1, generator)


def truncate_in_place(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Trims the caller's lists and returns them."""
    a, b = _truncate(tokens_a, tokens_b, max_num_tokens, generator)
    tokens_a[:], tokens_b[:] = a, b
    return tokens_a, tokens_b


def truncate_global_rng(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    return _truncate(tokens_a, tokens_b, max_num_tokens, None)


def truncate_own_generator(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    return _truncate(tokens_a, tokens_b, max_num_tokens, torch.Generator().manual_seed(0))


def truncate_one_end_per_call(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    at_front = float(torch.rand((), generator=generator)) < 0.5
    return _truncate(tokens_a, tokens_b, max_num_tokens, generator, front=lambda: at_front)


def truncate_valid_slicing(tokens_a, tokens_b, max_num_tokens, *, generator=None):
    """Correct, another way: count the removals per side and end, then slice once."""
    la, lb = len(tokens_a), len(tokens_b)
    cut = {"a": [0, 0], "b": [0, 0]}  # [front, back]
    while la + lb > max_num_tokens:
        side = "a" if la > lb else "b"
        cut[side][0 if torch.rand(1, generator=generator).item() < 0.5 else 1] += 1
        la, lb = (la - 1, lb) if side == "a" else (la, lb - 1)
    (fa, ba), (fb, bb) = cut["a"], cut["b"]
    return tokens_a[fa : len(tokens_a) - ba], tokens_b[fb : len(tokens_b) - bb]


# ----------------------------------------------------------------------------- rank_loss


def _shifted(logits, labels):
    return logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)


def rank_draft_as_written(logits, labels, *, all_reduce, world_size):
    """A first draft: the plain mean over this rank's targets (no all_reduce, no world_size)."""
    flat_logits, flat_labels = _shifted(logits, labels)
    return F.cross_entropy(flat_logits, flat_labels)


def rank_local_count(logits, labels, *, all_reduce, world_size):
    """Multiplies by world_size but divides by the rank's own count."""
    flat_logits, flat_labels = _shifted(logits, labels)
    total = F.cross_entropy(flat_logits, flat_labels, reduction="sum")
    return world_size * total / (flat_labels != IGNORE).sum().clamp(min=1)


def rank_missing_world_size(logits, labels, *, all_reduce, world_size):
    flat_logits, flat_labels = _shifted(logits, labels)
    total = F.cross_entropy(flat_logits, flat_labels, reduction="sum")
    return total / all_reduce((flat_labels != IGNORE).sum()).clamp(min=1)


def rank_counts_before_shift(logits, labels, *, all_reduce, world_size):
    flat_logits, flat_labels = _shifted(logits, labels)
    total = F.cross_entropy(flat_logits, flat_labels, reduction="sum")
    return world_size * total / all_reduce((labels != IGNORE).sum()).clamp(min=1)


def rank_counts_padding(logits, labels, *, all_reduce, world_size):
    flat_logits, flat_labels = _shifted(logits, labels)
    total = F.cross_entropy(flat_logits, flat_labels, reduction="sum")
    return world_size * total / all_reduce(torch.tensor(flat_labels.numel()))


def rank_not_shifted(logits, labels, *, all_reduce, world_size):
    V = logits.shape[-1]
    total = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="sum")
    return world_size * total / all_reduce((labels != IGNORE).sum()).clamp(min=1)


def rank_all_reduces_the_loss(logits, labels, *, all_reduce, world_size):
    """All-reduces sum and count: every rank returns the full-batch loss, without gradient."""
    flat_logits, flat_labels = _shifted(logits, labels)
    total = all_reduce(F.cross_entropy(flat_logits, flat_labels, reduction="sum"))
    return total / all_reduce((flat_labels != IGNORE).sum()).clamp(min=1)


def rank_skips_empty_rank(logits, labels, *, all_reduce, world_size):
    """Skips the all_reduce on a rank without targets: the other ranks wait for it."""
    flat_logits, flat_labels = _shifted(logits, labels)
    total = F.cross_entropy(flat_logits, flat_labels, reduction="sum")
    count = (flat_labels != IGNORE).sum()
    if count == 0:
        return total * 0.0
    return world_size * total / all_reduce(count)


def rank_python_count(logits, labels, *, all_reduce, world_size):
    flat_logits, flat_labels = _shifted(logits, labels)
    total = F.cross_entropy(flat_logits, flat_labels, reduction="sum")
    return world_size * total / all_reduce(int((flat_labels != IGNORE).sum()))


def rank_valid_float_count(logits, labels, *, all_reduce, world_size):
    """Correct, with shift_labels (-100 padded) and the count all-reduced as a float."""
    targets = shift_labels(labels)
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    count = all_reduce((targets != IGNORE).sum().float())
    return per_token.sum() * world_size / torch.clamp(count, min=1.0)


# ----------------------------------------------------------------------- chunked_cross_entropy


def _chunks(n, size):
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def chunked_draft_as_written(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """A first draft: the full logits and the plain mean."""
    return F.cross_entropy(hidden @ weight.T, labels)


def chunked_mean_of_means(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    means = []
    for s, e in _chunks(hidden.shape[0], chunk_size):
        if bool((labels[s:e] != IGNORE).any()):
            means.append(F.cross_entropy(hidden[s:e] @ weight.T, labels[s:e]))
    return torch.stack(means).mean()


def chunked_drops_last(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    total = hidden.new_zeros(())
    for start in range(0, hidden.shape[0] - chunk_size + 1, chunk_size):
        chunk = slice(start, start + chunk_size)
        total = total + F.cross_entropy(hidden[chunk] @ weight.T, labels[chunk], reduction="sum")
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != IGNORE).sum().clamp(min=1)


def _chunked_sum(hidden, weight, labels, chunk_size, *, detach_weight=False):
    w = weight.detach() if detach_weight else weight
    total = hidden.new_zeros(())
    for s, e in _chunks(hidden.shape[0], chunk_size):
        total = total + F.cross_entropy(hidden[s:e] @ w.T, labels[s:e], reduction="sum")
    return total


def chunked_counts_ignored(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    return _chunked_sum(hidden, weight, labels, chunk_size) / labels.numel()


def chunked_nan_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Chunk mean times chunk count: NaN * 0 for a chunk whose labels are all -100."""
    total = hidden.new_zeros(())
    for s, e in _chunks(hidden.shape[0], chunk_size):
        n = (labels[s:e] != IGNORE).sum()
        total = total + F.cross_entropy(hidden[s:e] @ weight.T, labels[s:e]) * n
    return total / (labels != IGNORE).sum().clamp(min=1)


def chunked_fixed_chunk(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """A hard-coded chunk of 16 rows, whatever ``chunk_size`` says."""
    return _chunked_sum(hidden, weight, labels, 16) / (labels != IGNORE).sum().clamp(min=1)


def chunked_detached_weight(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    total = _chunked_sum(hidden, weight, labels, chunk_size, detach_weight=True)
    return total / (labels != IGNORE).sum().clamp(min=1)


def chunked_ignores_num_items(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    return _chunked_sum(hidden, weight, labels, chunk_size) / (labels != IGNORE).sum().clamp(min=1)


def chunked_plain_autograd(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Right value and gradients, chunked, but autograd saves every chunk's log-softmax for the
    backward pass: after the loop the (N, V) softmax is alive again."""
    total = _chunked_sum(hidden, weight, labels, chunk_size)
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != IGNORE).sum().clamp(min=1)


def chunked_valid_gradient_in_forward(
    hidden, weight, labels, *, chunk_size, num_items_in_batch=None
):
    """Correct the other way: each chunk's gradients are computed in the forward pass and only
    they are kept (Liger Kernel's idea), here with a custom autograd Function."""

    class GradInForward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, w):
            grad_h, grad_w = torch.zeros_like(h), torch.zeros_like(w)
            total = h.new_zeros(())
            for s, e in _chunks(h.shape[0], chunk_size):
                y = labels[s:e]
                logp = torch.log_softmax(h[s:e] @ w.T, dim=-1)  # (C, V), dropped after the chunk
                kept = y != IGNORE
                total = total - logp[kept].gather(1, y[kept].unsqueeze(1)).sum()
                grad = logp.exp()
                grad[kept.nonzero().squeeze(1), y[kept]] -= 1
                grad[~kept] = 0
                grad_h[s:e] = grad @ w
                grad_w += grad.T @ h[s:e]
            ctx.save_for_backward(grad_h, grad_w)
            return total

        @staticmethod
        def backward(ctx, g):
            grad_h, grad_w = ctx.saved_tensors
            return g * grad_h, g * grad_w

    total = GradInForward.apply(hidden, weight)
    divisor = num_items_in_batch if num_items_in_batch is not None else (labels != IGNORE).sum()
    return total / torch.as_tensor(divisor).clamp(min=1)


def chunked_valid_checkpointed(hidden, weight, labels, *, chunk_size, num_items_in_batch=None):
    """Correct, and it keeps no chunk logits for backward: each chunk is recomputed there."""
    from torch.utils.checkpoint import checkpoint

    def chunk_sum(h, w, y):
        return F.cross_entropy(h @ w.T, y, reduction="sum")

    total = hidden.new_zeros(())
    for s, e in _chunks(hidden.shape[0], chunk_size):
        total = total + checkpoint(chunk_sum, hidden[s:e], weight, labels[s:e], use_reentrant=False)
    divisor = num_items_in_batch if num_items_in_batch is not None else (labels != IGNORE).sum()
    return total / torch.as_tensor(divisor).clamp(min=1)


# ----------------------------------------------------------------------------- stubs


def stub_not_implemented(*args, **kwargs):
    raise NotImplementedError("Your code here")


def stub_pass(*args, **kwargs):
    pass


def raises_key_error(*args, **kwargs):
    raise KeyError("oops")


# ----------------------------------------------------------------------------- registry

EXPECTED: dict[str, dict[str, object]] = {
    "mask_tokens": {
        "mask_draft_as_written": "uses_global_rng",
        "mask_draft_with_labels": "uses_global_rng",
        "mask_specials": "masks_special_tokens",
        "mask_hard_coded_ids": "masks_special_tokens",
        "mask_fixed_replace_probs": "ignores_replace_probs",
        "mask_fixed_mlm_probability": "ignores_mlm_probability",
        "mask_labels_copy": "labels_not_ignored",
        "mask_labels_zero": "labels_not_ignored",
        "mask_labels_corrupted": "labels_are_corrupted_ids",
        "mask_in_place": "modifies_input",
        "mask_global_rng": "uses_global_rng",
        "mask_own_generator": "ignores_generator",
        "mask_random_unconditional": "random_not_conditional",
        "mask_tilde_on_long": "int_mask_not_bool",
        "mask_none_crashes": "special_tokens_mask_none",
        "mask_int32": "wrong_dtype",
        "mask_unguarded_division": "divides_by_zero",
        "mask_single_tensor": "wrong_type",
    },
    "mlm_loss": {
        "mlm_draft_as_written": "returns_tuple",
        "mlm_draft_loss_only": "nan_when_no_targets",
        "mlm_counts_unmasked": "counts_unmasked_positions",
        "mlm_clamped_labels": "minus100_not_ignored",
        "mlm_per_row_mean": "per_row_mean",
        "mlm_sum": "sum_not_mean",
        "mlm_item": "detached",
        "mlm_python_float": "not_a_tensor",
        "mlm_in_place_labels": "modifies_input",
        "mlm_ignores_num_items": "ignores_num_items_in_batch",
        "mlm_divides_mean": "num_items_divides_mean",
        "mlm_no_flatten": "class_dim",
        "mlm_manual_gather": "minus100_not_ignored",
        "mlm_empty_constant": "empty_detached",
        "mlm_nll_on_logits": "nll_without_log_softmax",
        "mlm_reduction_none": "not_scalar",
    },
    "clm_loss": {
        "clm_draft_as_written": "returns_tuple",
        "clm_draft_loss_only": "minus100_not_ignored",
        "clm_not_shifted": "not_shifted",
        "clm_shifted_twice": "shifted_twice",
        "clm_wrong_way": "shifted_wrong_way",
        "clm_counts_padding": "counts_padding_positions",
        "clm_pad_as_token": "minus100_not_ignored",
        "clm_mean_nan": "nan_when_no_targets",
        "clm_ignores_num_items": "ignores_num_items_in_batch",
    },
    "bert_pretraining_loss": {
        "bert_draft_as_written": "nan_when_no_targets",
        "bert_unweighted": "unweighted",
        "bert_swapped_weights": "misweighted",
        "bert_normalised": "misweighted",
        "bert_averaged": "averages_losses",
        "bert_swapped_nsp_labels": "swapped_nsp_labels",
        "bert_missing_nsp": "missing_nsp",
        "bert_mlm_counts_unmasked": "counts_unmasked_positions",
    },
    "make_nsp_pairs": {
        "nsp_draft_as_written": "uses_global_rng",
        "nsp_draft_as_dict": "uses_global_rng",
        "nsp_flat_positives": "positive_from_other_document",
        "nsp_hard_coded_ids": "hard_coded_special_ids",
        "nsp_random_negatives": "negative_random_ids",
        "nsp_same_document_negatives": "negative_same_document",
        "nsp_swapped_labels": "swapped_nsp_labels",
        "nsp_first_sep_in_b": "wrong_segment_ids",
        "nsp_last_sep_in_a": "wrong_segment_ids",
        "nsp_no_truncation": "ignores_max_length",
        "nsp_fixed_half": "ignores_nsp_probability",
        "nsp_global_rng": "uses_global_rng",
        "nsp_in_place": "modifies_input",
        "nsp_int32": "wrong_dtype",
    },
    "select_whole_words": {
        "wwm_draft_as_written": "uses_global_rng",
        "wwm_pieces_exact_count": "splits_words",
        "wwm_selects_specials": "masks_special_tokens",
        "wwm_selects_padding": "selects_padding",
        "wwm_bernoulli_words": "count_not_exact",
        "wwm_int_count": "wrong_count_formula",
        "wwm_padded_length": "count_from_padded_length",
        "wwm_counts_words": "counts_words",
        "wwm_stops_early": "stops_at_first_long_word",
        "wwm_ignores_cap": "ignores_max_predictions",
        "wwm_left_to_right": "not_random_order",
        "wwm_by_piece": "weights_words_by_length",
        "wwm_global_rng": "uses_global_rng",
        "wwm_none_crashes": "attention_mask_none",
        "wwm_int_mask": "wrong_dtype",
    },
    "truncate_seq_pair": {
        "truncate_draft_as_written": "modifies_input",
        "truncate_in_place": "modifies_input",
        "truncate_shorter_side": "trims_shorter_side",
        "truncate_both_sides": "trims_both_sides",
        "truncate_off_by_one": "off_by_one",
        "truncate_global_rng": "uses_global_rng",
        "truncate_own_generator": "ignores_generator",
        "truncate_always_end": "always_trims_end",
        "truncate_always_front": "always_trims_front",
        "truncate_one_end_per_call": "one_end_per_call",
    },
    "rank_loss": {
        "rank_draft_as_written": "divides_by_local_count",
        "rank_local_count": "divides_by_local_count",
        "rank_missing_world_size": "missing_world_size",
        "rank_counts_before_shift": "counts_before_shift",
        "rank_counts_padding": "counts_padding_positions",
        "rank_not_shifted": "not_shifted",
        "rank_all_reduces_the_loss": "detached",
        "rank_skips_empty_rank": "mismatched_all_reduce",
        "rank_python_count": "all_reduce_needs_tensor",
    },
    "chunked_cross_entropy": {
        "chunked_draft_as_written": "builds_full_logits",
        "chunked_mean_of_means": "averages_chunk_means",
        "chunked_drops_last": "drops_last_chunk",
        "chunked_counts_ignored": "counts_padding_positions",
        "chunked_nan_chunk": "nan_on_ignored_chunk",
        "chunked_fixed_chunk": "chunk_too_large",
        "chunked_detached_weight": "wrong_gradient",
        "chunked_ignores_num_items": "ignores_num_items_in_batch",
        "chunked_plain_autograd": "keeps_chunks_for_backward",
    },
}

# Correct implementations that differ from the package's: the checkers must accept them.
VALID: dict[str, list[str]] = {
    "mlm_loss": ["mlm_manual_valid"],
    "clm_loss": ["clm_valid_with_shift_labels"],
    "make_nsp_pairs": ["nsp_valid_per_boundary"],
    "select_whole_words": ["wwm_valid_generic", "wwm_valid_random_keys"],
    "truncate_seq_pair": ["truncate_valid_slicing"],
    "rank_loss": ["rank_valid_float_count"],
    "chunked_cross_entropy": ["chunked_valid_checkpointed", "chunked_valid_gradient_in_forward"],
}


def get(name: str):
    return globals()[name]
