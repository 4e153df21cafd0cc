"""Recipe schema, overrides and validation: every mistake is one clear message naming file and key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support import MINIMAL, REPO, SHARED_DATA, write_recipe

from grpo_recipes.audit import audit
from grpo_recipes.data import build_prompt, load_splits, peek_columns
from grpo_recipes.recipe import (
    RecipeError,
    apply_overrides,
    check_columns,
    load_recipe,
    parse_recipe,
    template_placeholders,
)
from grpo_recipes.reward_stack import RewardStack
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
        (
            lambda d: d["dataset"]["generator"].update(params={"max_ops": 0}),
            ["dataset.generator.params: need 1 <= min_ops <= max_ops <= 6"],
        ),
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


# Every section, every annotation shape of GRPOConfig's fields, reward params and generator params: a bad
# value is one line naming its key path, what is allowed and what was given. The values are written as in
# a recipe (an override's value is read as YAML).
BAD_VALUES = [
    ("model.dtype=flaot16", "model.dtype: got 'flaot16'; allowed: auto, float32, bfloat16, float16. Did you"),
    ("model.lora={r: '8'}", "model.lora.r: expected an integer, got '8'."),
    ("model.lora={rank: 8}", "model.lora: unknown key 'rank'. Allowed: r, alpha"),
    ("model.lora=[8]", "model.lora: expected a mapping or null, got [8]."),
    ("dataset.max_train_samples=ten", "dataset.max_train_samples: expected an integer or null, got 'ten'."),
    ("dataset.generator.seed=1.5", "dataset.generator.seed: expected an integer, got 1.5."),
    ("prompt.conversational='yes'", "prompt.conversational: expected true or false, got 'yes'."),
    ("rewards.0.weight=heavy", "rewards[0].weight: expected a number, got 'heavy'."),
    ("rewards.0.params=[1]", "rewards[0].params: expected a mapping, got [1]."),
    ("evaluation.batch_size=1.5", "evaluation.batch_size: expected an integer, got 1.5."),
    ("audit.gold_answer=x", "audit.gold_answer: got 'x'; allowed: raw, gsm8k, boxed."),
    ("description=3", "description: expected a string, got 3."),
    # GRPOConfig: int | None, int, float, bool | None, enum | str, None | str | list[str], list[float] | None,
    # str | list[enum], dict[str, Any] | str | None, a Literal in a union, a nested dataclass.
    ("trainer.num_generations=eight", "trainer.num_generations: expected an integer or null, got 'eight'."),
    (
        "trainer.max_completion_length=[1]",
        "trainer.max_completion_length: expected an integer or null, got [1]",
    ),
    ("trainer.max_steps='10'", "trainer.max_steps: expected an integer, got '10'."),
    (
        "trainer.per_device_train_batch_size=true",
        "per_device_train_batch_size: expected an integer, got True.",
    ),
    ("trainer.learning_rate=fast", "trainer.learning_rate: expected a number, got 'fast'."),
    ("trainer.bf16='yes'", "trainer.bf16: expected true or false or null, got 'yes'."),
    (
        "trainer.lr_scheduler_type=5",
        "trainer.lr_scheduler_type: expected a SchedulerType or a string, got 5.",
    ),
    ("trainer.report_to=3", "trainer.report_to: expected null or a string or a list of strings, got 3."),
    ("trainer.reward_weights=[1, x]", "trainer.reward_weights[1]: expected a number, got 'x'."),
    ("trainer.debug=[3]", "trainer.debug[0]: expected a DebugOption, got 3."),
    ("trainer.model_init_kwargs={1: x}", "trainer.model_init_kwargs.1: expected a string, got 1."),
    (
        "trainer.generation_kwargs=3",
        "trainer.generation_kwargs: expected a mapping or a string or null, got 3.",
    ),
    ("trainer.trackio_static_space_id=true", "trainer.trackio_static_space_id: got True; allowed: False."),
    ("trainer.parallelism_config={tp_sise: 2}", "trainer.parallelism_config: unknown key 'tp_sise'."),
    # Reward params, from the reward's __init__ signature (on math_accuracy, set by the test).
    (
        "rewards.0.params.timeout_seconds=slow",
        "rewards[0].params.timeout_seconds: expected a number, got 'slow'.",
    ),
    (
        "rewards.0.params.answer_format=box",
        "rewards[0].params.answer_format: got 'box'; allowed: boxed, answer_tag",
    ),
    ("rewards.0.params.timeout_seconds=0", "rewards[0].params: timeout_seconds must be > 0"),
    # Generator params, from the generator function's signature; then the ranges no type can say.
    (
        "dataset.generator.params.max_ops=two",
        "dataset.generator.params.max_ops: expected an integer, got 'two'.",
    ),
    (
        "dataset.generator.params.times_symbol=·",
        "dataset.generator.params.times_symbol: got '·'; allowed: ×, *, x.",
    ),
    (
        "dataset.generator.params.max_opps=2",
        "dataset.generator.params: unknown key 'max_opps'. Allowed: min_ops",
    ),
    (
        "dataset.generator.params.operators=+/",
        "dataset.generator.params.operators: must be a non-empty string",
    ),
]


@pytest.mark.parametrize("override, expected", BAD_VALUES, ids=[override for override, _ in BAD_VALUES])
def test_a_bad_value_names_its_key_what_is_allowed_and_what_was_given(tmp_path, override, expected):
    path = write_recipe(tmp_path / "r.yaml", MINIMAL)
    setup = ["rewards.0.name=math_accuracy"] if override.startswith("rewards.0.params.") else []
    with pytest.raises(RecipeError) as caught:
        load_recipe(path, [*setup, override])
    message = str(caught.value)
    assert message.startswith(f"{path} (with overrides ") and "\n" not in message
    assert expected in message


def test_good_values_of_each_shape_pass_and_numbers_are_converted(tmp_path):
    path = write_recipe(tmp_path / "r.yaml", MINIMAL)
    recipe = load_recipe(
        path,
        [
            "trainer.num_generations=4",
            "trainer.max_completion_length=null",
            "trainer.warmup_steps=2",
            "trainer.lr_scheduler_type=cosine",
            "trainer.report_to=[tensorboard]",
            "trainer.debug=[underflow_overflow]",
            "trainer.include_num_input_tokens_seen=true",
            "trainer.pad_to_multiple_of=auto",
            "trainer.parallelism_config={tp_size: 1}",
            "rewards.0.params.last_number_fallback=false",
            "rewards.0.weight=2",
            "dataset.generator.params={max_ops: 3, times_symbol: '*'}",
        ],
    )
    assert recipe.trainer["warmup_steps"] == 2.0 and isinstance(recipe.trainer["warmup_steps"], float)
    assert recipe.trainer["parallelism_config"].tp_size == 1  # a nested dataclass is built from its mapping
    assert recipe.rewards[0].weight == 2.0 and recipe.dataset.generator.params["max_ops"] == 3
    assert yaml.safe_load(yaml.safe_dump(recipe.to_dict()))["trainer"]["report_to"] == ["tensorboard"]


def test_grpo_config_errors_name_the_key_they_are_about(tmp_path):
    # GRPOConfig's own check (a batch that is no whole number of groups) names the key the recipe set.
    data = with_change(lambda d: d.update(trainer={"per_device_train_batch_size": 3, "num_generations": 2}))
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data))
    with pytest.raises(RecipeError, match=r"r.yaml: trainer.num_generations: .*divisible by num_generations"):
        grpo_config(recipe)
    # An enum spelled wrong passes the `SchedulerType | str` annotation; GRPOConfig's error quotes the value.
    data = with_change(lambda d: d.update(trainer={"seed": 1, "lr_scheduler_type": "cosin"}))
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data))
    with pytest.raises(RecipeError, match=r"trainer.lr_scheduler_type: cosin is not a valid SchedulerType"):
        grpo_config(recipe)


def test_held_out_data_with_a_missing_column_is_named(tmp_path):
    train_file, eval_file = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train_file.write_text("".join(json.dumps({"q": f"{i} + 1", "a": str(i + 1)}) + "\n" for i in range(20)))
    eval_file.write_text(
        "".join(json.dumps({"q": f"{i} + 2", "answer": str(i + 2)}) + "\n" for i in range(5))
    )
    data = with_change(
        lambda d: d.update(
            dataset={"path": str(train_file), "eval_path": str(eval_file)},
            prompt={"user": "{q} =", "solution_column": "a"},
        )
    )
    recipe = parse_recipe(data, "r.yaml")
    expected = r"r.yaml: dataset.eval_path: the held-out data has no column 'a' \(prompt.solution_column needs it\)\. Columns: q, answer\."
    with pytest.raises(RecipeError, match=expected):
        load_splits(recipe)
    with pytest.raises(RecipeError, match=expected):
        check(recipe, load_data=False, log=lambda *_: None)  # the cheap check, from the file's first line


def test_the_rewards_built_by_the_checker_are_the_ones_training_and_evaluation_use(monkeypatch):
    import rewards

    built = []

    def recording_get_reward(name, **params):
        built.append(rewards.registry.get_reward(name, **params))
        return built[-1]

    monkeypatch.setattr(rewards, "get_reward", recording_get_reward)
    data = with_change(
        lambda d: d.update(
            rewards=[{"name": "numeric_accuracy"}, {"name": "think_format", "weight": 0.5}],
            evaluation={"reward": "gsm8k_accuracy"},  # not in the stack: built once too
            audit={"completion_template": "Answer: {answer}"},
        )
    )
    recipe = parse_recipe(data, "r.yaml", check_trainer=False)
    assert len(built) == 3
    stack = RewardStack.for_recipe(recipe)
    assert [f.function for f in stack.functions] == recipe.reward_functions
    assert all(f.function is b for f, b in zip(stack.functions, built, strict=False))
    assert stack.weights == [1.0, 0.5]
    assert recipe.evaluation_function is built[2]
    rows = [{"question": "1 + 1", "answer": "2"}]
    report = audit(recipe, rows)
    assert report.rows == 1 and report.evaluation == "gsm8k_accuracy"
    assert len(built) == 3  # neither the stack nor the audit built another
    # The evaluation reward defaults to the stack's first one: the very same instance.
    recipe = parse_recipe(copy.deepcopy(MINIMAL), "r.yaml", check_trainer=False)
    assert recipe.evaluation_function is recipe.reward_functions[0]
    assert "reward_functions" not in yaml.safe_dump(recipe.to_dict())


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
