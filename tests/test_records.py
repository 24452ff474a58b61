"""The course's one loader, writer and schema check of recorded runs, and its one spread over
seeds (``lmlessons.course.records``), and that every recording the package ships goes through
them."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from lmlessons.course.records import (
    DATA_DIR,
    Recording,
    check_record,
    load_record,
    seed_spread,
    write_record,
)


def test_check_record_names_what_is_wrong():
    record = {"runs": [], "about": {}}
    assert check_record(record, ("runs",)) is record
    with pytest.raises(ValueError, match=r"\['settings'\]"):
        check_record(record, ("runs", "settings"), name="x.json")
    with pytest.raises(TypeError, match=r"^x\.json must be a JSON object \(dict\), got list$"):
        check_record([1, 2], ("runs",), name="x.json")
    with pytest.raises(ValueError, match=r"^record lacks the keys \['settings'\]"):
        check_record(record, ("settings",))  # the default name


def test_write_then_load_round_trips(tmp_path):
    data = {"b": [1.5, 2.0], "a": {"c": [1, [2, 3]]}}
    path = write_record(
        data, tmp_path / "new" / "deeper", "r.json", sort_keys=True, one_line_lists=True
    )
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.index('"a"') < text.index('"b"')
    assert '"b": [1.5, 2.0]' in text and '"c": [\n' in text  # a list of lists stays open
    back = load_record("r.json", folder="-", keys=("a", "b"), command="x", directory=path.parent)
    assert back == data
    plain = write_record(data, tmp_path, "p.json").read_text(encoding="utf-8")
    assert plain == json.dumps(data, indent=1) + "\n"
    with pytest.raises(TypeError, match=r"^record must be a mapping, got list$"):
        write_record([1], tmp_path, "q.json")  # type: ignore[arg-type]


def test_load_record_names_the_recording_command_and_checks_keys(tmp_path):
    missing = str(tmp_path / "r.json")
    with pytest.raises(
        FileNotFoundError, match=f"at '{re.escape(missing)}'.*python -m tools\\.thing"
    ):
        load_record(
            "r.json",
            folder="x",
            keys=(),
            command="python -m tools.thing",
            directory=tmp_path,
        )
    (tmp_path / "r.json").write_text('{"runs": []}', encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{re.escape(missing)} lacks the keys \\['settings'\\]"):
        load_record("r.json", folder="x", keys=("settings",), command="c", directory=tmp_path)
    load = dict(folder="x", keys=("runs",), command="c", directory=tmp_path, run_keys=("seed",))
    with pytest.raises(ValueError, match="non-empty list"):
        load_record("r.json", **load)
    (tmp_path / "r.json").write_text('{"runs": [{"seed": 0}, {"loss": 1}]}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"r\.json\['runs'\]\[1\].*seed"):
        load_record("r.json", **load)
    (tmp_path / "r.json").write_text('{"runs": [{"seed": 0}]}', encoding="utf-8")
    assert load_record("r.json", **load) == {"runs": [{"seed": 0}]}


def test_seed_spread_is_the_mean_and_bessels_std():
    assert seed_spread([1.0, 2.0, 6.0]) == (3.0, pytest.approx(7**0.5))  # half-range: 2.5
    assert seed_spread([4.0]) == (4.0, 0.0)
    with pytest.raises(ValueError, match=r"^values must hold at least one value"):
        seed_spread([])
    with pytest.raises(TypeError, match=r"^values must be a sequence"):
        seed_spread("12")  # type: ignore[arg-type]


def test_every_shipped_recording_loads_through_the_one_loader():
    from lmlessons.bugzoo.records import load_records
    from lmlessons.course.chat import load_seed_runs
    from lmlessons.course.grpo_learn import recorded_learn_runs
    from lmlessons.course.moe_runs import recorded_moe_runs
    from lmlessons.course.mtp_runs import recorded_mtp_runs
    from lmlessons.course.preferences import preference_runs
    from lmlessons.course.rl import recorded_runs
    from lmlessons.course.zloss_runs import recorded_zloss_runs

    shipped = {p.parent.name for p in DATA_DIR.glob("*/*.json") if "runs" in p.name}
    assert shipped == {
        "answer_only", "bugzoo", "grpo", "grpo_learn", "preference", "moe", "mtp", "zloss"
    }  # fmt: skip
    assert load_records() and load_seed_runs()["settings"] and preference_runs()["runs"]
    assert recorded_runs()["experiments"] and recorded_learn_runs()["experiments"]
    assert recorded_moe_runs()["methods"] and recorded_mtp_runs()["runs"]
    assert recorded_zloss_runs()["runs"]


def test_check_runs_names_the_run_and_its_missing_key():
    from lmlessons.course.records import check_runs

    runs = [{"seed": 0, "loss": [1.0]}, {"seed": 1}]
    assert check_runs(runs[:1], ("seed", "loss")) == runs[:1]
    with pytest.raises(ValueError, match=r"runs\[1\] lacks the keys \['loss'\]"):
        check_runs(runs, ("seed", "loss"))
    for empty, kind in (([], "list"), ({"seed": 0}, "dict"), (None, "NoneType")):
        with pytest.raises(ValueError, match=f"record_runs must be a non-empty list.*got {kind}$"):
            check_runs(empty, ("seed",), name="record_runs")


@pytest.mark.parametrize(
    ("loader", "command"),
    [
        ("lmlessons.bugzoo.records:load_records", "tools.bugzoo"),
        ("lmlessons.course.chat:load_seed_runs", "tools.answer_only_seeds"),
        ("lmlessons.course.preferences:preference_runs", "tools.preference_runs"),
    ],
)
def test_each_loader_names_its_own_tool(tmp_path, loader, command):
    import importlib

    module, name = loader.split(":")
    with pytest.raises(FileNotFoundError, match=command.replace(".", r"\.")):
        getattr(importlib.import_module(module), name)(tmp_path)


def test_the_grpo_loaders_name_their_own_tools(tmp_path):
    from lmlessons.course.grpo_learn import recorded_learn_runs
    from lmlessons.course.rl import recorded_runs

    with pytest.raises(FileNotFoundError, match=r"tools\.grpo_runs"):
        recorded_runs(directory=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"tools\.grpo_learn"):
        recorded_learn_runs(directory=tmp_path)


# The recording tools are thin: what they record is built by the course's record_* functions ----


def test_record_runs_builds_the_grpo_record_the_loader_reads(tmp_path, monkeypatch):
    from lmlessons.course import rl

    calls = []

    def fake_grpo_run(output_dir, **kwargs):
        calls.append(kwargs)
        return {"loss": [0.123456, 1 / 3], "mean_length": [12.0, 9.87654]}

    monkeypatch.setattr(rl, "grpo_run", fake_grpo_run)
    data = rl.record_runs(["loss_start"], seeds=[0, 5], max_steps=2, log=None)
    assert data["settings"]["max_steps"] == 2 and data["settings"]["seeds"] == [0, 5]
    runs = data["experiments"]["loss_start"]["runs"]
    assert [(r["loss_type"], r["beta"], r["seed"]) for r in runs] == [
        (t, b, s) for t, b in rl.EXPERIMENTS["loss_start"]["runs"] for s in (0, 5)
    ]
    assert runs[0]["loss"] == [0.1235, 0.3333] and runs[0]["mean_length"] == [12.0, 9.8765]
    assert {c["max_steps"] for c in calls} == {2}
    write_record(data, tmp_path, rl.GRPO_RECORDING.file)
    assert rl.recorded_runs(directory=tmp_path) == data
    with pytest.raises(ValueError, match="experiments"):
        rl.record_runs(["nope"], seeds=[0], max_steps=1)


def test_record_learn_runs_keeps_every_seed_and_the_samples(monkeypatch):
    from lmlessons.course import grpo_learn

    def fake_learn_run(output_dir, experiment, *, seed, max_steps):
        before = [{"completions": ["the sea"]}]
        after = [{"completions": ["water water"]}]
        return {"seed": seed, "reward": [0.04444, 1.0], "before": before, "after": after}

    monkeypatch.setattr(grpo_learn, "learn_run", fake_learn_run)
    lines: list[str] = []
    data = grpo_learn.record_learn_runs(["games"], seeds=[1, 2], max_steps=2, log=lines.append)
    runs = data["experiments"]["games"]["runs"]
    assert [r["seed"] for r in runs] == [1, 2] and runs[0]["reward"] == [0.0444, 1.0]
    assert runs[0]["after"] == [{"completions": ["water water"]}]  # samples kept as they are
    assert data["experiments"]["games"]["reward"] == "word_count_reward"
    assert data["settings"]["max_steps"] == 2 and isinstance(data["seconds"], int)
    assert len(lines) == 2 and "word count 0.00 -> 2.00" in lines[0]


def test_record_seed_runs_holds_one_value_per_seed(monkeypatch):
    from lmlessons.course import chat

    def fake_run(name, seed, data, max_steps, eval_every):
        return {"answer_loss": float(seed), "stop_rate": 0.5}

    monkeypatch.setattr(chat, "_seed_run", fake_run)
    data = chat.record_seed_runs([3, 4], max_steps=7, log=None)
    assert data["seeds"] == [3, 4] and data["max_steps"] == 7
    assert data["num_heldout"] == len(chat.instruction_set("validation"))
    assert set(data["settings"]) == set(chat.SEED_RUN_SETTINGS)
    assert all(
        r == {"answer_loss": [3.0, 4.0], "stop_rate": [0.5, 0.5]} for r in data["settings"].values()
    )


def test_bugzoo_record_runs_trains_the_named_runs_and_keeps_the_others(monkeypatch):
    from lmlessons.bugzoo import runs

    first, second, third = list(runs.RUNS)[:3]
    monkeypatch.setattr(runs, "run", lambda run_id: {"trained": run_id})
    lines: list[str] = []
    earlier = ({third: {"old": 1}, first: {"old": 2}}, {third: 9.0, first: 8.0})
    records, seconds = runs.record_runs(
        [second, first], recorded=earlier[0], seconds=earlier[1], log=lines.append
    )
    assert list(records) == [first, second, third]  # the order of RUNS
    assert records[first] == {"trained": first} and records[third] == {"old": 1}
    assert seconds[third] == 9.0 and list(seconds) == [first, second, third]
    assert [line.split()[0] for line in lines] == [second, first]
    with pytest.raises(ValueError, match="no_such_run"):
        runs.record_runs(["no_such_run"])


def test_record_grid_runs_every_setting_and_seed_rounded_and_logged():
    from lmlessons.course.records import record_grid, rounded

    assert rounded({"a": [1.23456, 2], "c": "x"}) == {"a": [1.2346, 2], "c": "x"}
    assert rounded({"a": [1.23456, {"b": 2.71828}]}, 2) == {"a": [1.23, {"b": 2.72}]}
    lines: list[str] = []
    base = {"lr": 0.5, "max_steps": 10}
    record = record_grid(
        lambda value, seed, settings: {
            "setting": value, "seed": seed, "loss": seed / 3, "steps": settings["max_steps"]
        },
        base,
        grid={"letters": ("a", "b")},
        seeds=(0, 1),
        max_steps=3,
        describe=lambda run: f"{run['setting']} seed={run['seed']} loss {run['loss']}",
        log=lines.append,
    )  # fmt: skip
    runs = record["runs"]
    assert [(r["setting"], r["seed"]) for r in runs] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert runs[1]["loss"] == 0.3333 and {r["steps"] for r in runs} == {3}
    assert record["settings"] == {"lr": 0.5, "max_steps": 3, "seeds": [0, 1], "letters": ["a", "b"]}
    assert base == {"lr": 0.5, "max_steps": 10} and record["seconds"] >= 0
    assert [line.rsplit(" (", 1)[0] for line in lines] == [
        "a seed=0 loss 0.0", "a seed=1 loss 0.3333", "b seed=0 loss 0.0", "b seed=1 loss 0.3333"
    ]  # fmt: skip
    assert all(line.endswith(" s)") for line in lines)
    quiet = record_grid(
        lambda v, seed, s: {}, {}, grid={"v": ["a"]}, seeds=[0], describe=str, log=None
    )
    assert quiet["runs"] == [{}] and quiet["settings"] == {"seeds": [0], "v": ["a"]}
    with pytest.raises(ValueError, match="one name"):
        record_grid(lambda v, seed, s: {}, {}, grid={}, seeds=[0], describe=str)
    with pytest.raises(ValueError, match=r"^max_steps"):
        record_grid(lambda v, s, x: {}, {}, grid={"v": [1]}, seeds=[0], max_steps=0, describe=str)
    one = record_grid(lambda v, s, x: {}, {}, grid={"v": [1]}, seeds=[0], max_steps=1, describe=str)
    assert one["settings"]["max_steps"] == 1


def test_record_grid_times_each_run_and_the_whole_grid(monkeypatch):
    """A fake clock: the grid starts at 1000 s, each run takes 2 s and 1 s passes between runs."""
    from lmlessons.course import records

    ticks = iter([1000.0, 1001.0, 1003.0, 1004.0, 1006.0, 1010.0])  # start, (began, ended) x 2, end
    monkeypatch.setattr(records, "time", SimpleNamespace(time=lambda: next(ticks)))
    lines: list[str] = []
    record = records.record_grid(
        lambda v, seed, s: {"v": v}, {}, grid={"v": ["a", "b"]}, seeds=[0],
        describe=lambda run: run["v"], log=lines.append,
    )  # fmt: skip
    assert lines == ["a (2 s)", "b (2 s)"] and record["seconds"] == 10


def test_seed_summary_keeps_the_values_beside_their_spread():
    from lmlessons.course.records import seed_spread, seed_summary

    values = [1.0, 2.0, 4.0]
    mean, std = seed_spread(values)
    assert seed_summary(values) == {"mean": mean, "std": std, "per_seed": values}
    assert seed_summary([3.0]) == {"mean": 3.0, "std": 0.0, "per_seed": [3.0]}


def test_record_preference_runs_holds_one_run_per_loss_type_beta_and_seed(monkeypatch, tmp_path):
    from lmlessons.course import preferences as prefs

    def fake_run(loss_type, beta, seed, *, steps=None):
        return {"loss_type": loss_type, "beta": beta, "seed": seed, "steps": steps, "probes": [{}]}

    monkeypatch.setattr(prefs, "preference_run", fake_run)
    lines: list[str] = []
    data = prefs.record_preference_runs(steps=3, log=lines.append)
    settings = prefs.RUN_SETTINGS
    expected = [
        (t, b, s)
        for t in prefs.RUN_LOSS_TYPES
        for b in settings["betas"]
        for s in settings["seeds"]
    ]
    assert [(r["loss_type"], r["beta"], r["seed"]) for r in data["runs"]] == expected
    assert {r["steps"] for r in data["runs"]} == {3} and len(lines) == len(expected)
    assert lines[0].startswith(f"{expected[0][0]:12s} beta={expected[0][1]} seed=")
    assert data["num_pairs"] == settings["num_pairs"] and data["every"] == settings["every"]
    write_record(data, tmp_path, prefs.PREFERENCE_RECORDING.file)
    assert prefs.preference_runs(directory=tmp_path) == data
    assert prefs.record_preference_runs(steps=1, log=None)["runs"]  # silent


def test_every_recording_tool_writes_to_out_or_else_the_user_cache(monkeypatch, tmp_path, capsys):
    """``tools._recording``: the record gets a log that prints, is written where ``--out`` says or
    in the user cache's folder (never the repository), and the last line names the file."""
    import tools._recording as recording

    monkeypatch.setattr(recording, "user_cache_dir", lambda: tmp_path / "cache")

    def record(*, log):
        log("one run")
        return {"runs": [1]}

    kind = Recording("kind", "kind_runs", ("runs",), file="r.json")
    here = recording.record_and_write(record, tmp_path / "out", kind)
    cached = recording.record_and_write(record, None, kind, sort_keys=True)
    assert here == tmp_path / "out" / "r.json" and cached == tmp_path / "cache" / "kind" / "r.json"
    assert json.loads(cached.read_text(encoding="utf-8")) == {"runs": [1]}
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "one run" and re.fullmatch(
        rf"wrote {re.escape(str(cached))} \(\d+ s\)", printed[-1]
    )
    parser = recording.recording_parser("What it records.\n\nMore.", seeds=(4,))
    assert parser.description == "What it records."
    assert parser.parse_args([]).seeds == [4] and parser.parse_args([]).out is None
    assert not hasattr(recording.recording_parser("x", seeds=None).parse_args([]), "seeds")


