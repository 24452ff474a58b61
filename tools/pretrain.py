"""Train the course checkpoints: ``python -m tools.pretrain NAME [--out DIR]``.

``NAME`` is ``bert`` (``BertForPreTraining``, MLM + NSP), ``bert-causal``
(``BertLMHeadModel(is_decoder=True)``), ``gpt2`` (``GPT2LMHeadModel``), ``moe`` or ``moe-bias``
(lesson 14's tiny ``MixtralForCausalLM`` without balancing or with DeepSeek-V3's bias at 1e-2,
trained by :func:`lmlessons.course.moe_runs.train_moe`, stored in float16), ``all`` (the five),
or ``tokenizer`` (train the WordPiece tokenizer on the course corpus and write ``tokenizer.json``).
Each run is seeded and uses a fixed step budget, so it is deterministic on a given machine and
thread count. Without ``--out`` the files go to the user cache folder, never into the
repository. The shipped files were made with::

    python -m tools.pretrain tokenizer --out lmlessons/data
    python -m tools.pretrain all --threads 1 --out lmlessons/data/checkpoints

(``all`` runs ``bert``, ``bert-causal``, ``gpt2``, ``moe`` and ``moe-bias`` in turn; the two MoE
checkpoints were added later with ``python -m tools.pretrain moe --threads 1 --out
lmlessons/data/checkpoints`` and the same for ``moe-bias``.)
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lmlessons.course._cache import user_cache_dir
from lmlessons.course.batches import clm_batches, nsp_batches
from lmlessons.course.checkpoints import (
    CHECKPOINT_NAMES,
    heldout_metrics,
    load_checkpoint,
    save_checkpoint,
)
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import (
    count_parameters,
    tiny_bert_lm_head,
    tiny_bert_pretraining,
    tiny_gpt2,
)
from lmlessons.course.moe_runs import (
    METHODS,
    MOE_CHECKPOINTS,
    MOE_SETTINGS,
    heldout_batch,
    measure_routing,
    route_sentence,
    routing_margins,
    train_moe,
)
from lmlessons.course.records import rounded
from lmlessons.course.tokenizer import (
    COURSE_WHOLE_WORDS,
    DEFAULT_VOCAB_SIZE,
    load_tokenizer,
    train_tokenizer,
)
from lmlessons.course.training import train


@dataclass(frozen=True)
class Recipe:
    """How one checkpoint is trained (at most about 5 CPU-minutes with one thread)."""

    build: Callable[..., Any]
    batches: Callable[..., Any]
    max_steps: int
    batch_size: int = 16
    max_length: int = 128
    lr: float = 1e-3
    warmup_steps: int = 100
    dropout: float = 0.0
    causal_warm_start_steps: int = 0


RECIPES: dict[str, Recipe] = {
    # From random weights, a tiny BERT stays a bag of words for thousands of MLM steps (measured:
    # uniform attention after 5,000 steps, "The dog chased the [MASK]." -> "the"): only 15% of
    # positions carry a signal that would teach attention to look at neighbours. A next-token
    # objective gives that signal at every position, so the encoder is first trained for a few
    # hundred steps as BertLMHeadModel(is_decoder=True) (same weights, causal mask), then as
    # BertForPreTraining with MLM + NSP. Dynamic masking and fresh NSP pairs limit memorising.
    "bert": Recipe(
        build=tiny_bert_pretraining,
        batches=nsp_batches,
        max_steps=3000,
        max_length=64,
        causal_warm_start_steps=600,
    ),
    # Causal models learn fast and then memorise the small corpus (measured for bert-causal,
    # dropout 0.1: held-out perplexity 269, 178, 173, 194, 224 after 100..500 steps while the
    # training loss keeps falling; dropout 0.3 is no better), so they stop early.
    "bert-causal": Recipe(
        build=lambda tok, **kw: tiny_bert_lm_head(tok, is_decoder=True, **kw),
        batches=clm_batches,
        max_steps=400,
        lr=2e-3,
        warmup_steps=50,
        dropout=0.1,
    ),
    "gpt2": Recipe(
        build=tiny_gpt2, batches=clm_batches, max_steps=400, lr=2e-3, warmup_steps=50, dropout=0.1
    ),
}


def _causal_warm_start(
    model: Any, corpus: Any, tokenizer: Any, recipe: Recipe, steps: int, seed: int, live: bool
) -> dict[str, Any]:
    """Train the same BERT weights as a causal decoder, then copy them into ``model``."""
    decoder = tiny_bert_lm_head(tokenizer, is_decoder=True, seed=seed, dropout=recipe.dropout)
    batches = clm_batches(
        corpus.train,
        tokenizer,
        batch_size=recipe.batch_size,
        max_length=recipe.max_length,
        generator=torch.Generator().manual_seed(seed + 1),
    )
    history = train(
        decoder, batches, max_steps=steps, lr=2e-3, live=live, title="causal warm start"
    )
    missing, unexpected = model.load_state_dict(decoder.state_dict(), strict=False)
    fresh = {
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    }
    if set(missing) != fresh or unexpected:  # only the NSP head may start from scratch
        raise RuntimeError(f"warm start mismatch: missing {missing}, unexpected {unexpected}")
    return {
        "model": "BertLMHeadModel(is_decoder=True)",
        "objective": "clm",
        "steps": history.num_steps,
        "lr": 2e-3,
        "train_loss_last_50_steps": history.final("loss", 50),
        "fresh_parameters": sorted(fresh),
    }


def default_out_dir() -> Path:
    return user_cache_dir() / "checkpoints"


def _warm_start_steps(recipe: Recipe, max_steps: int | None) -> int:
    if max_steps is None:
        return recipe.causal_warm_start_steps
    return min(recipe.causal_warm_start_steps, max_steps)


def _command(name: str, seed: int, max_steps: int | None) -> str:
    """The command line that reproduces the run."""
    command = f"python -m tools.pretrain {name} --seed {seed} --threads {torch.get_num_threads()}"
    return command + (f" --steps {max_steps}" if max_steps else "")


def recipe_batches(recipe: Recipe, corpus: Any, tokenizer: Any, seed: int) -> Any:
    """The recipe's seeded stream of training batches (main run)."""
    return recipe.batches(
        corpus.train,
        tokenizer,
        batch_size=recipe.batch_size,
        max_length=recipe.max_length,
        generator=torch.Generator().manual_seed(seed),
    )


