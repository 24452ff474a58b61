"""Preference losses: a pair of completions of one prompt, the chosen one preferred to the rejected.

DPO (Rafailov et al. 2023, arXiv 2305.18290) trains a policy on such pairs against a frozen
reference model, with no reward model: the *implicit reward* of a completion is ``beta`` times
the log-ratio of its log-probability under the policy and under the reference, and the loss pushes
the chosen reward above the rejected one. Everything reduces to one number per sequence, the sum
of the log-probabilities of its completion tokens (:func:`sequence_logprobs`), as in TRL's
``DPOTrainer`` (1.16):

1. :func:`preference_batch`: each example's prompt + chosen and prompt + rejected, the chosen rows
   stacked over the rejected ones, right-padded (TRL's ``DataCollatorForPreference``), with labels
   -100 on the prompt and the padding (``input_ids.masked_fill(completion_mask == 0, -100)``);
2. :func:`sequence_logprobs` of the policy's and of the reference's logits on that batch, then
   ``.chunk(2)`` into chosen and rejected (:func:`completion_logps`: the model's forward pass
   and that, in one call);
3. :func:`dpo_loss` (the per-pair losses and the rewards) and, without a reference,
   :func:`simpo_loss`;
4. what TRL logs about the rewards: :func:`reward_accuracies`, :func:`reward_margins` and
   :func:`preference_metrics` (its ``rewards/*`` and ``logps/*`` keys); :func:`preference_probe`:
   per pair, what a run of the course watches (log-probabilities, the policy's own preference,
   the reward accuracy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from lmlessons._checks import (
    IGNORE_INDEX,
    check_float_tensor,
    check_int,
    check_int_tensor,
    check_logits_labels,
    check_model,
    check_real,
)
from lmlessons.answer_only import completion_only_labels
from lmlessons.losses import token_nll
from lmlessons.packing import pad

__all__ = [
    "LOSS_TYPES",
    "LENGTH_NORMALISED_LOSS_TYPES",
    "preference_batch",
    "sequence_logprobs",
    "completion_logps",
    "preference_probe",
    "dpo_loss",
    "simpo_loss",
    "reward_accuracies",
    "reward_margins",
    "preference_metrics",
]

# The DPOConfig.loss_type values of TRL 1.16 this module implements, and those of them that divide
# each log-ratio by its completion's token count.
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "sigmoid_norm", "bco_pair")
LENGTH_NORMALISED_LOSS_TYPES = ("ipo", "sigmoid_norm")
EXAMPLE_KEYS = ("prompt_ids", "chosen_ids", "rejected_ids")


def _check_per_pair(values: Mapping[str, object]) -> list[torch.Tensor]:
    """Float tensors of one shape ``(B,)``, one value per pair; the first sets ``B``."""
    out: list[torch.Tensor] = []
    for name, value in values.items():
        tensor = check_float_tensor(name, value)
        if tensor.dim() != 1 or tensor.shape[0] == 0:
            raise ValueError(f"{name} must have shape (B,) with B >= 1, got {tuple(tensor.shape)}")
        if out and tensor.shape != out[0].shape:
            first = next(iter(values))
            raise ValueError(
                f"{name} must have the shape of {first} {tuple(out[0].shape)}, "
                f"got {tuple(tensor.shape)}"
            )
        out.append(tensor)
    return out


def _check_lengths(name: str, value: object, batch: int) -> torch.Tensor:
    """Completion token counts: an integer tensor ``(B,)``, every count >= 1."""
    value = check_int_tensor(name, value)
    if tuple(value.shape) != (batch,):
        raise ValueError(f"{name} must have shape ({batch},), got {tuple(value.shape)}")
    if bool((value < 1).any()):
        raise ValueError(f"{name} must be >= 1 (a completion with no token has no log-probability)")
    return value


def _margin(
    loss_type: str,
    chosen_logratios: torch.Tensor,
    rejected_logratios: torch.Tensor,
    chosen_lengths: object,
    rejected_lengths: object,
) -> torch.Tensor:
    """``(B,)``: chosen minus rejected log-ratio, each divided by its completion's token count
    first for the length-normalised loss types (``delta_score`` and ``ipo_delta`` in TRL)."""
    if loss_type not in LENGTH_NORMALISED_LOSS_TYPES:
        return chosen_logratios - rejected_logratios  # (B,)
    for name, value in (("chosen_lengths", chosen_lengths), ("rejected_lengths", rejected_lengths)):
        if value is None:
            raise ValueError(f"{name} must be given for loss_type={loss_type!r} (token counts)")
    batch = len(chosen_logratios)
    chosen = chosen_logratios / _check_lengths("chosen_lengths", chosen_lengths, batch)  # (B,)
    rejected = rejected_logratios / _check_lengths("rejected_lengths", rejected_lengths, batch)
    return chosen - rejected  # (B,)


def _pair_losses(
    loss_type: str,
    beta: float,
    chosen_logratios: torch.Tensor,
    rejected_logratios: torch.Tensor,
    chosen_lengths: object,
    rejected_lengths: object,
) -> torch.Tensor:
    """``(B,)``: the loss of each pair for one of :data:`LOSS_TYPES` (see :func:`dpo_loss`)."""
    if loss_type == "bco_pair":  # each reward on its own
        chosen_term = -F.logsigmoid(beta * chosen_logratios)  # (B,)
        return chosen_term - F.logsigmoid(-beta * rejected_logratios)  # (B,)
    lengths = (chosen_lengths, rejected_lengths)
    delta = _margin(loss_type, chosen_logratios, rejected_logratios, *lengths)  # (B,)
    if loss_type == "hinge":
        return torch.relu(1 - beta * delta)  # (B,)
    if loss_type == "ipo":
        return (delta - 1 / (2 * beta)) ** 2  # (B,)
    return -F.logsigmoid(beta * delta)  # (B,): sigmoid, sigmoid_norm


def preference_batch(
    examples: Sequence[Mapping[str, Sequence[int] | torch.Tensor]], *, pad_token_id: int
) -> dict[str, torch.Tensor]:
    """One batch of ``2B`` rows from ``B`` preference pairs: the ``B`` prompt + chosen rows, then
    the ``B`` prompt + rejected rows, right-padded by :func:`lmlessons.packing.pad`.

    ``examples``: dicts with ``prompt_ids``, ``chosen_ids`` and ``rejected_ids`` (lists of ints or
    1-D tensors; the completions not empty), as TRL's ``DPOTrainer`` tokenizes them. Returns
    ``input_ids`` (padded with ``pad_token_id``), ``attention_mask``, ``completion_mask`` (1 on
    the completion) and ``labels`` (the ids on the completion, -100 on the prompt and the
    padding), each ``(2B, T)``. The first three are what ``DataCollatorForPreference`` returns
    (``trl/trainer/dpo_trainer.py``, ``torch_call``, without its ``max_length`` truncation and
    ``pad_to_multiple_of``); ``labels`` is what ``DPOTrainer._compute_loss`` builds from them.
    So ``.chunk(2)`` of any per-row result gives its chosen and its rejected halves.
    """
    # 1. Validate: a non-empty list of dicts with the three keys.
    if not isinstance(examples, Sequence) or isinstance(examples, (str, bytes)):
        raise TypeError(f"examples must be a list of dicts, got {type(examples).__name__}")
    if len(examples) == 0:
        raise ValueError("examples must hold at least one preference pair, got an empty list")
    pad_token_id = check_int("pad_token_id", pad_token_id, minimum=0)
    for i, example in enumerate(examples):
        if not isinstance(example, Mapping) or any(key not in example for key in EXAMPLE_KEYS):
            raise ValueError(f"examples[{i}] must be a dict with the keys {EXAMPLE_KEYS}")
    # 2. Each row: prompt then completion, its completion mask and its labels; chosen rows first.
    rows = []
    for key in ("chosen_ids", "rejected_ids"):
        for i, example in enumerate(examples):
            try:
                rows.append(completion_only_labels(example["prompt_ids"], example[key]))
            except (TypeError, ValueError) as err:  # its message starts with the name it gave
                name, _, rest = str(err).partition(" ")
                field = "prompt_ids" if name == "prompt_ids" else key
                raise type(err)(f"examples[{i}][{field!r}] {rest}") from None
    # 3. Pad every key to the longest row, on the right.
    return {
        "input_ids": pad([r["input_ids"] for r in rows], pad_token_id),  # (2B, T)
        "attention_mask": pad([[1] * len(r["input_ids"]) for r in rows], 0),  # (2B, T)
        "completion_mask": pad([r["completion_mask"] for r in rows], 0),  # (2B, T)
        "labels": pad([r["labels"] for r in rows], IGNORE_INDEX),  # (2B, T)
    }


def sequence_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, *, average: bool = False
) -> torch.Tensor:
    """``(B,)``: the log-probability of each row's targets, summed over them (``average=True``:
    their mean), from a causal LM's ``(B, T, V)`` logits and its unshifted ``(B, T)`` labels
    (-100 on the prompt and the padding; shifted here).

    1. :func:`lmlessons.losses.token_nll`: the loss of every position against ``labels[:, t + 1]``,
       0 where there is no target.
    2. The log-probability is minus that loss, summed per row: what TRL's ``DPOTrainer`` computes
       for the policy and the reference (``trl/trainer/dpo_trainer.py``, ``_compute_loss``: labels
       ``input_ids.masked_fill(completion_mask == 0, -100)`` at line 1298,
       ``per_token_logps.sum(dim=1)`` at line 1304, ``logps.chunk(2, dim=0)`` into chosen and
       rejected at line 1316; the reference at lines 1339-1347).
    3. ``average=True`` divides by the row's number of targets: TRL's
       ``CPOTrainer.get_batch_logps(..., average_log_prob=True)``
       (``trl/experimental/cpo/cpo_trainer.py``, line 787), which SimPO (and CPO's ``ipo``) use.
       A row without any target is then an error (0 / 0).
    """
    logits, labels = check_logits_labels(logits, labels)
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape (B, T, V), got {tuple(logits.shape)}")
    nll, has_target = token_nll(logits, labels, shift=True)  # (B, T), (B, T)
    logps = -nll.sum(dim=-1)  # (B,): 0 for a row without a target
    if not average:
        return logps
    counts = has_target.sum(dim=-1)  # (B,)
    if bool((counts == 0).any()):
        row = int((counts == 0).nonzero()[0])
        raise ValueError(f"labels row {row} has no target after the shift: it has no average")
    return logps / counts  # (B,)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float = 0.1,
    loss_type: str = "sigmoid",
    chosen_lengths: torch.Tensor | None = None,
    rejected_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(losses, chosen_rewards, rejected_rewards)``, each ``(B,)``: the loss of every pair and
    the implicit rewards ``beta * (policy_logps - ref_logps)`` (detached). The batch loss is
    ``losses.mean()``. TRL 1.16 has no ``dpo_loss`` function: this is the loss of
    ``DPOTrainer._compute_loss`` (``trl/trainer/dpo_trainer.py``, lines 1350-1528, with the
    default ``f_divergence_type="reverse_kl"``, no ``ld_alpha``, no ``use_weighting``).

    The four log-probabilities are :func:`sequence_logprobs` sums, ``(B,)``. With the log-ratios
    ``c = policy_chosen - ref_chosen``, ``r = policy_rejected - ref_rejected`` and ``d = c - r``:

    * ``"sigmoid"``: ``-log sigmoid(beta * d)``, DPO's loss (arXiv 2305.18290, Eq. 7; line 1388);
    * ``"hinge"``: ``relu(1 - beta * d)``, SLiC's (line 1391);
    * ``"ipo"``: ``(d' - 1 / (2 * beta))**2``, IPO (Azar et al., arXiv 2310.12036; Eq. 17 in
      TRL's comment; ``beta`` its tau), where ``d'`` divides each log-ratio by its completion's
      token count (``chosen_lengths``, ``rejected_lengths``): TRL's normalisation, which its
      comment says the authors confirmed, not written in the paper (lines 1393-1404);
    * ``"sigmoid_norm"``: the sigmoid loss on those per-token log-ratios (lines 1504-1509);
    * ``"bco_pair"``: ``-log sigmoid(beta * c) - log sigmoid(-beta * r)``: each reward on its own,
      so the prompt does not cancel from it (line 1436).

    ``chosen_lengths``, ``rejected_lengths``: integer ``(B,)`` counts of completion tokens, needed
    by ``ipo`` and ``sigmoid_norm`` (TRL: ``completion_mask.chunk(2)``, each ``.sum(dim=1)``).
    """
    # 1. Validate: four (B,) float tensors, beta > 0, a known loss type, lengths if it needs them.
    c_pol, r_pol, c_ref, r_ref = _check_per_pair(
        {
            "policy_chosen_logps": policy_chosen_logps,
            "policy_rejected_logps": policy_rejected_logps,
            "ref_chosen_logps": ref_chosen_logps,
            "ref_rejected_logps": ref_rejected_logps,
        }
    )
    beta = check_real("beta", beta, positive=True)
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    # 2. The log-ratios against the reference: the rewards, divided by beta.
    chosen_logratios = c_pol - c_ref  # (B,)
    rejected_logratios = r_pol - r_ref  # (B,)
    # 3. The loss of each pair.
    lengths = (chosen_lengths, rejected_lengths)
    losses = _pair_losses(loss_type, beta, chosen_logratios, rejected_logratios, *lengths)  # (B,)
    # 4. The implicit rewards, for logging only (TRL detaches them, lines 1582-1583).
    return losses, beta * chosen_logratios.detach(), beta * rejected_logratios.detach()


def simpo_loss(
    chosen_avg_logps: torch.Tensor,
    rejected_avg_logps: torch.Tensor,
    *,
    beta: float,
    simpo_gamma: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SimPO (Meng et al. 2024, arXiv 2405.14734): ``(losses, chosen_rewards,
    rejected_rewards)``, each ``(B,)``, with no reference model.

    ``chosen_avg_logps``, ``rejected_avg_logps``: the policy's *average* log-probabilities per
    completion token (:func:`sequence_logprobs` with ``average=True``). The reward of a completion
    is ``beta`` times it; the loss is ``-log sigmoid(beta * (chosen - rejected) - simpo_gamma)``,
    ``simpo_gamma`` the target reward margin (the paper's gamma; its code's ``gamma_beta_ratio``
    is ``simpo_gamma / beta``). Equals TRL's ``CPOTrainer.cpo_loss`` with ``loss_type="simpo"``
    and the defaults ``alpha=0.0``, ``label_smoothing=0.0``
    (``trl/experimental/cpo/cpo_trainer.py``, lines 715-721, rewards at lines 748-749); SimPO
    itself also needs ``cpo_alpha=0.0``, or TRL adds ``cpo_alpha`` times the chosen
    completions' NLL (line 890).
    """
    chosen, rejected = _check_per_pair(
        {"chosen_avg_logps": chosen_avg_logps, "rejected_avg_logps": rejected_avg_logps}
    )
    beta = check_real("beta", beta, positive=True)
    simpo_gamma = check_real("simpo_gamma", simpo_gamma, positive=False)
    logits = (chosen - rejected) - simpo_gamma / beta  # (B,): TRL's order of operations
    losses = -F.logsigmoid(beta * logits)  # (B,)
    return losses, beta * chosen.detach(), beta * rejected.detach()


def reward_accuracies(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """``(B,)`` floats, 1.0 where the chosen reward beats the rejected one: the per-pair values of
    TRL's ``rewards/accuracies`` (``trl/trainer/dpo_trainer.py``, line 1590).

    With DPO's rewards this asks whether the policy raised the chosen completion *relative to
    the reference* more than the rejected one, not whether the policy gives the chosen one the
    higher log-probability: a policy can be 100% "accurate" while preferring every rejected
    completion, if the reference preferred them even more.
    """
    chosen, rejected = _check_per_pair(
        {"chosen_rewards": chosen_rewards, "rejected_rewards": rejected_rewards}
    )
    return (chosen > rejected).float()  # (B,)


def reward_margins(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """``(B,)``: chosen minus rejected reward, the per-pair values of TRL's ``rewards/margins``
    (``trl/trainer/dpo_trainer.py``, line 1595). The sigmoid loss of a pair is
    ``-log sigmoid(margin)``."""
    chosen, rejected = _check_per_pair(
        {"chosen_rewards": chosen_rewards, "rejected_rewards": rejected_rewards}
    )
    return chosen - rejected  # (B,)


def preference_metrics(
    chosen_rewards: torch.Tensor,
    rejected_rewards: torch.Tensor,
    *,
    chosen_logps: torch.Tensor | None = None,
    rejected_logps: torch.Tensor | None = None,
) -> dict[str, float]:
    """The batch means TRL's ``DPOTrainer`` logs under these keys (``trl/trainer/dpo_trainer.py``,
    lines 1581-1601): ``rewards/chosen``, ``rewards/rejected``, ``rewards/accuracies``,
    ``rewards/margins`` and, given the policy's log-probabilities, ``logps/chosen`` and
    ``logps/rejected``. One process; TRL gathers over processes first."""
    accuracies = reward_accuracies(chosen_rewards, rejected_rewards)  # (B,), checks both
    metrics = {
        "rewards/chosen": float(chosen_rewards.detach().mean()),
        "rewards/rejected": float(rejected_rewards.detach().mean()),
        "rewards/accuracies": float(accuracies.mean()),
        "rewards/margins": float(reward_margins(chosen_rewards, rejected_rewards).detach().mean()),
    }
    for key, name, value in (
        ("logps/chosen", "chosen_logps", chosen_logps),
        ("logps/rejected", "rejected_logps", rejected_logps),
    ):
        if value is not None:
            (checked,) = _check_per_pair({name: value})
            metrics[key] = float(checked.detach().mean())
    return metrics


def completion_logps(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    labels: torch.Tensor | None = None,
    *,
    average: bool = False,
) -> torch.Tensor:
    """``(2B,)``: :func:`sequence_logprobs` of ``model``'s logits on ``batch``'s ``input_ids``
    and ``attention_mask`` (a :func:`preference_batch`, chosen rows first), against ``labels``
    (default ``batch["labels"]``): each completion's summed log-probability (``average=True``:
    per target). Gradients flow; wrap the call in ``torch.no_grad()`` to measure only."""
    model = check_model(model)
    if not isinstance(batch, Mapping) or not {"input_ids", "attention_mask"} <= set(batch):
        raise TypeError("batch must be a mapping with 'input_ids' and 'attention_mask'")
    labels = batch["labels"] if labels is None else labels
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return sequence_logprobs(logits, labels, average=average)  # (2B, T, V) -> (2B,)


@torch.no_grad()
def preference_probe(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], reference_logps: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per pair of ``batch`` (chosen rows first), ``(B,)`` each: ``chosen_logps`` and
    ``rejected_logps`` (:func:`completion_logps` of ``model``), ``policy_prefers_chosen`` (1.0
    where the policy itself gives the chosen completion the higher summed log-probability) and
    ``reward_accuracy`` (:func:`reward_accuracies` of the log-ratios against the reference's
    ``reference_logps`` ``(2B,)``: TRL's ``rewards/accuracies`` for any ``beta > 0``; a tie is
    no win). Measured without gradients; the means over pairs are what a run logs."""
    reference = check_float_tensor("reference_logps", reference_logps)
    chosen, rejected = completion_logps(model, batch).chunk(2)  # (B,) each
    if reference.shape != (2 * chosen.shape[0],):
        raise ValueError(
            f"reference_logps must have shape ({2 * chosen.shape[0]},), one value per row of "
            f"batch, got {tuple(reference.shape)}"
        )
    ref_chosen, ref_rejected = reference.chunk(2)  # (B,) each
    return {
        "chosen_logps": chosen,
        "rejected_logps": rejected,
        "policy_prefers_chosen": (chosen > rejected).float(),  # (B,)
        "reward_accuracy": reward_accuracies(chosen - ref_chosen, rejected - ref_rejected),
    }