def test_a_recording_says_where_it_lives_what_it_holds_and_what_records_it(tmp_path):
    kind = Recording("some_runs", "some_tool", ("settings", "runs"), run_keys=("seed",))
    assert kind.file == "runs.json"
    assert kind.command == "python -m tools.some_tool --out lmlessons/data/some_runs"
    missing = re.escape(str(tmp_path / "runs.json"))
    with pytest.raises(FileNotFoundError, match=rf"at '{missing}'; .*`{re.escape(kind.command)}`"):
        kind.load(tmp_path)
    write_record({"settings": {}, "runs": [{"seed": 0}, {}]}, tmp_path, kind.file)
    with pytest.raises(ValueError, match=r"runs\.json\['runs'\]\[1\] lacks the keys \['seed'\]"):
        kind.load(tmp_path)
    write_record({"settings": {}, "runs": [{"seed": 0}]}, tmp_path, kind.file)
    assert kind.load(tmp_path) == {"settings": {}, "runs": [{"seed": 0}]}
    other = Recording("some_runs", "some_tool", ("settings", "runs"), file="other.json")
    with pytest.raises(FileNotFoundError, match=r"other\.json"):
        other.load(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"data/some_runs/runs\.json"):
        kind.load()  # the shipped folder, which no recording of this kind has


def test_every_shipped_recording_loads_through_its_recording():
    from lmlessons.bugzoo.records import RECORDING
    from lmlessons.course.chat import SEED_RECORDING
    from lmlessons.course.grpo_learn import LEARN_RECORDING
    from lmlessons.course.moe_runs import MOE_RECORDING
    from lmlessons.course.mtp_runs import MTP_RECORDING
    from lmlessons.course.preferences import PREFERENCE_RECORDING
    from lmlessons.course.rl import GRPO_RECORDING
    from lmlessons.course.zloss_runs import ZLOSS_RECORDING

    kinds = [RECORDING, SEED_RECORDING, LEARN_RECORDING, MOE_RECORDING, MTP_RECORDING]
    kinds += [PREFERENCE_RECORDING, GRPO_RECORDING, ZLOSS_RECORDING]
    shipped = sorted(p.relative_to(DATA_DIR).as_posix() for p in DATA_DIR.glob("*/*runs*.json"))
    assert sorted(f"{k.folder}/{k.file}" for k in kinds) == shipped
    for kind in kinds:
        assert set(kind.keys) <= set(kind.load())
        assert (DATA_DIR.parents[1] / "tools" / f"{kind.tool}.py").is_file()