def _train(
    name: str, model: Any, corpus: Any, tokenizer: Any, steps: int, seed: int, live: bool
) -> Any:
    """The recipe's main run: ``steps`` optimizer steps, cosine decay; returns the History."""
    recipe = RECIPES[name]
    batches = recipe_batches(recipe, corpus, tokenizer, seed)
    return train(
        model,
        batches,
        max_steps=steps,
        lr=recipe.lr,
        warmup_steps=min(recipe.warmup_steps, steps // 10),
        schedule="cosine",
        live=live,
        title=f"pretrain {name}",
    )


def pretrain(
    name: str,
    *,
    out: str | Path | None = None,
    seed: int = 0,
    max_steps: int | None = None,
    live: bool = True,
) -> dict[str, Any]:
    """Train checkpoint ``name`` and save it to ``out``; returns the metrics that were saved."""
    if name in MOE_CHECKPOINTS:
        return pretrain_moe(name, out=out, seed=seed, max_steps=max_steps)
    if name not in RECIPES:
        raise ValueError(f"unknown checkpoint {name!r}; choose one of {CHECKPOINT_NAMES}")
    recipe = RECIPES[name]
    out = default_out_dir() if out is None else Path(out)
    steps = recipe.max_steps if max_steps is None else max_steps
    corpus, tokenizer = load_corpus("course"), load_tokenizer()
    model = recipe.build(tokenizer, seed=seed, dropout=recipe.dropout)
    start, cpu_start = time.perf_counter(), time.process_time()
    warm_steps = _warm_start_steps(recipe, max_steps)
    warm_start = (
        _causal_warm_start(model, corpus, tokenizer, recipe, warm_steps, seed, live)
        if warm_steps
        else None
    )
    history = _train(name, model, corpus, tokenizer, steps, seed, live)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    save_checkpoint(model, name, out)
    reloaded = load_checkpoint(name, directory=out)  # measure exactly what users will load
    metrics = {
        **_identity(name, model, seed, max_steps),
        "steps": history.num_steps,
        **_recipe_metrics(recipe, min(recipe.warmup_steps, steps // 10)),
        "causal_warm_start": warm_start,
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        **_history_metrics(history),
        "heldout": heldout_metrics(
            reloaded, name=name, corpus=corpus, tokenizer=tokenizer, max_length=recipe.max_length
        ),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    save_checkpoint(reloaded, name, out, metrics=metrics)
    return metrics


#: The sentence whose routing the MoE checkpoints record (lesson 14's widget shows it).
MOE_SENTENCE = "the farmer feeds the hens before the rain"
MOE_DTYPE = torch.float16  # the stored weights (loaded back into float32)


def pretrain_moe(
    name: str, *, out: str | Path | None = None, seed: int = 0, max_steps: int | None = None
) -> dict[str, Any]:
    """Train MoE checkpoint ``name`` (:data:`lmlessons.course.moe_runs.MOE_CHECKPOINTS`: the
    method of :func:`~lmlessons.course.moe_runs.train_moe`) and save it to ``out`` in float16;
    returns the metrics that were saved, measured on the reloaded model: the held-out metrics,
    the held-out batch's routing and where :data:`MOE_SENTENCE` goes, with its margins."""
    method = MOE_CHECKPOINTS[name]
    out = default_out_dir() if out is None else Path(out)
    start, cpu_start = time.perf_counter(), time.process_time()
    model, run = train_moe(method, seed=seed, max_steps=max_steps)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    save_checkpoint(model, name, out, dtype=MOE_DTYPE)
    reloaded = load_checkpoint(name, directory=out)  # measure exactly what users will load
    routing = measure_routing(reloaded, heldout_batch())
    tokenizer = load_tokenizer()
    sentence = {"text": MOE_SENTENCE, **route_sentence(reloaded, tokenizer, MOE_SENTENCE)}
    margins = routing_margins(reloaded, tokenizer, MOE_SENTENCE)
    metrics = {
        **_identity(name, model, seed, max_steps),
        "steps": run["steps"][-1],
        "method": method,
        **METHODS[method],
        "settings": {**MOE_SETTINGS, "max_steps": run["steps"][-1]},
        "dtype": str(MOE_DTYPE).removeprefix("torch."),
        "train_seconds": round(seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "run": run,
        "heldout": heldout_metrics(reloaded, name=name),
        "heldout_routing": rounded(routing),
        "sentence": sentence,
        "sentence_margins": {k: round(v, 6) for k, v in margins.items()},
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    save_checkpoint(reloaded, name, out, metrics=metrics, dtype=MOE_DTYPE)
    return metrics


def _identity(name: str, model: Any, seed: int, max_steps: int | None) -> dict[str, Any]:
    """What every checkpoint's metrics start with: its name, class, size and the command that
    made it."""
    return {
        "name": name,
        "architecture": type(model).__name__,
        "parameters": count_parameters(model),
        "command": _command(name, seed, max_steps),
        "seed": seed,
    }


def _recipe_metrics(recipe: Recipe, warmup_steps: int) -> dict[str, Any]:
    return {
        "batch_size": recipe.batch_size,
        "max_length": recipe.max_length,
        "lr": recipe.lr,
        "warmup_steps": warmup_steps,
        "dropout": recipe.dropout,
        "schedule": "cosine",
    }


def _history_metrics(history: Any) -> dict[str, float]:
    out = {"train_loss_last_50_steps": history.final("loss", 50)}
    if history.objective == "pretraining":
        out["train_nsp_accuracy_last_50_steps"] = history.final("nsp_accuracy", 50)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pretrain", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("name", choices=[*CHECKPOINT_NAMES, "all", "tokenizer"])
    parser.add_argument(
        "--out", type=Path, default=None, help=f"output folder (default: {default_out_dir()})"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="override the recipe's step budget")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = default_out_dir() if args.out is None else args.out
    if args.name == "tokenizer":
        tokenizer = train_tokenizer(
            load_corpus("course"), vocab_size=DEFAULT_VOCAB_SIZE, whole_words=COURSE_WHOLE_WORDS
        )
        out.mkdir(parents=True, exist_ok=True)
        tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"), pretty=False)
        print(f"saved a {len(tokenizer):,}-token WordPiece tokenizer to {out / 'tokenizer.json'}")
        return 0
    names = CHECKPOINT_NAMES if args.name == "all" else (args.name,)
    for name in names:
        m = pretrain(name, out=out, seed=args.seed, max_steps=args.steps, live=not args.quiet)
        size = sum(
            (out / f"{name}{ext}").stat().st_size
            for ext in (".safetensors", ".config.json", ".metrics.json")
        )
        held = ", ".join(f"{k} {v:.4g}" for k, v in m["heldout"].items() if isinstance(v, float))
        print(
            f"{name}: {m['steps']} steps in {m['train_seconds']} s ({m['train_cpu_seconds']} s "
            f"CPU), {m['parameters']:,} parameters, {size / 1e6:.2f} MB in {out}\n"
            f"  held-out: {held}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
