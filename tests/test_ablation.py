"""make ablate: sweep files and command lines checked before anything trains, the paired arithmetic on
hand-made verdicts, and a real sweep of a tiny model through make (files written, finished runs kept)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import REPO, stand_in_teacher, tiny_recipe, two_process_launcher, write_recipe

from grpo_recipes.evaluation.ablation import (
    DEFAULT_ROOT,
    LIFTED_MAX_STEPS,
    Sweep,
    SweepError,
    SweepValue,
    markdown,
    measure,
    pooled_paired_difference,
    summarize,
)
from grpo_recipes.recipe import load_recipe

SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))


def shipped_sweep(path: Path) -> Sweep:
    """A shipped sweep file; over a distillation recipe whose teacher is not built here, the student stands in."""
    recipe = REPO / yaml.safe_load(path.read_text())["recipe"]
    return Sweep.from_file(path, overrides=stand_in_teacher(recipe))


def test_pooled_paired_difference_averages_each_problem_over_seeds_first():
    new = {0: [1, 1, 0, 0], 1: [1, 0, 0, 1]}
    reference = {0: [0, 1, 0, 0], 1: [0, 0, 0, 1]}
    # Per problem over the two seeds: new 1, .5, 0, .5 and reference 0, .5, 0, .5, so d = 1, 0, 0, 0:
    # mean .25, sd .5, half-width 1.96 x .5 / sqrt(4) = .49.
    assert pooled_paired_difference(new, reference) == {
        "difference": 0.25,
        "low": -0.24,
        "high": 0.74,
        "pairs": 4,
        "seeds": 2,
    }


def test_pooled_paired_difference_uses_only_the_seeds_both_sides_have():
    new = {0: [1, 1, 1, 1], 1: [0, 0, 0, 0]}
    assert pooled_paired_difference(new, {0: [0, 0, 0, 0]})["difference"] == 1.0
    assert pooled_paired_difference(new, {1: [0, 0, 0, 0]})["difference"] == 0.0
    with pytest.raises(ValueError, match="no seed in common"):
        pooled_paired_difference(new, {2: [0, 0, 0, 0]})


def _figures(correct: list[int], steps: int = 10) -> dict:
    return {
        "steps": steps,
        "train_seconds": 5.0 * steps,
        "accuracy_before": 0.5,
        "accuracy_after": sum(correct) / len(correct),
        "correct": correct,
        "zero_gradient_steps": 0.1,
        "zero_variance_groups": 0.25,
        "mean_completion_length": 12.0,
        "completions_generated": 8 * steps,
        "reward": [0.5] * steps,
        "final_level": None,
    }


def _sweep(*names: str) -> Sweep:
    values = [SweepValue(name, [] if i == 0 else [f"trainer.seed={i}"]) for i, name in enumerate(names)]
    return Sweep(name="hand-made", recipe=Path("recipes/default.yaml"), values=values)


def test_summary_verdicts_against_the_first_value():
    n = 100
    results = {
        "reference": {0: _figures([0] * n)},
        "much better": {0: _figures([1] * 60 + [0] * 40)},  # +60 %, paired interval far from 0
        "same": {0: _figures([1] * 2 + [0] * 98)},  # +2 %: the interval includes 0
        "not run": {},
    }
    table = summarize(_sweep(*results), results)
    rows = {row["value"]: row for row in table["rows"]}
    assert rows["reference"]["accuracy"] == 0 and "paired_difference" not in rows["reference"]
    assert rows["much better"]["paired_difference"]["difference"] == 0.6
    assert rows["much better"]["verdict"] == "real"
    assert rows["same"]["verdict"] == "noise"
    assert rows["same"]["paired_difference"]["low"] < 0 < rows["same"]["paired_difference"]["high"]
    assert rows["not run"]["runs"] == 0
    low, high = rows["much better"]["interval"]
    assert low < 0.6 < high
    text = markdown(table)
    assert "| much better | 1 | 10 | 0.8 | 5.0 | 60.0% [" in text
    assert "GRPO's own change" in text and "| — |" in text  # the runs measured no starting point
    assert "+60.0% [" in text and "real" in text and "| not run | 0 |" in text


def test_a_sweep_with_distillation_runs_names_its_change_column_for_both_trainers():
    results = {
        "GRPO": {0: _figures([0] * 10)},
        "distillation": {0: _figures([1] * 10) | {"trainer": "distillation"}},
    }
    table = summarize(_sweep(*results), results)
    assert [row["trainer"] for row in table["rows"]] == ["grpo", "distillation"]
    text = markdown(table)
    assert "own change in training, GRPO or distillation" in text and "GRPO's own change" not in text
    distilled = next(line for line in text.splitlines() if line.startswith("| distillation |"))
    assert distilled.split(" | ")[-3] == "—"  # no zero-gradient steps in a run without groups
    only_grpo = {"GRPO": results["GRPO"], "again": {0: _figures([1] * 10)}}
    assert "GRPO's own change" in markdown(summarize(_sweep(*only_grpo), only_grpo))


def test_a_distillation_runs_training_time_leaves_out_its_evaluations_of_the_teacher_too(tmp_path):
    def result(seconds, correct):
        return {"accuracy": sum(correct) / 4, "correct_by_problem": correct, "seconds": seconds}

    summary = {
        "trainer": "distillation",
        "global_step": 2,
        "train_seconds": 100.0,
        "sampling": {"steps": 2, "zero_gradient_steps": 0},
        "base": None,
        "before": result(10.0, [0, 0, 1, 0]),
        "teacher": result(20.0, [1, 1, 1, 0]),
        "after": result(5.0, [1, 0, 1, 0]),
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "log_history.json").write_text(
        json.dumps([{"step": 1, "grad_norm": 0.5}, {"step": 2, "grad_norm": 0.4}])
    )
    (tmp_path / "resolved_recipe.yaml").write_text("trainer: {per_device_train_batch_size: 8}\n")
    (tmp_path / "run_info.json").write_text(json.dumps({"world_size": 1}))
    figures = measure(tmp_path)
    assert figures["trainer"] == "distillation" and figures["grpo_seconds"] == 70.0  # 100 less 10 and 20
    assert figures["completions_generated"] == 16
    # A run that evaluated during training as well: its training clock, which counts none of them.
    curve = [{"step": 0, "minutes": 0.0, "accuracy": 0.25}, {"step": 2, "minutes": 1.0, "accuracy": 0.5}]
    (tmp_path / "summary.json").write_text(json.dumps(summary | {"held_out_curve": curve}))
    figures = measure(tmp_path)
    assert figures["grpo_seconds"] == 60.0 and figures["curve"] == curve


def test_sweep_from_values_and_its_errors():
    sweep = Sweep.from_values("recipes/default.yaml", "trainer.temperature", "0.5, 0.7", budget_minutes=2)
    assert [v.overrides for v in sweep.values] == [["trainer.temperature=0.5"], ["trainer.temperature=0.7"]]
    assert sweep.name == "default-trainer.temperature"
    with pytest.raises(SweepError, match="at least two VALUES"):
        Sweep.from_values("recipes/default.yaml", "trainer.temperature", "0.5")
    with pytest.raises(SweepError, match="at least two VALUES"):
        Sweep.from_values("recipes/default.yaml", "", "1,2")
    with pytest.raises(SweepError, match=r"value 'x'.*trainer\.not_a_setting"):
        Sweep.from_values("recipes/default.yaml", "trainer.not_a_setting", "x,y")


def test_sweep_file_errors_name_the_file_and_the_key(tmp_path):
    def sweep_file(data) -> Path:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    good = {"recipe": "recipes/default.yaml", "values": [{"name": "a", "set": {}}, {"name": "b", "set": {}}]}
    with pytest.raises(SweepError, match=r"s\.yaml: unknown key 'budget'"):
        Sweep.from_file(sweep_file(good | {"budget": 3}))
    with pytest.raises(SweepError, match=r"values\.1: expected"):
        Sweep.from_file(sweep_file(good | {"values": [{"name": "a"}, {"set": {}}]}))
    with pytest.raises(SweepError, match="names repeat"):
        Sweep.from_file(sweep_file(good | {"values": [{"name": "a"}, {"name": "a"}]}))
    with pytest.raises(SweepError, match=r"value 'b'.*learning_rat"):
        Sweep.from_file(
            sweep_file(good | {"values": [{"name": "a"}, {"name": "b", "set": {"trainer.learning_rat": 1}}]})
        )
    with pytest.raises(SweepError, match="at least `recipe` and `values`"):
        Sweep.from_file(sweep_file({"values": []}))
    with pytest.raises(SweepError, match=r"reach: 'c' is not a value's name; the values: \['a', 'b'\]"):
        Sweep.from_file(sweep_file(good | {"reach": "c"}))
    assert Sweep.from_file(sweep_file(good | {"reach": "b"})).reach == "b"
    with pytest.raises(SweepError, match=r"reach: 81.8 is not an accuracy: give a fraction in \(0, 1\]"):
        Sweep.from_file(sweep_file(good | {"reach": 81.8}))
    assert Sweep.from_file(sweep_file(good | {"reach": 0.818})).reach == 0.818


_VALUES = b"values:\n  - {name: a, set: {}}\n  - {name: b, set: {trainer.loss_type: grpo}}\n"
_RECIPE = b"recipe: recipes/default.yaml\n"


_BAD_SWEEPS = [
    (
        _RECIPE + b"seeds: two\n" + _VALUES,
        r"seeds: expected a whole number >= 1 \(runs per value\), got 'two'",
    ),
    (_RECIPE + b"seeds: 2.7\n" + _VALUES, r"seeds: expected a whole number >= 1 .*got 2\.7"),
    (_RECIPE + b"seeds: true\n" + _VALUES, r"seeds: expected a whole number >= 1 .*got True"),
    (_RECIPE + b"seeds: 0\n" + _VALUES, r"seeds: expected a whole number >= 1 .*got 0"),
    (
        _RECIPE + b"budget_minutes: 4m\n" + _VALUES,
        r"budget_minutes: expected a number of minutes > 0 .*got '4m'",
    ),
    (
        _RECIPE + b"budget_minutes: .nan\n" + _VALUES,
        r"budget_minutes: expected a number of minutes > 0 .*got nan",
    ),
    (_RECIPE + b"budget_minutes: .inf\n" + _VALUES, r"budget_minutes: expected a number .*got inf"),
    (_RECIPE + b"budget_minutes: 0\n" + _VALUES, r"budget_minutes: expected a number .*got 0"),
    (_RECIPE + b"budget_minutes:\n" + _VALUES, r"budget_minutes: expected a number .*got None"),
    (_RECIPE + b"values: 5\n", r"values: expected a list of at least two \{name: \.\.\., set: .*got 5"),
    (_RECIPE + b"values:\n", r"values: expected a list of at least two .*got None"),
    (_RECIPE + b"values: [{name: a, set: {}}]\n", r"values: expected a list of at least two .*got \["),
    (_RECIPE + b"values: [{name: a}, {name: [b]}]\n", r"values\.1\.name: expected a name .*got \['b'\]"),
    (_RECIPE + b"values: [{name: a}, {name: null}]\n", r"values\.1\.name: expected a name .*got None"),
    (_RECIPE + b"values: [{name: a}, {name: b, set: {1: x}}]\n", r"values\.1\.set: expected a mapping"),
    (_RECIPE + b"values: [{name: a}, {name: b, set: {x: 2024-01-01}}]\n", r"values\.1\.set: .*date"),
    (
        b"recipe:\n" + _VALUES,
        r"recipe: expected the path of a recipe file, e\.g\. recipes/default\.yaml, got None",
    ),
    (b"recipe: ''\n" + _VALUES, r"recipe: expected the path of a recipe file.*got ''"),
    (
        b"recipe: [recipes/default.yaml]\n" + _VALUES,
        r"recipe: expected the path .*got \['recipes/default\.yaml'\]",
    ),
    (
        _RECIPE + b"overrides: trainer.seed=1\n" + _VALUES,
        r"overrides: expected a list of key\.path=value strings, e\.g\. `overrides: \[trainer\.seed=1\]`, "
        r"got the single string 'trainer\.seed=1'",
    ),
    (
        _RECIPE + b"overrides: [{trainer.seed: 1}]\n" + _VALUES,
        r"overrides: expected a list of key\.path=value strings",
    ),
    (
        _RECIPE + b"overrides: 3\n" + _VALUES,
        r"overrides: expected a list of key\.path=value strings, got 3",
    ),
    (_RECIPE + b"name: [x]\n" + _VALUES, r"name: expected a string .*got \['x'\]"),
    (
        _RECIPE + b"launch: [accelerate, launch]\n" + _VALUES,
        r"launch: expected a string, got \['accelerate'",
    ),
    (_RECIPE + b"description: {a: 1}\n" + _VALUES, r"description: expected a string, got \{'a': 1\}"),
    (
        _RECIPE + b"reach: [0.8]\n" + _VALUES,
        r"reach: expected a value's name or an accuracy .*got \[0\.8\]",
    ),
    (_RECIPE + b"reach: true\n" + _VALUES, r"reach: expected a value's name or an accuracy .*got True"),
    (
        _RECIPE + b"description: caf\xe9\n" + _VALUES,
        r"cannot read the sweep: not UTF-8 text \(byte 0xe9 at offset 45\)",
    ),
    (_RECIPE + _VALUES + b"1: x\nbudget: 3\n", r"unknown key 1; allowed: "),
    (_RECIPE + b"seeds: 1\nseeds: 2\n" + _VALUES, r"cannot read the sweep: key 'seeds' given twice"),
]


@pytest.mark.parametrize(
    ("text", "message"),
    _BAD_SWEEPS,
    ids=[
        text.replace(_RECIPE, b"").replace(_VALUES, b"").decode("latin-1").strip() for text, _ in _BAD_SWEEPS
    ],
)
def test_a_sweep_file_of_the_wrong_types_gives_one_line_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    with pytest.raises(SweepError, match=rf"^{re.escape(str(path))}: {message}") as caught:
        Sweep.from_file(path)
    assert "\n" not in str(caught.value)


def test_a_sweep_file_of_the_wrong_type_is_one_line_and_exit_2_from_ablate(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(_RECIPE + b"seeds: two\n" + _VALUES)
    done = subprocess.run(
        [sys.executable, "scripts/ablate.py", "--report-only", "--root", str(tmp_path), "--sweep", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: {path}: seeds: expected a whole number >= 1 (runs per value), got 'two'\n"


def test_a_sweep_file_keeps_the_numbers_and_names_yaml_reads(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(
        _RECIPE + b"name: 7\nseeds: 2\nbudget_minutes: 1e1\noverrides:\nlaunch:\ndescription:\n"
        b"values: [{name: 0.5}, {name: 2, set: {trainer.beta: 0.04}}]\n"
    )
    sweep = Sweep.from_file(path)
    assert (sweep.name, sweep.seeds, sweep.budget_minutes, sweep.overrides) == ("7", 2, 10.0, [])
    assert (sweep.launch, sweep.description) == ("", "")
    assert [(v.name, v.overrides) for v in sweep.values] == [("0.5", []), ("2", ["trainer.beta=0.04"])]
    with pytest.raises(SweepError, match=r"need seeds >= 1 and a finite budget_minutes > 0"):
        Sweep.from_file(path, budget_minutes=float("nan"))  # `--budget nan`


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_shipped_sweep_loads_as_written(path):
    """Each key of a shipped sweep reaches the Sweep as the file writes it (the type checks change nothing)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    recipe = REPO / data["recipe"]
    sweep = shipped_sweep(path)
    assert sweep.name == data.get("name", path.stem) and sweep.source == str(path)
    assert sweep.recipe.resolve() == recipe.resolve()
    assert sweep.seeds == data.get("seeds", 1) and type(sweep.seeds) is int
    assert sweep.budget_minutes == data.get("budget_minutes", 4.0) and type(sweep.budget_minutes) is float
    assert sweep.overrides == (data.get("overrides") or []) + stand_in_teacher(recipe)
    assert sweep.launch == (data.get("launch") or "")
    assert sweep.description == " ".join(data["description"].split())
    assert sweep.reach == data.get("reach")
    assert [(v.name, v.overrides) for v in sweep.values] == [
        (item["name"], [f"{key}={json.dumps(value)}" for key, value in (item.get("set") or {}).items()])
        for item in data["values"]
    ]


