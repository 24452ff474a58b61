"""tools.pretrain: the recipes match the shipped checkpoints, and the command writes only where
asked (the user cache folder by default), never into the repository."""

from __future__ import annotations

import json

import pytest

import tools.pretrain as pretrain
from lmlessons import checkpoint_metrics, heldout_metrics, load_checkpoint
from lmlessons.course.checkpoints import CHECKPOINT_DIR, CHECKPOINT_NAMES
from lmlessons.course.moe_runs import METHODS, MOE_CHECKPOINTS, MOE_SETTINGS, BiasedRouter, routers

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


def test_every_checkpoint_has_a_recipe() -> None:
    assert sorted(CHECKPOINT_NAMES) == sorted([*pretrain.RECIPES, *MOE_CHECKPOINTS])


@pytest.mark.parametrize("name", pretrain.RECIPES)
def test_the_shipped_metrics_record_their_recipe(name: str) -> None:
    recipe, recorded = pretrain.RECIPES[name], checkpoint_metrics(name)
    assert recorded["steps"] == recipe.max_steps
    assert (recorded["lr"], recorded["batch_size"]) == (recipe.lr, recipe.batch_size)
    assert recorded["dropout"] == recipe.dropout
    assert recorded["command"].startswith(f"python -m tools.pretrain {name} --seed ")


@pytest.mark.parametrize("name", MOE_CHECKPOINTS)
def test_the_shipped_moe_metrics_record_their_run(name: str) -> None:
    recorded, method = checkpoint_metrics(name), MOE_CHECKPOINTS[name]
    assert recorded["steps"] == MOE_SETTINGS["max_steps"] == recorded["run"]["steps"][-1]
    assert {k: recorded["settings"][k] for k in MOE_SETTINGS} == MOE_SETTINGS
    assert (
        recorded["method"] == method
        and {k: recorded[k] for k in METHODS[method]} == (METHODS[method])
    )
    assert recorded["command"].startswith(f"python -m tools.pretrain {name} --seed ")
    assert recorded["heldout_routing"]["counts"] == recorded["run"]["final_counts"]
    assert recorded["sentence"]["text"] == pretrain.MOE_SENTENCE


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


@pytest.mark.slow
def test_the_moe_command_writes_only_where_asked(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LMLESSONS_CACHE_DIR", str(tmp_path / "cache"))
    before = {p: p.stat().st_mtime_ns for p in CHECKPOINT_DIR.iterdir()}
    assert pretrain.main(["moe-bias", "--steps", "2", "--quiet"]) == 0
    out = tmp_path / "cache" / "checkpoints"
    assert sorted(p.name for p in out.iterdir()) == [
        "moe-bias.config.json",
        "moe-bias.metrics.json",
        "moe-bias.safetensors",
    ]
    metrics = json.loads((out / "moe-bias.metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["command"].endswith("--steps 2")
    assert metrics["run"]["steps"][-1] == 2 and metrics["dtype"] == "float16"
    assert {p: p.stat().st_mtime_ns for p in CHECKPOINT_DIR.iterdir()} == before
    reloaded = load_checkpoint("moe-bias", directory=out)
    bias = [[round(float(b), 2) for b in r.expert_bias] for r in routers(reloaded)]
    assert all(isinstance(r, BiasedRouter) for r in routers(reloaded))
    assert bias == [[round(b, 2) for b in layer] for layer in metrics["run"]["expert_bias"]]
    assert any(b != 0 for layer in bias for b in layer)  # two steps of 0.01
