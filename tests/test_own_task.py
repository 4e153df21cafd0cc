"""A user's own task as written: data keeps the types its file has, the model path is checked before
anything loads, and a warm-up's tool calls are made with the tool's own argument types and must succeed."""

from __future__ import annotations

import copy
import json
import re

import pytest
from support import MINIMAL, REPO, run_script, write_recipe

from grpo_recipes.agents import get_tool
from grpo_recipes.agents.demonstrations import demonstration, typed_arguments
from grpo_recipes.data import DataFileError, load_local_file
from grpo_recipes.recipe import RecipeError, load_recipe, parse_recipe


def test_json_lines_and_csv_keep_the_types_of_the_file(tmp_path):
    (tmp_path / "rows.jsonl").write_text(
        json.dumps({"q": "a date", "answer": "2024-06-23", "n": 3}) + "\n"
        + json.dumps({"q": "another", "answer": "2025-04-19", "n": 4.5}) + "\n"
    )  # fmt: skip
    rows = load_local_file(str(tmp_path / "rows.jsonl"))
    assert rows[0] == {"q": "a date", "answer": "2024-06-23", "n": 3.0} and type(rows[0]["answer"]) is str
    (tmp_path / "rows.csv").write_text("q,answer\nzero padded,007\na date,2024-06-23\n")
    rows = load_local_file(str(tmp_path / "rows.csv"))
    assert rows[0]["answer"] == "007" and rows[1]["answer"] == "2024-06-23"
    (tmp_path / "list.json").write_text(json.dumps([{"q": "x", "answer": "2024-01-01"}]))
    assert load_local_file(str(tmp_path / "list.json"))[0]["answer"] == "2024-01-01"


def test_a_column_of_mixed_types_is_refused_with_its_rows(tmp_path):
    (tmp_path / "mixed.jsonl").write_text(
        json.dumps({"q": "a", "answer": "12"}) + "\n" + json.dumps({"q": "b", "answer": 12}) + "\n"
    )
    with pytest.raises(DataFileError, match="column 'answer' is a str in row 1 and a int in row 2"):
        load_local_file(str(tmp_path / "mixed.jsonl"))


def test_check_states_the_column_types_and_refuses_a_solution_no_reward_reads(tmp_path):
    import datetime

    import datasets

    rows = [{"question": f"q{i}", "answer": datetime.datetime(2024, 1, 1 + i)} for i in range(10)]
    datasets.Dataset.from_list(rows).to_parquet(tmp_path / "dates.parquet")
    recipe = copy.deepcopy(MINIMAL)
    recipe["model"]["name_or_path"] = "Qwen/Qwen2.5-0.5B"
    recipe["dataset"] = {"path": "dates.parquet"}
    path = write_recipe(tmp_path / "dates.yaml", recipe)
    check = run_script("train.py", "--config", str(path), "--check")
    assert check.returncode != 0
    assert "prompt.solution_column: column 'answer' holds datetime values" in check.stderr + check.stdout


def test_the_model_path_is_checked_before_anything_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "empty").mkdir(parents=True)
    (tmp_path / "models" / "real").mkdir()
    (tmp_path / "models" / "real" / "config.json").write_text("{}")

    def parse(name: str):
        data = copy.deepcopy(MINIMAL)
        data["model"]["name_or_path"] = name
        return parse_recipe(data, "r.yaml", check_trainer=False, base_dir=tmp_path / "recipes")

    assert parse("models/real").model.name_or_path == "models/real"
    assert parse("Qwen/Qwen2.5-0.5B").model.name_or_path == "Qwen/Qwen2.5-0.5B"  # a Hub id: loaded later
    for name, problem in [
        ("models/missing", "no model folder at"),  # models/ is here: a local path, not a Hub id
        ("models/empty", "is a folder without a config.json"),
        ("./nowhere", "no model folder at"),
        (str(tmp_path / "absent"), "no model folder at"),
        ("a/b/c", "no model folder at"),
    ]:
        with pytest.raises(RecipeError, match=re.escape(problem)) as caught:
            parse(name)
        assert "model.name_or_path" in str(caught.value)