def test_reach_gives_the_minutes_each_run_took_to_the_named_values_final_accuracy(tmp_path):
    """`reach: GRPO`: every value's runs against GRPO's pooled final accuracy, read from their held-out
    curves; the picture gains the curves' panel."""
    from grpo_recipes.evaluation.ablation import plot

    def curve(*points):  # (minutes, accuracy) from the start
        return [{"step": 5 * i, "minutes": m, "accuracy": a} for i, (m, a) in enumerate(points)]

    results = {
        "GRPO": {
            0: _figures([1, 1, 0, 0]) | {"curve": curve((0, 0.25), (5.0, 0.5))},
            1: _figures([1, 1, 1, 0]) | {"curve": curve((0, 0.25), (6.0, 0.75))},
        },
        "distillation": {
            0: _figures([1, 1, 1, 0]) | {"curve": curve((0, 0.25), (1.5, 0.5), (3.0, 0.75))},
            1: _figures([1, 0, 0, 0]) | {"curve": curve((0, 0.25), (4.0, 0.25))},
        },
    }
    sweep = _sweep(*results)
    sweep.reach = "GRPO"
    table = summarize(sweep, results)
    assert table["reach"] == {"value": "GRPO", "accuracy": 0.625}  # 5 of 8 pooled
    rows = {row["value"]: row for row in table["rows"]}
    assert rows["GRPO"]["minutes_to_reach"] == {0: None, 1: 6.0}
    assert rows["distillation"]["minutes_to_reach"] == {0: 3.0, 1: None}
    text = markdown(table)
    assert "| minutes to reach GRPO's 62.5% (per seed) |" in text.splitlines()[2]
    assert text.splitlines()[5].endswith("| 3.0 (3.0, not reached) |")
    picture = plot(table, results, tmp_path / "sweep.png").read_bytes()
    assert picture[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(picture[16:20], "big") == 1650  # 3 panels
    # An accuracy instead of a value's name (a final measured in another sweep): the same reading, no owner.
    sweep.reach = 0.75
    table = summarize(sweep, results)
    assert table["reach"] == {"value": None, "accuracy": 0.75}
    rows = {row["value"]: row for row in table["rows"]}
    assert rows["GRPO"]["minutes_to_reach"] == {0: None, 1: 6.0}
    assert rows["distillation"]["minutes_to_reach"] == {0: 3.0, 1: None}
    assert "| minutes to reach 75.0% (per seed) |" in markdown(table).splitlines()[2]
    sweep.reach = None
    assert "reach" not in summarize(sweep, results) and "minutes to reach" not in markdown(
        summarize(sweep, results)
    )


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_shipped_sweep_loads_and_names_its_command(path):
    sweep = shipped_sweep(path)
    runs = sweep.runs(DEFAULT_ROOT)
    assert len(runs) == len(sweep.values) * sweep.seeds
    assert len({run.folder for run in runs}) == len(runs)  # no two values make the same run
    assert f"make ablate SWEEP=sweeps/{path.name}" in path.read_text() or path.stem == "dynamic-sampling"


def test_runs_with_the_same_settings_share_one_folder_across_sweeps():
    loss = Sweep.from_file(REPO / "sweeps" / "loss-type.yaml").runs(DEFAULT_ROOT)[0]
    rate = Sweep.from_file(REPO / "sweeps" / "learning-rate.yaml").runs(DEFAULT_ROOT)[0]
    assert loss.folder == rate.folder  # the recipe as it is: trained once for both sweeps
    other = Sweep.from_file(REPO / "sweeps" / "learning-rate.yaml", budget_minutes=1).runs(DEFAULT_ROOT)[0]
    assert other.folder != rate.folder  # a different budget is a different run


def test_runs_go_seed_by_seed_so_a_stopped_sweep_compares_every_value_on_the_same_seeds():
    sweep = Sweep.from_values(REPO / "recipes" / "default.yaml", "trainer.beta", "0,0.04", seeds=2)
    order = [(run.seed, run.value.name) for run in sweep.runs(DEFAULT_ROOT)]
    assert order == [(0, "0"), (0, "0.04"), (1, "0"), (1, "0.04")]


def test_a_run_is_named_by_the_recipe_settings_not_by_its_comments(tmp_path):
    text = (REPO / "recipes" / "default.yaml").read_text()
    folders = []
    for variant in (text, "# another comment\n" + text, text.replace("temperature: 1.0", "temperature: 0.9")):
        recipe = tmp_path / "default.yaml"
        recipe.write_text(variant)
        folders.append(Sweep.from_values(recipe, "trainer.beta", "0,0.04").runs(tmp_path)[1].folder)
    assert folders[0] == folders[1] != folders[2]


def ablate(*args: str) -> subprocess.CompletedProcess:
    command = ["make", "--no-print-directory", "-o", "setup", "-o", "model", "ablate", *args]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
@pytest.mark.long  # over a minute: make test-long (CI runs it)
def test_tiny_sweep_writes_its_files_and_resumes_without_redoing_finished_runs(tmp_path, tiny_model):
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_recipe(tiny_model, tmp_path / "unused"))
    root = tmp_path / "ablate"
    # ARGS' --config comes after the Makefile's own (recipes/default.yaml), so the tiny recipe wins.
    args = [
        "KEY=trainer.learning_rate",
        "VALUES=1e-4,5e-4",
        "SEEDS=1",
        "BUDGET=5",
        f"ARGS=--config {recipe} --root {root} trainer.max_steps=2",  # (BUDGET lifts max_steps; this wins)
    ]
    first = ablate(*args)
    table = json.loads((root / "tiny-trainer.learning_rate" / "sweep.json").read_text())
    assert [row["value"] for row in table["rows"]] == ["1e-4", "5e-4"]
    for row in table["rows"]:
        assert row["runs"] == 1 and row["steps"] == 2 and 0 <= row["accuracy"] <= 1
        assert row["interval"][0] <= row["accuracy"] <= row["interval"][1]
        assert 0 <= row["zero_gradient_steps"] <= 1 and row["mean_completion_length"] > 0
    paired = table["rows"][1]["paired_difference"]
    assert paired["low"] <= paired["difference"] <= paired["high"] and paired["pairs"] == 8
    assert table["rows"][1]["verdict"] in ("real", "noise")
    folders = sorted(p for p in (root / "runs").iterdir() if p.is_dir())
    assert len(folders) == 2 and all((f / "summary.json").is_file() for f in folders)
    assert all(f.with_name(f.name + ".log").is_file() for f in folders)
    # Per-problem verdicts of the runs are what the paired difference was computed from.
    by_value = {
        row["value"]: measure(Path(table["runs"][row["value"]]["0"]["folder"])) for row in table["rows"]
    }
    expected = pooled_paired_difference({0: by_value["5e-4"]["correct"]}, {0: by_value["1e-4"]["correct"]})
    assert paired == expected
    assert (root / "tiny-trainer.learning_rate" / "sweep.png").stat().st_size > 0
    assert "| 5e-4 | 1 | 2 | " in (root / "tiny-trainer.learning_rate" / "sweep.md").read_text()
    assert "[1/2]" in first.stdout and "held-out accuracy of the trained model" in first.stdout

    # Again: nothing trains. Then one run's results are lost (as if interrupted): only that one runs again.
    kept = {f: (f / "summary.json").stat().st_mtime for f in folders}
    again = ablate(*args)
    assert (
        again.stdout.count(": finished earlier (") == 2
        and "held-out accuracy of the trained model" not in again.stdout
    )
    assert {f: (f / "summary.json").stat().st_mtime for f in folders} == kept
    (folders[1] / "summary.json").unlink()
    third = ablate(*args)
    assert (
        third.stdout.count(": finished earlier (") == 1
        and "moved an unfinished earlier attempt" in third.stdout
    )
    assert (folders[0] / "summary.json").stat().st_mtime == kept[folders[0]]
    assert (folders[1] / "summary.json").is_file()
    assert len(list((root / "runs").glob("*.unfinished-*"))) == 1


