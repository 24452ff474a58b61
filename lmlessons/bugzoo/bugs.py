"""The bugs of the bug zoo, each beside its fix: small functions that really run.

Every pair has the same signature, so a run of :mod:`lmlessons.bugzoo.runs` can plug in
either one. Each function is short on purpose: lesson 08 shows its source beside its twin's
(:func:`inspect.getsource`). The lines that differ carry a ``# BUG`` or ``# FIX`` comment.

The roles (what each function is for, and the lesson that teaches it):

* mask ``(input_ids, attention_mask, tokenizer, generator) -> (inputs, labels)``: MLM inputs
  and labels of a padded batch (lessons 01 and 02);
* MLM loss ``(logits, labels) -> loss``: the mean over the masked positions (lesson 02);
* CLM batch ``(rows, tokenizer) -> batch``: a padded causal-LM batch of ``[CLS] ... [SEP]``
  rows, labels unshifted (lesson 03);
* decoder ``(tokenizer, seed) -> BertLMHeadModel`` for next-token prediction (lesson 04);
* negatives ``(pairs, tokenizer, generator) -> pairs``: the NotNext pairs of a BERT
  pretraining batch from ``make_nsp_pairs`` (lesson 05);
* accumulate ``(model, micro_batches) -> loss``: one optimizer step's backward passes over K
  micro-batches (or packs), returning the loss it reports (lesson 07);
* trainer ``(**trainer_kwargs) -> transformers.Trainer``: the ``Trainer`` that trains an MLM run
  with gradient accumulation, built from the keyword arguments of ``Trainer`` (lesson 07);
* answer labels ``(input_ids, assistant_masks) -> labels``: the labels of one rendered
  conversation of the chat fine-tuning runs (lesson 10);
* chat batch ``(conversations, tokenizer) -> [batch, ...]``: one step's labelled conversations
  as padded rows (one batch) or packed without padding (one batch per pack; lessons 09 and 10);
* preference batch ``(pairs, tokenizer) -> batch``: one step's preference pairs (token ids of
  :func:`lmlessons.course.preferences.encode_pair`) as the chosen rows over the rejected rows,
  labelled on the completions (lesson 11);
* reference log-probs ``(reference, policy, batch) -> logps``: the reference model's summed
  log-probabilities of each row's targets, which DPO's rewards are measured against (lesson 11);
* MoE loss ``(model, batch, num_items_in_batch) -> (lm_loss, aux_loss)``: a Mixtral model's
  next-token loss on one padded batch (summed over ``num_items_in_batch``) and its
  load-balancing aux loss (transformers' ``load_balancing_loss_func``; lesson 14);
* MoE accumulate ``(model, micro_batches, moe_loss) -> (loss, aux_loss)``: one optimizer step's
  backward passes over K micro-batches with the aux term weighted by ``router_aux_loss_coef``,
  returning the loss and the aux loss it reports (lessons 07 and 14);
* MTP loss ``(logits_per_depth, labels) -> (loss, losses)``: the training loss of a
  multi-token model from each depth's logits and the unshifted labels, and each depth's loss
  ``(D,)`` (lesson 15).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from lmlessons._checks import IGNORE_INDEX
from lmlessons.answer_only import assistant_only_labels
from lmlessons.collator import special_token_ids
from lmlessons.course.models import seeded_model, tiny_bert_config
from lmlessons.course.trainer_ga import course_compute_loss_func
from lmlessons.losses import clm_loss
from lmlessons.masking import mask_tokens
from lmlessons.mtp import mtp_losses
from lmlessons.packing import flatten_documents, pad, pad_documents
from lmlessons.preference import preference_batch, sequence_logprobs
from lmlessons.shifting import shift_labels

if TYPE_CHECKING:
    from transformers import Trainer

__all__ = [
    "Batch",
    "masked_batch",
    "mask_fixed",
    "mask_special_tokens_too",
    "mask_every_token_a_target",
    "mlm_loss_fixed",
    "mlm_loss_zero_over_zero",
    "clm_batch_fixed",
    "clm_batch_shifted_twice",
    "clm_batch_pad_is_eos",
    "decoder_fixed",
    "decoder_without_is_decoder",
    "negatives_fixed",
    "negatives_random_ids",
    "accumulate_fixed",
    "accumulate_mean_of_means",
    "trainer_fixed",
    "trainer_model_loss",
    "model_logits",
    "answer_labels_fixed",
    "answer_labels_everything",
    "chat_batch_fixed",
    "chat_batch_pad_is_eos",
    "chat_packs_fixed",
    "chat_packs_no_boundaries",
    "preference_rows_fixed",
    "preference_rows_swapped",
    "preference_rows_prompt_in_chosen",
    "preference_inputs",
    "reference_logps_fixed",
    "reference_logps_policy",
    "moe_loss_fixed",
    "moe_loss_aux_over_padding",
    "moe_loss_router_logits_off",
    "moe_accumulate_fixed",
    "moe_accumulate_aux_not_divided",
    "mtp_loss_fixed",
    "mtp_loss_shifted_one_short",
    "mtp_loss_extra_depth_not_added",
]

Batch = dict[str, torch.Tensor]
Tensor = torch.Tensor
Conversation = tuple[list[int], list[int]]  # (input_ids, labels) of one rendered conversation
MAX_PACK_TOKENS = 128  # a pack holds whole conversations up to the models' 128 positions


def model_logits(model: torch.nn.Module, batch: Batch) -> Tensor:
    """The logits of ``model`` on every field of ``batch`` but its ``labels``, ``(B, T, V)``;
    without a cache, so that packed ``position_ids`` give each document its own attention (with
    a cache, transformers' mask ignores them)."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    return model(**inputs, use_cache=False).logits


# --- mask ----------------------------------------------------------------------------------


def masked_batch(
    rows: list[list[int]], tokenizer: Any, mask: Callable[..., Any], generator: torch.Generator
) -> Batch:
    """``rows`` padded with [PAD] (:func:`lmlessons.packing.pad_documents`), then masked by
    ``mask`` (a mask function below): ``input_ids`` (masked), ``attention_mask`` and ``labels``,
    ``(B, T)`` each."""
    batch = pad_documents(rows, pad_token_id=tokenizer.pad_token_id)  # (B, T) each
    inputs, labels = mask(batch["input_ids"], batch["attention_mask"], tokenizer, generator)
    return {"input_ids": inputs, "attention_mask": batch["attention_mask"], "labels": labels}


def mask_fixed(
    input_ids: Tensor, attention_mask: Tensor, tokenizer: Any, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    special = torch.isin(input_ids, special_token_ids(tokenizer))  # FIX: [CLS] [SEP] [PAD]
    return mask_tokens(
        input_ids,
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        special_tokens_mask=special,  # FIX: never selected
        generator=generator,
    )


def mask_special_tokens_too(
    input_ids: Tensor, attention_mask: Tensor, tokenizer: Any, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    return mask_tokens(  # BUG: no special_tokens_mask: [CLS], [SEP] and [PAD] are selected too
        input_ids,
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        generator=generator,
    )


def mask_every_token_a_target(
    input_ids: Tensor, attention_mask: Tensor, tokenizer: Any, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    masked, _ = mask_fixed(input_ids, attention_mask, tokenizer, generator)
    labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)  # BUG: every token a target
    return masked, labels


# --- MLM loss ------------------------------------------------------------------------------


# Every position is scored, the unmasked ones times 0 (as inside F.cross_entropy's "mean"), so a
# 0 / 0 NaN reaches every gradient; lmlessons.losses.token_nll's ignored positions would not.


def mlm_loss_fixed(logits: Tensor, labels: Tensor) -> Tensor:
    losses = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
    masked = (labels != IGNORE_INDEX).float()  # (B, T): 1 where a token was selected
    return (losses * masked).sum() / masked.sum().clamp(min=1)  # FIX: 0 / 1 = 0 if none


def mlm_loss_zero_over_zero(logits: Tensor, labels: Tensor) -> Tensor:
    losses = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
    masked = (labels != IGNORE_INDEX).float()  # (B, T): 1 where a token was selected
    return (losses * masked).sum() / masked.sum()  # BUG: 0 / 0 = NaN if nothing is masked


# --- CLM batch -----------------------------------------------------------------------------


def clm_batch_fixed(rows: list[list[int]], tokenizer: Any) -> Batch:
    pad_token_id = tokenizer.pad_token_id  # FIX: a pad token of its own, [PAD]
    batch = pad_documents(rows, pad_token_id=pad_token_id)  # (B, T) each; labels -100 on padding
    return batch  # FIX: labels unshifted, padding found by position: every [SEP] keeps its label


def clm_batch_shifted_twice(rows: list[list[int]], tokenizer: Any) -> Batch:
    batch = pad_documents(rows, pad_token_id=tokenizer.pad_token_id)  # (B, T) each
    labels = batch["labels"].roll(-1, dims=1)  # BUG: shifted here, and the model shifts again
    labels[:, -1] = IGNORE_INDEX
    return {**batch, "labels": labels}


def clm_batch_pad_is_eos(rows: list[list[int]], tokenizer: Any) -> Batch:
    pad_token_id = tokenizer.sep_token_id  # BUG: pad_token = eos_token
    batch = pad_documents(rows, pad_token_id=pad_token_id)  # (B, T) each
    ids = batch["input_ids"]
    return {**batch, "labels": ids.masked_fill(ids == pad_token_id, IGNORE_INDEX)}  # BUG: [SEP] too


# --- decoder -------------------------------------------------------------------------------


def decoder_fixed(tokenizer: Any, seed: int) -> Any:
    config = tiny_bert_config(tokenizer, is_decoder=True)  # FIX: causal self-attention
    return seeded_model("BertLMHeadModel", config, seed)


def decoder_without_is_decoder(tokenizer: Any, seed: int) -> Any:
    config = tiny_bert_config(tokenizer)  # BUG: is_decoder defaults to False: attends both ways
    return seeded_model("BertLMHeadModel", config, seed)


# --- negatives -----------------------------------------------------------------------------


def negatives_fixed(pairs: Batch, tokenizer: Any, generator: torch.Generator) -> Batch:
    return pairs  # FIX: keep make_nsp_pairs' NotNext B: real text from another document


def negatives_random_ids(pairs: Batch, tokenizer: Any, generator: torch.Generator) -> Batch:
    ids, special = pairs["input_ids"], torch.isin(pairs["input_ids"], special_token_ids(tokenizer))
    notnext_b = (pairs["token_type_ids"] == 1) & (pairs["next_sentence_label"][:, None] == 1)
    noise = torch.randint(0, len(tokenizer), ids.shape, generator=generator)  # (B, T)
    return {**pairs, "input_ids": torch.where(notnext_b & ~special, noise, ids)}  # BUG: not text


# --- accumulate ----------------------------------------------------------------------------


def accumulate_fixed(model: torch.nn.Module, micro_batches: list[Batch]) -> float:
    n = sum(int((shift_labels(b["labels"]) != IGNORE_INDEX).sum()) for b in micro_batches)  # FIX
    reported = 0.0
    for b in micro_batches:
        logits = model_logits(model, b)  # (B, T, V)
        loss = clm_loss(logits, b["labels"], num_items_in_batch=n)  # FIX: sum / step's count
        loss.backward()
        reported += loss.item()
    return reported


def accumulate_mean_of_means(model: torch.nn.Module, micro_batches: list[Batch]) -> float:
    reported = 0.0
    for b in micro_batches:
        logits = model_logits(model, b)  # (B, T, V)
        loss = clm_loss(logits, b["labels"]) / len(micro_batches)  # BUG: a mean of means
        loss.backward()
        reported += loss.item()
    return reported


# --- trainer -------------------------------------------------------------------------------


def trainer_fixed(**trainer_kwargs: Any) -> Trainer:
    from transformers import Trainer

    loss_func = course_compute_loss_func("BertForMaskedLM")  # FIX: sum / num_items_in_batch
    return Trainer(**{**trainer_kwargs, "compute_loss_func": loss_func})


def trainer_model_loss(**trainer_kwargs: Any) -> Trainer:
    from transformers import Trainer

    loss_func = None  # BUG: BertForMaskedLM's loss: drops num_items_in_batch, never divided by K
    return Trainer(**{**trainer_kwargs, "compute_loss_func": loss_func})


# --- answer labels -------------------------------------------------------------------------


def answer_labels_fixed(input_ids: Tensor, assistant_masks: Tensor) -> Tensor:
    return assistant_only_labels(input_ids, assistant_masks)  # FIX: the answer and its [SEP] only


def answer_labels_everything(input_ids: Tensor, assistant_masks: Tensor) -> Tensor:
    return input_ids.clone()  # BUG: the prompt is a target too


# --- chat batch ----------------------------------------------------------------------------


def chat_batch_fixed(rows: list[Conversation], tokenizer: Any) -> list[Batch]:
    pad_token_id = tokenizer.pad_token_id  # FIX: a pad token of its own, [PAD]
    batch = pad_documents([ids for ids, _ in rows], pad_token_id=pad_token_id)  # (B, T) each
    labels = pad([labels for _, labels in rows], IGNORE_INDEX)  # (B, T)
    return [{**batch, "labels": labels}]  # FIX: padding found by position: [SEP] keeps its label


def chat_batch_pad_is_eos(rows: list[Conversation], tokenizer: Any) -> list[Batch]:
    pad_token_id = tokenizer.eos_token_id  # BUG: pad_token = eos_token
    batch = pad_documents([ids for ids, _ in rows], pad_token_id=pad_token_id)  # (B, T) each
    labels = pad([labels for _, labels in rows], IGNORE_INDEX)  # (B, T)
    labels = labels.masked_fill(batch["input_ids"] == pad_token_id, IGNORE_INDEX)  # BUG: [SEP]
    return [{**batch, "labels": labels}]


def _packs(rows: list[Conversation]) -> list[list[Conversation]]:
    """``rows`` in order, cut into packs of whole conversations of at most MAX_PACK_TOKENS."""
    packs: list[list[Conversation]] = [[]]
    for row in rows:
        if packs[-1] and sum(len(ids) for ids, _ in packs[-1]) + len(row[0]) > MAX_PACK_TOKENS:
            packs.append([])
        packs[-1].append(row)
    return packs


def chat_packs_fixed(rows: list[Conversation], tokenizer: Any) -> list[Batch]:
    packs = [flatten_documents([i for i, _ in p], labels=[y for _, y in p]) for p in _packs(rows)]
    return packs  # FIX: position_ids restart at 0: each conversation attends to itself only


def chat_packs_no_boundaries(rows: list[Conversation], tokenizer: Any) -> list[Batch]:
    packs = [flatten_documents([i for i, _ in p], labels=[y for _, y in p]) for p in _packs(rows)]
    for b in packs:
        del b["position_ids"]  # BUG: positions run on: attention crosses every conversation
    return packs


# --- preference batch ----------------------------------------------------------------------


def preference_rows_fixed(pairs: list[dict[str, list[int]]], tokenizer: Any) -> Batch:
    batch = preference_batch(pairs, pad_token_id=tokenizer.pad_token_id)  # (2B, T) each
    return batch  # FIX: the chosen rows first, labels on the completions only


def preference_rows_swapped(pairs: list[dict[str, list[int]]], tokenizer: Any) -> Batch:
    batch = preference_batch(pairs, pad_token_id=tokenizer.pad_token_id)  # (2B, T) each
    return {k: v.roll(len(pairs), dims=0) for k, v in batch.items()}  # BUG: rejected rows first


def preference_rows_prompt_in_chosen(pairs: list[dict[str, list[int]]], tokenizer: Any) -> Batch:
    batch = preference_batch(pairs, pad_token_id=tokenizer.pad_token_id)  # (2B, T) each
    chosen = (torch.arange(2 * len(pairs)) < len(pairs))[:, None]  # (2B, 1): the first B rows
    ids, real = batch["input_ids"], batch["attention_mask"] == 1  # (2B, T) each
    labels = torch.where(chosen & real, ids, batch["labels"])  # BUG: chosen prompts are targets
    return {**batch, "labels": labels}


# --- reference log-probs -------------------------------------------------------------------


def preference_inputs(batch: Batch) -> Batch:
    """What a causal LM takes of a preference batch: ``input_ids`` and ``attention_mask``."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def reference_logps_fixed(
    reference: torch.nn.Module, policy: torch.nn.Module, batch: Batch
) -> Tensor:
    with torch.no_grad():
        logits = model_logits(
            reference, preference_inputs(batch)
        )  # (2B, T, V); FIX: the frozen reference
        return sequence_logprobs(logits, batch["labels"])  # (2B,)


def reference_logps_policy(
    reference: torch.nn.Module, policy: torch.nn.Module, batch: Batch
) -> Tensor:
    with torch.no_grad():
        logits = model_logits(
            policy, preference_inputs(batch)
        )  # (2B, T, V); BUG: the policy, not frozen
        return sequence_logprobs(logits, batch["labels"])  # (2B,)


# --- MoE loss ------------------------------------------------------------------------------


def _moe_inputs(batch: Batch) -> Batch:
    """What the model takes of a causal batch: ``input_ids`` and ``attention_mask``."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def _routing(model: Any) -> tuple[int, int]:
    """The model's number of experts and of experts per token."""
    return model.config.num_local_experts, model.config.num_experts_per_tok


def moe_loss_fixed(model: Any, batch: Batch, num_items_in_batch: int) -> tuple[Tensor, Any]:
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    out = model(**_moe_inputs(batch), output_router_logits=True)  # one (B*T, E) per layer
    lm = clm_loss(out.logits, batch["labels"], num_items_in_batch=num_items_in_batch)  # ()
    mask = batch["attention_mask"]  # (B, T) FIX: the real tokens only
    return lm, load_balancing_loss_func(out.router_logits, *_routing(model), mask)  # FIX


def moe_loss_aux_over_padding(
    model: Any, batch: Batch, num_items_in_batch: int
) -> tuple[Tensor, Any]:
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    out = model(**_moe_inputs(batch), output_router_logits=True)  # one (B*T, E) per layer
    lm = clm_loss(out.logits, batch["labels"], num_items_in_batch=num_items_in_batch)  # ()
    return lm, load_balancing_loss_func(out.router_logits, *_routing(model))  # BUG: no mask


def moe_loss_router_logits_off(
    model: Any, batch: Batch, num_items_in_batch: int
) -> tuple[Tensor, Any]:
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    out = model(**_moe_inputs(batch))  # BUG: output_router_logits defaults to False: None
    lm = clm_loss(out.logits, batch["labels"], num_items_in_batch=num_items_in_batch)  # ()
    mask = batch["attention_mask"]  # (B, T)
    return lm, load_balancing_loss_func(out.router_logits, *_routing(model), mask)  # BUG: 0


# --- MoE accumulate ------------------------------------------------------------------------


def moe_accumulate_fixed(
    model: Any, micro_batches: list[Batch], moe_loss: Callable[..., Any]
) -> tuple[float, float]:
    n = sum(int((shift_labels(b["labels"]) != IGNORE_INDEX).sum()) for b in micro_batches)
    k, coef = len(micro_batches), model.config.router_aux_loss_coef
    reported, reported_aux = 0.0, 0.0
    for b in micro_batches:
        lm, aux = moe_loss(model, b, n)  # lm: its sum / the step's count; aux: its own mean
        loss = lm + coef * aux / k  # FIX: the step's aux loss is the mean of the K micro-batches'
        loss.backward()
        reported += loss.item()
        reported_aux += torch.as_tensor(aux).item() / k  # a plain 0 without router logits
    return reported, reported_aux


def moe_accumulate_aux_not_divided(
    model: Any, micro_batches: list[Batch], moe_loss: Callable[..., Any]
) -> tuple[float, float]:
    n = sum(int((shift_labels(b["labels"]) != IGNORE_INDEX).sum()) for b in micro_batches)
    coef = model.config.router_aux_loss_coef
    reported, reported_aux = 0.0, 0.0
    for b in micro_batches:
        lm, aux = moe_loss(model, b, n)  # lm: its sum / the step's count; aux: its own mean
        loss = lm + coef * aux  # BUG: K micro-batches' aux losses added up, never divided by K
        loss.backward()
        reported += loss.item()
        reported_aux += torch.as_tensor(aux).item()  # a plain 0 without router logits
    return reported, reported_aux


# --- MTP loss ------------------------------------------------------------------------------


def mtp_loss_fixed(logits_per_depth: list[Tensor], labels: Tensor) -> tuple[Tensor, Tensor]:
    losses = mtp_losses(logits_per_depth, labels)  # (D,) FIX: depth d scored d tokens ahead
    return losses.mean(), losses


def mtp_loss_shifted_one_short(
    logits_per_depth: list[Tensor], labels: Tensor
) -> tuple[Tensor, Tensor]:
    losses = torch.stack([clm_loss(logits, labels) for logits in logits_per_depth])  # (D,)
    return losses.mean(), losses  # BUG: clm_loss shifts by 1: every depth scored 1 token ahead


def mtp_loss_extra_depth_not_added(
    logits_per_depth: list[Tensor], labels: Tensor
) -> tuple[Tensor, Tensor]:
    losses = mtp_losses(logits_per_depth, labels)  # (D,): depth d scored d tokens ahead
    return losses[0], losses  # BUG: the next-token loss only: the extra depths logged, not trained
