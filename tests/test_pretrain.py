"""tools.pretrain: the recipes match the shipped checkpoints, and the command writes only where
asked (the user cache folder by default), never into the repository."""

from __future__ import annotations

import json

import pytest

import tools.pretrain as pretrain
from lmlessons import checkpoint_metrics, heldout_metrics, load_checkpoint
from lmlessons.course.checkpoints import CHECKPOINT_DIR, CHECKPOINT_NAMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.mark.parametrize("name", CHECKPOINT_NAMES)
def test_the_shipped_metrics_record_their_recipe(name: str) -> None:
    recipe, recorded = pretrain.RECIPES[name], checkpoint_metrics(name)
    assert recorded["steps"] == recipe.max_steps
    assert (recorded["lr"], recorded["batch_size"]) == (recipe.lr, recipe.batch_size)
    assert recorded["dropout"] == recipe.dropout
    assert recorded["command"].startswith(f"python -m tools.pretrain {name} --seed ")


def test_unknown_name() -> None:
    with pytest.raises(ValueError, match="unknown checkpoint 'roberta'"):
        pretrain.pretrain("roberta")


@pytest.mark.slow
def test_pretrain_command_writes_only_where_asked(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LMLESSONS_CACHE_DIR", str(tmp_path / "cache"))
    assert pretrain.default_out_dir() == tmp_path / "cache" / "checkpoints"
    before = {p: p.stat().st_mtime_ns for p in CHECKPOINT_DIR.iterdir()}
    assert pretrain.main(["gpt2", "--steps", "2", "--quiet"]) == 0
    out = tmp_path / "cache" / "checkpoints"
    assert sorted(p.name for p in out.iterdir()) == [
        "gpt2.config.json",
        "gpt2.metrics.json",
        "gpt2.safetensors",
    ]
    metrics = json.loads((out / "gpt2.metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["seed"] == 0 and metrics["heldout"]["perplexity"] > 1
    assert metrics["command"].endswith("--steps 2")
    after = {p: p.stat().st_mtime_ns for p in CHECKPOINT_DIR.iterdir()}
    assert after == before  # the repo is untouched
    reloaded = load_checkpoint("gpt2", directory=out)
    assert heldout_metrics(reloaded, name="gpt2")["perplexity"] == pytest.approx(
        metrics["heldout"]["perplexity"], rel=1e-4
    )