def test_a_null_setting_is_the_same_run_as_the_setting_left_out(tmp_path):
    data = yaml.safe_load((REPO / "recipes" / "default.yaml").read_text())
    data.pop("warmup", None)
    recipe = write_recipe(tmp_path / "default.yaml", data)
    without = Sweep.from_values(recipe, "trainer.beta", "0,0.04").runs(tmp_path)[0].folder
    without.mkdir(parents=True)  # a finished run's folder: a sweep that names the same run finds it
    nulled = (
        Sweep.from_file(
            write_recipe(
                tmp_path / "sweep.yaml",
                {
                    "name": "nulls",
                    "recipe": str(recipe),
                    "budget_minutes": 4,
                    "values": [
                        {"name": "null", "set": {"trainer.beta": 0, "warmup": None}},
                        {"name": "0.04", "set": {"trainer.beta": 0.04}},
                    ],
                },
            )
        )
        .runs(tmp_path)[0]
        .folder
    )
    assert nulled == without


def test_the_warm_up_counts_as_training_time_but_not_in_seconds_per_step(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    summary = {
        "global_step": 10,
        "train_seconds": 85.0,  # includes the 15 s and 20 s evaluations before GRPO
        "warmup_seconds": 30.0,
        "base": {"seconds": 15.0, "accuracy": 0.25},  # the base model's, before the warm-up
        "before": {"seconds": 20.0, "accuracy": 0.5, "correct_by_problem": [False, True, True, False]},
        "after": {"accuracy": 0.75, "correct_by_problem": [True, True, True, False]},
        "sampling": {"steps": 10, "zero_gradient_steps": 2},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "log_history.json").write_text(json.dumps([{"grad_norm": 1.0, "reward": 0.5}] * 10))
    (folder / "resolved_recipe.yaml").write_text("trainer: {per_device_train_batch_size: 8}\n")
    (folder / "run_info.json").write_text(json.dumps({"world_size": 1}))
    measured = measure(folder)
    assert measured["train_seconds"] == 80.0 and measured["grpo_seconds"] == 50.0
    sweep = Sweep.from_values(REPO / "recipes" / "default.yaml", "trainer.beta", "0,0.04")
    table = markdown(summarize(sweep, {"0": {0: measured}}))
    assert "| 0 | 1 | 10 | 1.3 | 5.0 | 75.0% " in table  # 80 s of training in all; 50 s for 10 GRPO steps
    # GRPO's own change: after GRPO against its starting point (after the warm-up), on the same problems.
    assert "| reference | +25.0% [" in table


def test_a_budget_given_lifts_max_steps_so_that_it_ends_every_run(tmp_path):
    """`make ablate KEY=... VALUES=... BUDGET=4`: the recipe's own max_steps would end a run before the budget."""
    sweep = Sweep.from_values(REPO / "recipes" / "default.yaml", "trainer.beta", "0,0.04")
    sweep.lift_max_steps()
    run = sweep.runs(tmp_path)[0]
    assert run.overrides[0] == f"trainer.max_steps={LIFTED_MAX_STEPS}"
    assert load_recipe(run.recipe, run.overrides).trainer["max_steps"] == LIFTED_MAX_STEPS
    pinned = Sweep.from_values(
        REPO / "recipes" / "default.yaml", "trainer.beta", "0,0.04", overrides=["trainer.max_steps=7"]
    )
    pinned.lift_max_steps()
    run = pinned.runs(tmp_path)[0]
    assert load_recipe(run.recipe, run.overrides).trainer["max_steps"] == 7  # an explicit override still wins
    dry = subprocess.run(
        ["make", "-n", "ablate", "KEY=trainer.beta", "VALUES=0,0.04", "BUDGET=3"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert "--budget 3" in dry.stdout


def test_each_run_starts_the_way_the_sweep_says(tmp_path):
    launch = "accelerate launch --config_file configs/ddp.yaml --num_processes 2"
    sweep = Sweep.from_values(REPO / "recipes" / "default.yaml", "trainer.beta", "0,0.04", launch=launch)
    run = sweep.runs(tmp_path)[0]
    assert run.command()[:6] == [
        "accelerate",
        "launch",
        "--config_file",
        "configs/ddp.yaml",
        "--num_processes",
        "2",
    ]
    assert run.command()[6].endswith("scripts/train.py")
    alone = Sweep.from_values(REPO / "recipes" / "default.yaml", "trainer.beta", "0,0.04").runs(tmp_path)[0]
    assert alone.command()[1].endswith("scripts/train.py") and alone.folder != run.folder
    path = tmp_path / "launched.yaml"
    path.write_text(yaml.safe_dump({
        "recipe": "recipes/default.yaml", "launch": launch, "description": "The recipe as it is.",
        "values": [{"name": "a", "set": {"trainer.beta": 0}}, {"name": "b", "set": {"trainer.beta": 0.04}}],
    }))  # fmt: skip
    from_file = Sweep.from_file(path)
    assert from_file.launch == launch and from_file.runs(tmp_path)[0].folder == run.folder
    dry = subprocess.run(
        ["make", "-n", "ablate", "KEY=trainer.beta", "VALUES=0,0.04", f"LAUNCH={launch}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert f'--launch "{launch}"' in dry.stdout


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_shipped_sweep_says_which_recipe_state_it_measures(path):
    sweep = shipped_sweep(path)
    assert sweep.description.startswith("Measures "), f"{path.name}: no description of what it measures"
    pins_warmup = any(o.startswith("warmup=") for o in sweep.overrides)
    assert ("warm-up" in sweep.description) or not pins_warmup, (
        f"{path.name} pins the warm-up without saying so"
    )


@pytest.mark.smoke
def test_a_sweep_of_two_process_runs(tmp_path, tiny_model):
    """LAUNCH reaches each run: both ranks train (the batch line counts 2 processes)."""
    recipe = write_recipe(
        tmp_path / "tiny.yaml", tiny_recipe(tiny_model, tmp_path / "unused", per_device_train_batch_size=2)
    )
    root = tmp_path / "ablate"
    launch = " ".join(two_process_launcher())
    result = ablate(
        "KEY=trainer.learning_rate",
        "VALUES=1e-4,5e-4",
        f"LAUNCH={launch}",
        f"ARGS=--config {recipe} --root {root}",
    )
    logs = sorted((root / "runs").glob("*.log"))
    assert len(logs) == 2, result.stdout[-2000:]
    for log in logs:
        assert "x 2 process(es)" in log.read_text()
