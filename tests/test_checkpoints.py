"""lmlessons.course.checkpoints: the shipped models load, match their config and reproduce their
recorded held-out metrics; saving writes only where asked; nothing is ever unpickled."""

from __future__ import annotations

import json
import math

import pytest
import torch
from _tiny import SMALL_GPT2
from safetensors import safe_open

from lmlessons import checkpoint_metrics, heldout_metrics, load_checkpoint, load_corpus, tiny_gpt2
from lmlessons.course.checkpoints import (
    CHECKPOINT_DIR,
    CHECKPOINT_NAMES,
    EVAL_MAX_LENGTH,
    WARM_START_CURVES_FILE,
    save_checkpoint,
)
from tools.pretrain import RECIPES

EXPECTED_CLASSES = {
    "bert": "BertForPreTraining",
    "bert-causal": "BertLMHeadModel",
    "gpt2": "GPT2LMHeadModel",
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def corpus():
    return load_corpus("course")


def test_shipped_files_are_small_and_pickle_free() -> None:
    files = sorted(p.name for p in CHECKPOINT_DIR.iterdir() if not p.name.startswith("."))
    expected = sorted(
        f"{n}{ext}"
        for n in CHECKPOINT_NAMES
        for ext in (".safetensors", ".config.json", ".metrics.json")
    )
    expected = sorted([*expected, WARM_START_CURVES_FILE])  # lesson 02's recorded probes
    assert files == expected  # no .bin / .pt / .pkl next to them
    total = sum(p.stat().st_size for p in CHECKPOINT_DIR.iterdir())
    assert total <= 10_000_000, f"{total / 1e6:.2f} MB"
    for name in CHECKPOINT_NAMES:
        with safe_open(str(CHECKPOINT_DIR / f"{name}.safetensors"), framework="pt") as f:
            assert f.metadata()["lmlessons_checkpoint"] == name
            names = f.keys()
            assert names and all(f.get_slice(k).get_dtype() == "F32" for k in names)


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKPOINT_NAMES)
def test_checkpoint_loads_matches_config_and_metrics(name: str, tok, corpus) -> None:
    model = load_checkpoint(name)
    assert type(model).__name__ == EXPECTED_CLASSES[name]
    assert not model.training
    stored = json.loads((CHECKPOINT_DIR / f"{name}.config.json").read_text())
    loaded = json.loads(model.config.to_json_string(use_diff=False))
    stored.pop("transformers_version", None), loaded.pop("transformers_version", None)
    assert loaded == stored
    assert model.config.vocab_size == len(tok) and model.config.pad_token_id == tok.pad_token_id
    if name == "bert-causal":
        assert model.config.is_decoder is True

    recorded = checkpoint_metrics(name)
    assert recorded["name"] == name and recorded["architecture"] == EXPECTED_CLASSES[name]
    assert recorded["max_length"] == EVAL_MAX_LENGTH[name] == RECIPES[name].max_length
    measured = heldout_metrics(model, name=name, corpus=corpus, tokenizer=tok)
    for key, value in recorded["heldout"].items():
        if key.startswith("num_"):
            assert measured[key] == value, key
        elif "accuracy" in key:
            assert measured[key] == pytest.approx(value, abs=2e-3), key  # a near-tie may flip
        else:
            assert measured[key] == pytest.approx(value, rel=1e-4), key


def test_checkpoints_learned_something(tok) -> None:
    recorded = checkpoint_metrics("bert")
    assert recorded["causal_warm_start"]["steps"] == RECIPES["bert"].causal_warm_start_steps > 0
    bert = recorded["heldout"]
    assert bert["mlm_accuracy"] > 0.2 and bert["nsp_accuracy"] > 0.6
    assert bert["mlm_loss"] < 0.7 * math.log(len(tok))
    for name in ("bert-causal", "gpt2"):
        m = checkpoint_metrics(name)["heldout"]
        assert m["perplexity"] < len(tok) / 10  # 10x better than uniform guessing on unseen text
        assert m["next_token_accuracy"] > 0.1  # always guessing "the" scores 0.05


def test_bert_fills_the_blank_sensibly(tok) -> None:
    model = load_checkpoint("bert")
    batch = tok("The dog chased the [MASK].", return_tensors="pt")
    position = batch["input_ids"][0].tolist().index(tok.mask_token_id)
    with torch.no_grad():
        logits = model(**batch).prediction_logits[0, position]  # (V,)
    top5 = tok.convert_ids_to_tokens(logits.topk(5).indices.tolist())
    nouns = {
        "ball",
        "cat",
        "dog",
        "bird",
        "birds",
        "cats",
        "rabbit",
        "rabbits",
        "squirrel",
        "sheep",
        "stick",
        "fox",
        "mouse",
        "ducks",
        "boy",
        "girl",
        "car",
        "bus",
        "hen",
        "hens",
        "chickens",
        "kite",
        "cow",
        "cows",
    }
    assert nouns & set(top5), top5


def test_save_and_load_roundtrip(tmp_path, tok) -> None:
    model = tiny_gpt2(tok, seed=3, **SMALL_GPT2)
    written = save_checkpoint(model, "gpt2", tmp_path, metrics={"heldout": {"perplexity": 1.0}})
    assert [p.name for p in written] == [
        "gpt2.safetensors",
        "gpt2.config.json",
        "gpt2.metrics.json",
    ]
    loaded = load_checkpoint("gpt2", directory=tmp_path)
    assert type(loaded) is type(model) and not loaded.training
    assert loaded.config.to_dict() == model.config.to_dict()
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys()
    for k, v in saved.items():
        assert torch.equal(v, restored[k]), k
    assert checkpoint_metrics("gpt2", directory=tmp_path) == {"heldout": {"perplexity": 1.0}}


def test_errors(tmp_path, tok) -> None:
    with pytest.raises(ValueError, match="unknown checkpoint 'roberta'"):
        load_checkpoint("roberta")
    with pytest.raises(FileNotFoundError, match=r"python -m tools\.pretrain gpt2"):
        load_checkpoint("gpt2", directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="no metrics for checkpoint 'gpt2'"):
        checkpoint_metrics("gpt2", directory=tmp_path)
    model = tiny_gpt2(tok, **SMALL_GPT2)
    with pytest.raises(TypeError, match="holds a BertForPreTraining, got a GPT2LMHeadModel"):
        save_checkpoint(model, "bert", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written by the refused calls


def test_a_file_that_is_not_safetensors_is_refused(tmp_path, tok) -> None:
    """A pickle (or anything else) in place of the weights is never unpickled: safetensors
    refuses to parse it."""
    (tmp_path / "gpt2.safetensors").write_bytes(b"\x80\x04not a safetensors file")
    (tmp_path / "gpt2.config.json").write_text(tiny_gpt2(tok, **SMALL_GPT2).config.to_json_string())
    with pytest.raises(ValueError, match=r"'gpt2'.* is not a readable safetensors file"):
        load_checkpoint("gpt2", directory=tmp_path)
