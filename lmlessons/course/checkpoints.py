"""The course's small pretrained models: saved as safetensors + config JSON + metrics JSON.

Five checkpoints ship in ``lmlessons/data/checkpoints/`` (built by ``python -m tools.pretrain``):

* ``"bert"``: ``BertForPreTraining`` trained with MLM + NSP on the course corpus,
* ``"bert-causal"``: ``BertLMHeadModel(is_decoder=True)`` trained on next-token prediction,
* ``"gpt2"``: a tiny ``GPT2LMHeadModel`` trained on next-token prediction,
* ``"moe"`` and ``"moe-bias"``: the tiny ``MixtralForCausalLM`` of lesson 14 trained without
  balancing and with DeepSeek-V3's bias (:data:`lmlessons.course.moe_runs.MOE_CHECKPOINTS`);
  ``"moe-bias"`` loads with :class:`~lmlessons.course.moe_runs.BiasedRouter` routers whose
  ``expert_bias`` buffers hold the trained bias. Their weights are stored in float16
  (``save_checkpoint(..., dtype=torch.float16)``) and loaded back into float32.

Loading never unpickles anything: the config is JSON, the model class comes from a fixed table
(not from the file), and the weights are read with ``safetensors`` (plain tensors, no code).
Each ``<name>.metrics.json`` records held-out metrics computed by :func:`heldout_metrics` on the
validation split with a fixed generator, so a test can recompute and compare them.
``bert.warm_start_curves.json`` (:func:`warm_start_curves`, made by ``python -m tools.warm_start``)
records why the ``bert`` recipe starts with a causal warm start: held-out probes of the recipe with
and without it.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "CHECKPOINT_DIR",
    "CHECKPOINT_NAMES",
    "load_checkpoint",
    "checkpoint_metrics",
    "save_checkpoint",
    "heldout_metrics",
    "warm_start_curves",
]

CHECKPOINT_DIR = Path(__file__).resolve().parents[1] / "data" / "checkpoints"
# name -> (model class, config class, objective): transformers classes chosen here, never read
# from a file (a config's "architectures" field could name anything).
_ARCHITECTURES: dict[str, tuple[str, str, str]] = {
    "bert": ("BertForPreTraining", "BertConfig", "pretraining"),
    "bert-causal": ("BertLMHeadModel", "BertConfig", "clm"),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", "clm"),
    "moe": ("MixtralForCausalLM", "MixtralConfig", "clm"),
    "moe-bias": ("MixtralForCausalLM", "MixtralConfig", "clm"),
}
# The checkpoints whose routers are DeepSeek-V3's biased ones (an ``expert_bias`` buffer each).
_BIASED_ROUTERS = frozenset({"moe-bias"})
_MOE = frozenset({"moe", "moe-bias"})
_STORED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_name(name: object) -> str:
    if name not in _ARCHITECTURES:
        raise ValueError(f"unknown checkpoint {name!r}; choose one of {CHECKPOINT_NAMES}")
    return name


def _classes(name: str) -> tuple[Any, Any]:
    """The transformers model and config classes of checkpoint ``name``."""
    import transformers

    model_class, config_class, _ = _ARCHITECTURES[_check_name(name)]
    return getattr(transformers, model_class), getattr(transformers, config_class)


CHECKPOINT_NAMES = tuple(_ARCHITECTURES)
EVAL_SEED = 1234  # the generator seed of the held-out metrics (masking and NSP pairs)
# Held-out sequences are as long as the training ones (see tools.pretrain.RECIPES).
EVAL_MAX_LENGTH = {"bert": 64, "bert-causal": 128, "gpt2": 128, "moe": 64, "moe-bias": 64}
WARM_START_CURVES_FILE = "bert.warm_start_curves.json"  # made by python -m tools.warm_start
EVAL_EPOCHS = 4  # passes over the validation documents (each with new masks / pairs)


def _paths(name: str, directory: str | Path | None) -> tuple[Path, Path, Path]:
    _check_name(name)
    d = CHECKPOINT_DIR if directory is None else Path(directory).expanduser()
    return d / f"{name}.safetensors", d / f"{name}.config.json", d / f"{name}.metrics.json"


def save_checkpoint(
    model: PreTrainedModel,
    name: str,
    directory: str | Path,
    *,
    metrics: dict[str, Any] | None = None,
    dtype: torch.dtype | None = None,
) -> list[Path]:
    """Write ``<name>.safetensors``, ``<name>.config.json`` and (if given) ``<name>.metrics.json``
    into ``directory``; returns the paths. Tied weights are stored once (``save_model``).
    ``dtype``: store the floating-point tensors in it (``torch.float16`` or ``torch.bfloat16``
    halve the file; :func:`load_checkpoint` reads them back into float32); default: as they are.
    """
    model_class, _ = _classes(name)
    if type(model) is not model_class:
        raise TypeError(
            f"checkpoint {name!r} holds a {model_class.__name__}, got a {type(model).__name__}"
        )
    if dtype is not None and dtype not in _STORED_DTYPES:
        raise ValueError(f"dtype must be one of {_STORED_DTYPES}, got {dtype!r}")
    _check_routers(name, model)
    weights, config, metrics_path = _paths(name, directory)
    weights.parent.mkdir(parents=True, exist_ok=True)
    stored = model if dtype is None else copy.deepcopy(model).to(dtype)
    save_model(stored, str(weights), metadata={"format": "pt", "lmlessons_checkpoint": name})
    config.write_text(model.config.to_json_string(use_diff=False), encoding="utf-8")
    written = [weights, config]
    if metrics is not None:
        metrics_path.write_text(
            json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        written.append(metrics_path)
    return written


def _check_routers(name: str, model: Any) -> None:
    """An MoE checkpoint's routers: biased in ``"moe-bias"``, Mixtral's own in ``"moe"``."""
    if name not in _MOE:
        return
    from lmlessons.course.moe_runs import BiasedRouter, routers

    biased = [isinstance(r, BiasedRouter) for r in routers(model)]
    wanted = name in _BIASED_ROUTERS
    if any(b != wanted for b in biased):
        kind = "BiasedRouter" if wanted else "MixtralTopKRouter"
        raise TypeError(f"checkpoint {name!r} holds a model whose every router is a {kind}")


def load_checkpoint(name: str, *, directory: str | Path | None = None) -> PreTrainedModel:
    """Load a course checkpoint in eval mode: ``model = lmlessons.load_checkpoint("bert")``.

    ``name``: ``"bert"``, ``"bert-causal"``, ``"gpt2"``, ``"moe"`` or ``"moe-bias"`` (its routers
    :class:`~lmlessons.course.moe_runs.BiasedRouter`, with their trained ``expert_bias``).
    ``directory``: where to read from (default: the checkpoints shipped in the package).
    """
    weights, config_path, _ = _paths(name, directory)
    model_class, config_class = _classes(name)
    if not weights.is_file() or not config_path.is_file():
        raise FileNotFoundError(
            f"checkpoint {name!r} not found in {str(weights.parent)!r}; build it with "
            f"`python -m tools.pretrain {name} --out DIR`"
        )
    config_dict = json.loads(config_path.read_text(encoding="utf-8"))
    config_dict.pop("transformers_version", None)
    config = config_class.from_dict(config_dict)
    config._attn_implementation = "eager"
    model = model_class(config)
    if name in _BIASED_ROUTERS:  # the buffers the file's expert_bias tensors are loaded into
        from lmlessons.course.moe_runs import use_biased_routers

        use_biased_routers(model)
    try:
        missing, unexpected = load_model(model, str(weights), strict=True)
    except SafetensorError as err:
        raise ValueError(
            f"checkpoint {name!r}: {str(weights)!r} is not a readable safetensors file ({err})"
        ) from err
    if missing or unexpected:  # strict=True raises first; kept as a guard for older safetensors
        raise ValueError(
            f"checkpoint {name!r} does not match its config: missing {missing}, "
            f"unexpected {unexpected}"
        )
    return model.eval()


def checkpoint_metrics(name: str, *, directory: str | Path | None = None) -> dict[str, Any]:
    """The held-out metrics recorded when the checkpoint was trained."""
    _, _, path = _paths(name, directory)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics for checkpoint {name!r} at {str(path)!r}")
    return json.loads(path.read_text(encoding="utf-8"))


def warm_start_curves(*, directory: str | Path | None = None) -> dict[str, Any]:
    """The recorded probes of the ``bert`` recipe with and without its causal warm start.

    ``runs`` holds two dicts (``"scratch"``, ``"warm"``), each with ``steps`` (optimizer steps,
    warm start included) and one ``probes`` dict per step: held-out ``mlm_loss``,
    ``mlm_accuracy``, ``mlm_top5_accuracy``, ``nsp_accuracy``, ``attention_uniformity`` (1.0 =
    uniform attention) and ``guesses`` for ``probe_sentences``.
    """
    folder = CHECKPOINT_DIR if directory is None else Path(directory)
    path = folder / WARM_START_CURVES_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no warm-start curves at {str(path)!r}")
    return json.loads(path.read_text(encoding="utf-8"))


def heldout_metrics(
    model: PreTrainedModel,
    *,
    name: str,
    corpus: Any = None,
    tokenizer: Any = None,
    max_length: int | None = None,
) -> dict[str, float]:
    """Metrics on the validation split of the course corpus, deterministic (fixed generator).

    ``"bert"``: masked-token top-1 accuracy and MLM loss on masked NSP pairs, NSP accuracy;
    causal checkpoints: next-token perplexity and top-1 accuracy on packed sequences.
    ``max_length`` defaults to the length the checkpoint was trained on (``EVAL_MAX_LENGTH``).
    """
    from lmlessons.course.batches import clm_batches, nsp_batches
    from lmlessons.course.corpus import load_corpus
    from lmlessons.course.tokenizer import load_tokenizer
    from lmlessons.course.training import evaluate

    objective = _ARCHITECTURES[_check_name(name)][2]
    corpus = load_corpus("course") if corpus is None else corpus
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    pairs = objective == "pretraining"  # masked NSP pairs, else packed causal sequences
    batches = (nsp_batches if pairs else clm_batches)(
        corpus.validation,
        tokenizer,
        batch_size=64,
        max_length=EVAL_MAX_LENGTH[name] if max_length is None else max_length,
        epochs=EVAL_EPOCHS if pairs else 1,
        generator=torch.Generator().manual_seed(EVAL_SEED),
    )
    metrics = evaluate(model, batches, objective=objective)
    if objective == "clm":
        metrics["uniform_perplexity"] = float(len(tokenizer))  # a model with no knowledge
    else:
        metrics["uniform_mlm_loss"] = math.log(len(tokenizer))
    return metrics
