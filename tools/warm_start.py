"""Record why the ``bert`` recipe starts with a causal warm start: ``python -m tools.warm_start``.

Two runs of the same tiny ``BertForPreTraining`` (same seed, batches, learning rate and
schedule as ``python -m tools.pretrain bert``), probed every ``--every`` steps on held-out
masked NSP pairs:

* ``scratch``: MLM + NSP from random weights for warm-start + main steps (3,600);
* ``warm``: the shipped recipe: 600 steps as ``BertLMHeadModel(is_decoder=True)`` (next-token
  loss, causal attention), then 3,000 steps of MLM + NSP.

Each probe records the held-out MLM loss, top-1 and top-5 accuracy on masked tokens, NSP accuracy,
how uniform the attention is (mean entropy of the attention rows divided by the entropy of a
uniform row over the same keys: 1.0 = every token looks at every token equally, a bag of words)
and the top guess for two probe sentences. The file is small JSON (rounded to 4 decimals), so
lesson 02 can plot it in a second. The shipped file was made with::

    python -m tools.warm_start --out lmlessons/data/checkpoints

Without ``--out`` the file goes to the user cache folder, never into the repository.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from lmlessons._checks import IGNORE_INDEX
from lmlessons.course._cache import user_cache_dir
from lmlessons.course.batches import nsp_batches
from lmlessons.course.checkpoints import EVAL_MAX_LENGTH, EVAL_SEED, WARM_START_CURVES_FILE
from lmlessons.course.corpus import load_corpus
from lmlessons.course.models import tiny_bert_pretraining
from lmlessons.course.tokenizer import load_tokenizer
from lmlessons.course.training import train
from lmlessons.widgets.mlm import fill_mask
from tools.pretrain import RECIPES, _causal_warm_start, recipe_batches

PROBE_SENTENCES = ("the dog chased the [MASK] .", "the cat slept in the warm [MASK] .")


def _attention_uniformity(attentions: tuple[torch.Tensor, ...], mask: torch.Tensor) -> float:
    """Mean over layers, heads and real query rows of entropy(row) / ln(number of real keys)."""
    keys = mask.sum(-1).clamp(min=2).float()  # (B,)
    ratios = []
    for att in attentions:  # (B, H, T, T)
        p = att.clamp_min(1e-12)
        entropy = -(att * p.log()).sum(-1)  # (B, H, T)
        ratio = entropy / keys.log()[:, None, None]
        rows = mask[:, None, :].expand_as(ratio).bool()
        ratios.append(ratio[rows].mean())
    return float(torch.stack(ratios).mean())


@torch.no_grad()
def probe(model: Any, batches: list[dict[str, torch.Tensor]], tokenizer: Any) -> dict[str, Any]:
    """Held-out MLM / NSP metrics, attention uniformity and the probe sentences' top guesses."""
    was_training = model.training
    model.eval()
    sums = dict(ce=0.0, top1=0.0, top5=0.0, targets=0.0, nsp=0.0, seqs=0.0, uniform=0.0)
    for b in batches:
        out = model(
            input_ids=b["input_ids"],
            attention_mask=b["attention_mask"],
            token_type_ids=b["token_type_ids"],
            output_attentions=True,
        )
        keep = b["labels"] != IGNORE_INDEX  # (B, T)
        logits, labels = out.prediction_logits[keep], b["labels"][keep]  # (N, V), (N,)
        top5 = logits.topk(5, dim=-1).indices  # (N, 5)
        sums["ce"] += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        sums["top1"] += float((top5[:, 0] == labels).sum())
        sums["top5"] += float((top5 == labels[:, None]).any(-1).sum())
        sums["targets"] += labels.numel()
        nsp_pred = out.seq_relationship_logits.argmax(-1)
        sums["nsp"] += float((nsp_pred == b["next_sentence_label"]).sum())
        sums["seqs"] += len(nsp_pred)
        sums["uniform"] += _attention_uniformity(out.attentions, b["attention_mask"]) * len(
            nsp_pred
        )
    model.train(was_training)
    guesses = [fill_mask(model, tokenizer, s, top_k=1)[0][0][0] for s in PROBE_SENTENCES]
    return {
        "mlm_loss": round(sums["ce"] / sums["targets"], 4),
        "mlm_accuracy": round(sums["top1"] / sums["targets"], 4),
        "mlm_top5_accuracy": round(sums["top5"] / sums["targets"], 4),
        "nsp_accuracy": round(sums["nsp"] / sums["seqs"], 4),
        "attention_uniformity": round(sums["uniform"] / sums["seqs"], 4),
        "guesses": guesses,
    }


