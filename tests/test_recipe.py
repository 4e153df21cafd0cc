"""Recipe schema, overrides and validation: every mistake is one clear message naming file and key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support import MINIMAL, REPO, SHARED_DATA, write_recipe

from grpo_recipes.data import build_prompt, load_splits, peek_columns
from grpo_recipes.recipe import (
    RecipeError,
    apply_overrides,
    check_columns,
    load_recipe,
    parse_recipe,
    template_placeholders,
)
from grpo_recipes.train import check, grpo_config

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def recipe_error(data: dict, overrides=None, tmp_path: Path | None = None) -> str:
    path = write_recipe(tmp_path / "r.yaml", data)
    with pytest.raises(RecipeError) as info:
        recipe = load_recipe(path, overrides)
        check_columns(recipe, peek_columns(recipe))
    return str(info.value)


def with_change(change) -> dict:
    data = copy.deepcopy(MINIMAL)
    change(data)
    return data


def test_minimal_recipe_parses_with_defaults(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", MINIMAL))
    assert recipe.name == "r"
    assert recipe.prompt.conversational is True
    assert recipe.rewards[0].weight == 1.0
    assert recipe.evaluation_reward.name == "numeric_accuracy"


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda d: d["model"].update(name_or_pth="x"),
            ["model: unknown key 'name_or_pth'", "Did you mean 'name_or_path'"],
        ),
        (lambda d: d.update(trainr={}), ["unknown key 'trainr'", "Did you mean 'trainer'"]),
        (
            lambda d: d.update(trainer={"learning_rat": 1e-6}),
            ["trainer: unknown key 'learning_rat'", "'learning_rate'"],
        ),
        (
            lambda d: d.update(trainer={"max_steps": "ten"}),
            ["trainer.max_steps: expected an integer, got 'ten'"],
        ),
        (lambda d: d.update(trainer={"learning_rate": "fast"}), ["trainer.learning_rate: expected a number"]),
        (lambda d: d["model"].update(dtype="fp32"), ["model.dtype: got 'fp32'; allowed: auto, float32"]),
        (
            lambda d: d["model"].update(lora={"rank": 8}),
            ["model.lora: unknown key 'rank'", "Allowed: r, alpha"],
        ),
        (
            lambda d: d["rewards"][0].update(name="numeric_acuracy"),
            ["rewards[0].name: unknown reward", "'numeric_accuracy'"],
        ),
        (lambda d: d["rewards"][0].update(params={"bogus": 1}), ["rewards[0].params", "bogus"]),
        (lambda d: d.update(rewards=[]), ["rewards: at least one reward"]),
        (
            lambda d: d["prompt"].update(user="Solve {qestion}"),
            ["prompt.user: placeholder {qestion}", "'question'"],
        ),
        (
            lambda d: d["prompt"].update(solution_column="answr"),
            ["prompt.solution_column: column 'answr'", "'answer'"],
        ),
        (lambda d: d["prompt"].pop("solution_column"), ["prompt.solution_column: missing required key"]),
        (
            lambda d: d["prompt"].update(user="Solve {0.__class__}"),
            ["prompt.user: placeholder {0.__class__} must be"],
        ),
        (lambda d: d["dataset"].update(path="data.jsonl"), ["dataset: give exactly one of"]),
        (
            lambda d: d["dataset"]["generator"].update(name="arithmatic"),
            ["unknown generator", "'arithmetic'"],
        ),
        (lambda d: d["dataset"]["generator"].update(params={"max_ops": 0}), ["dataset.generator.params"]),
        (lambda d: d.update(evaluation={"reward": "acc"}), ["evaluation.reward: unknown reward 'acc'"]),
        (
            lambda d: d["dataset"]["generator"].update(train_size=300, eval_size=100, params={"max_ops": 1}),
            ["dataset.generator: train_size 300 + eval_size 100 exceed the 243 distinct problems"],
        ),
    ],
)
def test_bad_recipes_name_file_key_and_fix(tmp_path, change, expected):
    message = recipe_error(with_change(change), tmp_path=tmp_path)
    assert message.startswith(str(tmp_path / "r.yaml"))
    for part in expected:
        assert part in message
    assert "\n" not in message


def test_missing_local_file_and_bad_yaml(tmp_path):
    data = with_change(lambda d: d.update(dataset={"path": str(tmp_path / "nope.jsonl")}))
    assert "dataset.path: local file" in recipe_error(data, tmp_path=tmp_path)
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(tmp_path / "bad.yaml")
    with pytest.raises(RecipeError, match="no such recipe file"):
        load_recipe(tmp_path / "missing.yaml")


def test_yaml_exponent_without_dot_is_read_as_a_number(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(MINIMAL) + "trainer:\n  learning_rate: 1e-6\n")
    assert load_recipe(path).trainer["learning_rate"] == pytest.approx(1e-6)


def test_overrides_apply_and_are_validated(tmp_path):
    path = write_recipe(tmp_path / "r.yaml", MINIMAL)
    recipe = load_recipe(path, ["trainer.learning_rate=3e-6", "rewards.0.weight=0.5", "model.lora.r=4"])
    assert recipe.trainer["learning_rate"] == pytest.approx(3e-6)
    assert recipe.rewards[0].weight == 0.5
    assert recipe.model.lora.r == 4
    with pytest.raises(
        RecipeError, match=r"with overrides trainer.lerning_rate=1.*Did you mean 'learning_rate'"
    ):
        load_recipe(path, ["trainer.lerning_rate=1"])
    with pytest.raises(RecipeError, match="not of the form key.path=value"):
        load_recipe(path, ["trainer.learning_rate"])
    with pytest.raises(RecipeError, match="no list item 3"):
        load_recipe(path, ["rewards.3.weight=1"])


def test_apply_overrides_reads_values_as_yaml():
    data = apply_overrides({"a": {"b": 1}}, ["a.b=true", "a.c=[1, 2]", "d.e=null"], "x")
    assert data == {"a": {"b": True, "c": [1, 2]}, "d": {"e": None}}


def test_grpo_config_errors_become_recipe_errors(tmp_path):
    data = with_change(lambda d: d.update(trainer={"per_device_train_batch_size": 3, "num_generations": 2}))
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data))
    with pytest.raises(RecipeError, match="trainer: .*divisible"):
        grpo_config(recipe)


def test_template_placeholders_and_prompt_building():
    assert template_placeholders("{a} and {b} and {a}") == ["a", "b"]
    recipe = parse_recipe(copy.deepcopy(MINIMAL), "x")
    assert build_prompt({"question": "1 + 1"}, recipe.prompt) == [
        {"role": "user", "content": "Calculate 1 + 1."}
    ]
    recipe.prompt.conversational, recipe.prompt.system = False, "Be exact."
    assert build_prompt({"question": "1 + 1"}, recipe.prompt) == "Be exact.\n\nCalculate 1 + 1."


def test_local_file_splits_hold_out_evaluation_rows(tmp_path):
    rows = [{"q": f"{i} + 1", "a": str(i + 1)} for i in range(50)]
    data_file = tmp_path / "rows.jsonl"
    data_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = with_change(
        lambda d: d.update(
            dataset={"path": str(data_file)},
            prompt={"user": "{q} =", "solution_column": "a"},
            evaluation={"max_samples": 5},
        )
    )
    splits = load_splits(parse_recipe(data, "x"))
    assert len(splits.train) == 45 and len(splits.eval) == 5
    assert not set(splits.train["q"]) & set(splits.eval["q"])
    assert splits.train[0]["prompt"][0]["content"].endswith(" =")
    assert splits.train[0]["solution"] == str(int(splits.train[0]["q"].split()[0]) + 1)


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_validates_and_dry_runs(path, capsys):
    """Every shipped recipe parses, builds its GRPOConfig, and (with its data local) renders prompts."""
    recipe = load_recipe(path)
    overrides = []
    if recipe.dataset.path and not Path(recipe.dataset.path).exists():
        # Hub datasets are not reachable offline: dry-run on the same rows from ../shared/data when present.
        local = {
            "openai/gsm8k": "gsm8k/train.jsonl",
            "HuggingFaceH4/MATH-500": "math500/test.jsonl",
            "DigitalLearningGmbH/MATH-lighteval": "math500/test.jsonl",  # same columns as the MATH train split
        }
        name = local.get(recipe.dataset.path)
        if name is None or not (SHARED_DATA / name).exists():
            grpo_config(recipe, checking=True)
            pytest.skip(
                f"{recipe.dataset.path} is not available offline; schema and trainer settings validated"
            )
        overrides = [
            f"dataset.path={SHARED_DATA / name}",
            "dataset.eval_split=null",
            "dataset.eval_path=null",
            "dataset.config=null",
        ]
    recipe = load_recipe(path, overrides)
    check(recipe, load_data=True)
    out = capsys.readouterr().out
    assert "first prompt:" in out and out.rstrip().endswith("OK")