def test_a_model_beside_the_recipe_is_found_there(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text("{}")
    data = copy.deepcopy(MINIMAL)
    data["model"]["name_or_path"] = "my-model"
    recipe = parse_recipe(data, "r.yaml", check_trainer=False, base_dir=tmp_path)
    assert recipe.model.name_or_path == str(tmp_path / "my-model")


def convert(value: float, unit: str) -> str:
    """Convert a length to the other unit.

    Args:
        value: The length.
        unit: The unit `value` is in: cm or in.
    """
    return f"{value * 2.54:g} cm" if unit == "in" else f"{value / 2.54:g} in"


def test_warm_up_arguments_have_the_tools_types():
    """A demonstration's call is made with the tool's annotated types, as a model's JSON call would be."""
    assert typed_arguments(convert, {"value": "2", "unit": "in"}) == {"value": 2.0, "unit": "in"}
    row = {"prompt": [{"role": "user", "content": "2 inches?"}], "length": "2", "answer": "5.08 cm"}
    demo = demonstration(
        row, [("convert", {"value": "{length}", "unit": "in"})], "{answer}", {"convert": convert}
    )
    call = demo["completion"][0]["tool_calls"][0]["function"]
    assert call["arguments"] == {"value": 2.0, "unit": "in"} and demo["completion"][1]["content"] == "5.08 cm"
    with pytest.raises(ValueError, match="argument value='two' of convert is not a float"):
        demonstration(
            {**row, "length": "two"},
            [("convert", {"value": "{length}", "unit": "in"})],
            "",
            {"convert": convert},
        )


def test_a_warm_up_whose_call_fails_is_refused(tmp_path):
    """A demonstration whose tool call returns an error would teach the model to make that call."""
    from grpo_recipes.data import load_splits
    from grpo_recipes.toolset import Toolset
    from grpo_recipes.training.warmup import demonstrations

    recipe = load_recipe(REPO / "recipes" / "calculator-cpu.yaml", check_trainer=False)
    recipe.warmup.examples = 4
    rows = load_splits(recipe).train
    toolset = Toolset.for_recipe(recipe)
    results = [
        m["content"]
        for d in demonstrations(recipe, rows, toolset)
        for m in d["completion"]
        if m["role"] == "tool"
    ]
    assert len(results) == 4 and not any(result.startswith("Error:") for result in results)
    broken = copy.deepcopy(recipe)
    broken.warmup.calls[0].arguments = {"expression": "{question} +"}
    with pytest.raises(
        RecipeError, match=r"warmup.calls: demonstration 0's call to calculator returned an error"
    ):
        demonstrations(broken, rows, toolset)
    assert get_tool("calculator")(expression="1 +").startswith("Error:")


ROW = json.dumps({"question": "1 + 1", "answer": "2"})
BAD_DATA_FILES = [
    # (file name, its bytes, the one-line error, or None where the file loads)
    ("four.jsonl", "\n".join([ROW] * 4) + "\n", "dataset.path: 4 row(s): too few to hold a fifth out"),
    ("pretty.jsonl", '{\n  "question": "1 + 1",\n  "answer": "2"\n}\n', "pretty.jsonl:1: not a JSON object"),
    ("array.jsonl", f"[{ROW}]\n", "array.jsonl: row 1 is a list, not an object"),
    ("empty.jsonl", "", "empty.jsonl: no rows"),
    ("comma.json", f"[{ROW},]", "comma.json: not a JSON list of objects"),
    ("latin1.jsonl", ROW.replace("1 + 1", "caf\xe9") + "\n", "latin1.jsonl: not UTF-8 text"),
    ("bom.jsonl", "\ufeff" + "\n".join([ROW] * 10) + "\n", None),  # a Windows editor's byte-order mark
    ("blank-first.jsonl", "\n" + "\n".join([ROW] * 10) + "\n", None),
]


@pytest.mark.parametrize(("name", "text", "error"), BAD_DATA_FILES, ids=[case[0] for case in BAD_DATA_FILES])
def test_a_data_file_that_cannot_be_used_is_one_line_naming_it(tmp_path, name, text, error):
    """Before the model loads, in `--check` and in training alike (`load_checked_splits`): the key, the file
    and why; the columns are peeked only from a first line that is a JSON object."""
    from grpo_recipes.data import peek_columns
    from grpo_recipes.training.train import load_checked_splits

    encoding = "latin-1" if name.startswith("latin1") else "utf-8"
    (tmp_path / name).write_bytes(text.encode(encoding))
    recipe = copy.deepcopy(MINIMAL)
    recipe["model"]["name_or_path"] = "Qwen/Qwen2.5-0.5B"
    recipe["dataset"] = {"path": name}
    recipe["prompt"]["user"] = "{question}"
    loaded = load_recipe(write_recipe(tmp_path / "r.yaml", recipe))
    columns = peek_columns(loaded)
    assert columns in (None, ["question", "answer"])
    if error is None:
        assert columns == ["question", "answer"]
        assert len(load_checked_splits(loaded).train) == 8  # 10 rows, a fifth held out
        return
    with pytest.raises(RecipeError, match=re.escape(error)) as raised:
        load_checked_splits(loaded)
    assert "\n" not in str(raised.value)


def test_a_warm_up_template_that_cannot_be_filled_stops_training_before_the_model_loads(
    tmp_path, monkeypatch
):
    """The model named here does not exist: reaching it would be an OSError from the Hub, after the splits."""
    from grpo_recipes.training.train import train

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipe = load_recipe(
        REPO / "recipes" / "default.yaml",
        [
            'warmup.answer="{question} = {nonexistent}"',
            "model.name_or_path=nobody/no-such-model",
            f"trainer.output_dir={tmp_path / 'run'}",
        ],
    )
    with pytest.raises(
        RecipeError, match=r"warmup: cannot fill a demonstration from the row: KeyError: 'nonexistent'"
    ):
        train(recipe, resume=False, log=lambda *_: None)
    assert not (tmp_path / "run" / "run_info.json").exists()