def _probed(
    batches: Iterable[dict[str, torch.Tensor]], every: int, on_probe: Callable[[int], None]
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield ``batches``; before the batch of step ``k * every + 1`` call ``on_probe(k * every)``
    (``train`` fetches one batch per optimizer step, so the model has then made that many steps)."""
    for i, batch in enumerate(batches):
        if i % every == 0:
            on_probe(i)
        yield batch


def _run(
    arm: str, warm_steps: int, main_steps: int, every: int, seed: int, prefix: int | None = None
) -> dict[str, Any]:
    """One run, probed every ``every`` steps; ``prefix`` stops it after that many main steps
    (same schedule: a test re-runs the start of a recorded run)."""
    recipe = RECIPES["bert"]
    corpus, tokenizer = load_corpus("course"), load_tokenizer()
    heldout = list(
        nsp_batches(
            corpus.validation,
            tokenizer,
            batch_size=64,
            max_length=EVAL_MAX_LENGTH["bert"],
            epochs=1,
            generator=torch.Generator().manual_seed(EVAL_SEED),
        )
    )
    model = tiny_bert_pretraining(tokenizer, seed=seed, dropout=recipe.dropout)
    steps, probes = [0], [probe(model, heldout, tokenizer)]
    if warm_steps:
        _causal_warm_start(model, corpus, tokenizer, recipe, warm_steps, seed, live=False)

    def on_probe(k: int) -> None:
        if k:
            steps.append(warm_steps + k)
            probes.append(probe(model, heldout, tokenizer))

    if warm_steps:
        steps.append(warm_steps)
        probes.append(probe(model, heldout, tokenizer))
    batches = recipe_batches(recipe, corpus, tokenizer, seed)
    history = train(
        model,
        _probed(itertools.islice(batches, prefix), every, on_probe),
        max_steps=main_steps,
        lr=recipe.lr,
        warmup_steps=min(recipe.warmup_steps, main_steps // 10),
        schedule="cosine",
        live=False,
    )
    steps.append(warm_steps + history.num_steps)
    probes.append(probe(model, heldout, tokenizer))
    return {"arm": arm, "warm_start_steps": warm_steps, "steps": steps, "probes": probes}


def record(*, warm_steps: int = 600, main_steps: int = 3000, every: int = 200) -> dict[str, Any]:
    """Both runs, seeded; returns what :func:`main` saves."""
    start = time.perf_counter()
    runs = [
        _run("scratch", 0, warm_steps + main_steps, every, seed=0),
        _run("warm", warm_steps, main_steps, every, seed=0),
    ]
    return {
        "command": f"python -m tools.warm_start --every {every}",
        "probe_sentences": list(PROBE_SENTENCES),
        "uniform_mlm_loss": round(math.log(len(load_tokenizer())), 4),
        "runs": runs,
        "seconds": round(time.perf_counter() - start, 1),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.warm_start", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, default=None, help="folder (default: user cache)")
    parser.add_argument("--every", type=int, default=200, help="steps between probes")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = user_cache_dir() / "checkpoints" if args.out is None else args.out
    out.mkdir(parents=True, exist_ok=True)
    data = record(every=args.every)
    path = out / WARM_START_CURVES_FILE
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path} in {data['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
