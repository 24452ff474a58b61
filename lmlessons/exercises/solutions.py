"""Reference solutions of the exercises, written to be read (``solution(name)`` shows them).

They are the learner-facing version of transformers' code, not a copy of the course's core:
``mask_tokens`` makes ``DataCollatorForLanguageModeling.torch_mask_tokens``' three Bernoulli
draws (the core :func:`lmlessons.mask_tokens` does the same with one uniform draw per position),
the losses are ``ForMaskedLMLoss`` / ``ForCausalLMLoss`` written out with ``F.cross_entropy``
(plus 0, not NaN, when nothing is predicted), and they write -100 as transformers does. Short on
purpose: no input validation (the core adds it), one idea per line, shape comments. Each keeps
the exercise's signature, which is the core function's (``rank_loss`` and
``chunked_cross_entropy`` have their own small signatures). ``select_whole_words`` and
``truncate_seq_pair`` follow Google BERT's ``create_pretraining_data.py``; ``rank_loss`` is
transformers' ``average_tokens_across_devices``; ``chunked_cross_entropy`` recomputes each
chunk's logits in the backward pass (a hand-written ``torch.utils.checkpoint``, the idea of Cut
Cross-Entropy), where :func:`lmlessons.linear_cross_entropy` computes the gradients in the forward
pass (Liger Kernel's idea). The tests check that each one passes its
checker and gives transformers' results.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def mask_tokens(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_tokens_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # 1. select positions: probability mlm_probability, never a special token or padding
    probs = torch.full(input_ids.shape, mlm_probability)  # (B, T)
    if special_tokens_mask is not None:
        probs.masked_fill_(special_tokens_mask.bool(), 0.0)
    selected = torch.bernoulli(probs, generator=generator).bool()  # (B, T)

    # 2. labels: the original id where selected, -100 (ignored by the loss) elsewhere
    labels = torch.where(selected, input_ids, -100)  # (B, T)

    # 3. corrupt a copy of the input; the caller's tensor stays untouched
    masked = input_ids.clone()
    to_mask = (
        torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob), generator=generator).bool()
        & selected
    )
    masked[to_mask] = mask_token_id
    # among the rest, random_replace_prob / (1 - mask_replace_prob) become a random id
    rest = 1.0 - mask_replace_prob
    p_random = random_replace_prob / rest if rest > 0 else 0.0
    to_random = torch.bernoulli(torch.full(input_ids.shape, p_random), generator=generator).bool()
    to_random &= selected & ~to_mask
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)  # (B, T)
    masked[to_random] = random_ids[to_random]
    return masked, labels  # the remaining selected positions keep their token


def mlm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    vocab_size = logits.shape[-1]
    # sum over the positions whose label is not -100 (cross_entropy skips -100 by default)
    total = F.cross_entropy(
        logits.reshape(-1, vocab_size).float(), labels.reshape(-1), reduction="sum"
    )
    if num_items_in_batch is not None:
        return total / num_items_in_batch  # gradient accumulation: divide by the step's count
    count = (labels != -100).sum()
    return total / count.clamp(min=1)  # 0, not NaN, when nothing is masked


def clm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    vocab_size = logits.shape[-1]
    # position t predicts token t + 1: drop the last logits and the first labels
    shift_logits = logits[:, :-1, :]  # (B, T-1, V)
    shift_labels = labels[:, 1:]  # (B, T-1), -100 on padding stays -100
    total = F.cross_entropy(
        shift_logits.reshape(-1, vocab_size).float(), shift_labels.reshape(-1), reduction="sum"
    )
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    count = (shift_labels != -100).sum()
    return total / count.clamp(min=1)  # 0, not NaN, when there is nothing to predict


def make_nsp_pairs(
    documents: list[list[list[int]]],
    *,
    cls_token_id: int,
    sep_token_id: int,
    pad_token_id: int,
    max_length: int,
    nsp_probability: float = 0.5,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    def rand() -> float:  # one uniform number from the generator
        return float(torch.rand((), generator=generator))

    def randint(low: int, high: int) -> int:  # an int in [low, high)
        return int(torch.randint(low, high, (), generator=generator))

    max_tokens = max_length - 3  # room for [CLS], [SEP], [SEP]
    examples = []  # (tokens_a, tokens_b, label)
    for d, doc in enumerate(documents):
        for split in range(1, len(doc)):  # A = sentences before `split`, B starts at `split`
            a = [t for s in doc[max(0, split - 2) : split] for t in s]  # up to two sentences
            if rand() < nsp_probability:  # NotNext: B from another document
                other = randint(0, len(documents) - 1)
                other += other >= d  # uniform over the other documents
                start = randint(0, len(documents[other]))
                b = [t for s in documents[other][start : start + 2] for t in s]
                label = 1
            else:  # IsNext: B is the text that follows A
                b = [t for s in doc[split : split + 2] for t in s]
                label = 0
            while len(a) + len(b) > max_tokens:  # trim the longer side, front or back at random
                longer = a if len(a) > len(b) else b
                del longer[0 if rand() < 0.5 else -1]
            examples.append((a, b, label))

    width = max(len(a) + len(b) + 3 for a, b, _ in examples)
    input_ids = torch.full((len(examples), width), pad_token_id)  # (N, L)
    token_type_ids = torch.zeros((len(examples), width), dtype=torch.long)  # (N, L)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)  # (N, L)
    for i, (a, b, _) in enumerate(examples):
        seq = [cls_token_id, *a, sep_token_id, *b, sep_token_id]
        input_ids[i, : len(seq)] = torch.tensor(seq)
        token_type_ids[i, len(a) + 2 : len(seq)] = 1  # B and the final [SEP]
        attention_mask[i, : len(seq)] = 1
    next_sentence_label = torch.tensor([label for _, _, label in examples])  # (N,) 0 = IsNext
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "next_sentence_label": next_sentence_label,
    }


def bert_pretraining_loss(
    mlm_logits: torch.Tensor,
    nsp_logits: torch.Tensor,
    mlm_labels: torch.Tensor,
    nsp_labels: torch.Tensor,
    *,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
) -> torch.Tensor:
    vocab_size = mlm_logits.shape[-1]
    total = F.cross_entropy(
        mlm_logits.reshape(-1, vocab_size).float(), mlm_labels.reshape(-1), reduction="sum"
    )
    mlm = total / (mlm_labels != -100).sum().clamp(min=1)  # mean over masked tokens, 0 if none
    nsp = F.cross_entropy(nsp_logits.float(), nsp_labels)  # (B, 2) vs (B,), 0 = IsNext
    return mlm_weight * mlm + nsp_weight * nsp


def select_whole_words(
    special_tokens_mask: torch.Tensor,
    is_continuation: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    mlm_probability: float = 0.15,
    max_predictions_per_seq: int | None = 20,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    eligible = ~special_tokens_mask.bool()  # (B, T)
    if attention_mask is not None:
        eligible &= attention_mask.bool()  # padding is never a target
    selected = torch.zeros_like(eligible)
    for row in range(eligible.shape[0]):
        # 1. group the eligible positions into words: a "##" piece continues the word before it
        ok, cont = eligible[row].tolist(), is_continuation[row].tolist()
        words: list[list[int]] = []
        for t in range(len(ok)):
            if ok[t] and cont[t] and t > 0 and ok[t - 1]:
                words[-1].append(t)
            elif ok[t]:
                words.append([t])
        # 2. Google's count, from the real length ([CLS] and [SEP] included, padding not)
        length = eligible.shape[1] if attention_mask is None else int(attention_mask[row].sum())
        count = 0 if mlm_probability == 0 else max(1, round(length * mlm_probability))
        if max_predictions_per_seq is not None:
            count = min(count, max_predictions_per_seq)
        # 3. words in random order, each taken whole if it fits in what is left
        taken = 0
        for w in torch.randperm(len(words), generator=generator).tolist():
            if taken + len(words[w]) <= count:
                selected[row, words[w]] = True
                taken += len(words[w])
    return selected


def truncate_seq_pair(
    tokens_a: list[int],
    tokens_b: list[int],
    max_num_tokens: int,
    *,
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[int]]:
    a, b = list(tokens_a), list(tokens_b)  # copies: the caller keeps its sentences
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if float(torch.rand((), generator=generator)) < 0.5:  # front or back, per token
            del longer[0]
        else:
            longer.pop()
    return a, b


def rank_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    all_reduce: Callable[[torch.Tensor], torch.Tensor],
    world_size: int,
) -> torch.Tensor:
    vocab_size = logits.shape[-1]
    shift_logits = logits[:, :-1, :]  # (B, T-1, V) position t predicts token t + 1
    shift_labels = labels[:, 1:]  # (B, T-1)
    total = F.cross_entropy(
        shift_logits.reshape(-1, vocab_size).float(), shift_labels.reshape(-1), reduction="sum"
    )
    count = all_reduce((shift_labels != -100).sum())  # () target tokens on *all* ranks
    # DDP averages the ranks' gradients: multiply by world_size to undo it
    return world_size * total / count.clamp(min=1)


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    chunk_size: int,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    class ChunkSum(torch.autograd.Function):
        """One chunk's summed cross-entropy. It keeps no (C, V) tensor for the backward pass:
        it saves its inputs and recomputes the chunk's logits there."""

        @staticmethod
        def forward(ctx, h, w, targets):
            ctx.save_for_backward(h, w, targets)  # views of the inputs: no new memory
            logits = h @ w.T  # (C, V), freed as soon as forward returns
            return F.cross_entropy(logits.float(), targets, reduction="sum")  # 0 if all -100

        @staticmethod
        def backward(ctx, grad_sum):
            h, w, targets = ctx.saved_tensors
            probs = torch.softmax((h @ w.T).float(), dim=-1)  # (C, V): recomputed, then dropped
            rows = torch.arange(targets.shape[0])[targets != -100]  # (M,) rows with a target
            probs[rows, targets[rows]] -= 1  # d(sum of CE) / d(logits) = softmax - one_hot
            probs[targets == -100] = 0  # an ignored row adds nothing
            grad_logits = (grad_sum * probs).to(w.dtype)  # (C, V)
            return grad_logits @ w, grad_logits.T @ h, None  # (C, H), (V, H)

    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], chunk_size):
        h = hidden[start : start + chunk_size]  # (C, H): one chunk at a time
        targets = labels[start : start + chunk_size]  # (C,)
        total = total + ChunkSum.apply(h, weight, targets)  # (C, V) logits never kept
    if num_items_in_batch is not None:
        return total / num_items_in_batch
    return total / (labels != -100).sum().clamp(min=1)  # divide once, at the end
