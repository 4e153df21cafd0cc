"""Recipe schema, overrides and validation: every mistake is one clear message naming file and key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support import MINIMAL, REPO, SHARED_DATA, stand_in_teacher, write_recipe

from grpo_recipes.data import build_prompt, load_splits, peek_columns
from grpo_recipes.evaluation.audit import audit
from grpo_recipes.recipe import (
    RecipeError,
    apply_overrides,
    check_columns,
    load_recipe,
    parse_recipe,
    template_placeholders,
)
from grpo_recipes.reward_stack import RewardStack
from grpo_recipes.training.train import check, trainer_config

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
        (
            lambda d: d["prompt"].update(user="Solve {question:d}"),
            ["prompt.user: placeholder {question:d}: format specs and conversions", "write {question}"],
        ),
        (
            lambda d: d["prompt"].update(system="Be {question!r}"),
            ["prompt.system: placeholder {question!r}: format specs"],
        ),
        (
            lambda d: d["prompt"].update(user="Solve {0:d}"),
            ["prompt.user: placeholder {0} must be a plain column name"],
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
    # A value that is not valid YAML (a template with braces, unquoted) names the override, not a traceback.
    with pytest.raises(RecipeError, match=r"override 'warmup.answer=\{question\} = \{answer\}'.*quote it"):
        load_recipe(path, ["warmup.answer={question} = {answer}"])


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
    # Values TRL and PEFT accept that would fail, or train on nothing, only after the model loads.
    (
        "trainer.per_device_train_batch_size=0",
        "trainer.per_device_train_batch_size: must be at least 1, got 0.",
    ),
    (
        "trainer.gradient_accumulation_steps=0",
        "trainer.gradient_accumulation_steps: must be at least 1, got 0.",
    ),
    ("trainer.max_completion_length=-5", "trainer.max_completion_length: must be at least 1, got -5."),
    ("trainer.temperature=0", "trainer.temperature: must be above 0, got 0.0"),
    ("model.lora={r: 0}", "model.lora: r: the adapter's rank must be at least 1, got 0"),
    ("model.lora={dropout: 2}", "model.lora: dropout: a probability in [0, 1), got 2.0"),
    ("model.lora={target_modules: []}", "model.lora: target_modules: name at least one module"),
    ("rewards.0.weight=.nan", "rewards[0].weight: expected a number, got nan."),
    ("trainer.learning_rate=.inf", "trainer.learning_rate: expected a number, got inf."),
    ("dataset.generator.train_size=0", "dataset.generator.train_size: must be at least 1, got 0."),
    ("dataset.generator.eval_size=-3", "dataset.generator.eval_size: must be 0 or more, got -3."),
    ("dataset.max_train_samples=0", "dataset.max_train_samples: must be at least 1 (or unset: all), got 0."),
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
        trainer_config(recipe)
    # An enum spelled wrong passes the `SchedulerType | str` annotation; GRPOConfig's error quotes the value.
    data = with_change(lambda d: d.update(trainer={"seed": 1, "lr_scheduler_type": "cosin"}))
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data))
    with pytest.raises(RecipeError, match=r"trainer.lr_scheduler_type: cosin is not a valid SchedulerType"):
        trainer_config(recipe)


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

    build_reward = rewards.registry.build_reward

    def recording_build_reward(name, params, search=()):
        built.append(build_reward(name, params, search=search))
        return built[-1]

    monkeypatch.setattr(rewards, "build_reward", recording_build_reward)
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


# Hub datasets are not reachable offline: recipes run on local copies of the same rows from ../shared/data.
LOCAL_COPIES = {
    "openai/gsm8k": "gsm8k/train.jsonl",
    "HuggingFaceH4/MATH-500": "math500/test.jsonl",
    "DigitalLearningGmbH/MATH-lighteval": "math500/test.jsonl",  # same columns as the MATH train split
}


def offline_data(path: Path) -> list[str]:
    """Overrides that point the recipe at local data (none when its data is local or generated already).

    Skips the test, after validating the schema and the trainer settings, when no local copy is here.
    """
    recipe = load_recipe(path, stand_in_teacher(path))
    if recipe.dataset.path is None or Path(recipe.dataset.path).exists():
        return []
    name = LOCAL_COPIES.get(recipe.dataset.path)
    if name is None or not (SHARED_DATA / name).exists():
        from grpo_recipes.launch.smoke import offline_data as smoke_data

        return smoke_data(recipe)[0]  # the made-up sample with the dataset's columns that smoke runs use
    return [
        f"dataset.path={SHARED_DATA / name}",
        "dataset.eval_split=null",
        "dataset.eval_path=null",
        "dataset.config=null",
    ]


def test_recipes_that_log_completions_print_a_few_of_them():
    """TRL prints every completion of the step by default: 512 completions a logging step for gsm8k."""
    for path in RECIPES:
        trainer = yaml.safe_load(path.read_text()).get("trainer", {})
        if trainer.get("log_completions"):
            assert 0 < trainer.get("num_completions_to_print", 0) <= 8, path.name


def test_a_length_penalty_takes_the_trainers_completion_length_and_refuses_another(tmp_path):
    """soft_overlong's ramp must end where generation stops: one source of truth, trainer.max_completion_length."""
    math = REPO / "recipes" / "math.yaml"
    local = [f"dataset.path={tmp_path / 'rows.jsonl'}", "dataset.eval_split=null", "dataset.config=null"]
    (tmp_path / "rows.jsonl").write_text('{"problem": "1 + 1", "solution": "\\boxed{2}"}\n')
    recipe = load_recipe(math, [*local, "trainer.max_completion_length=2048"], check_trainer=False)
    (overlong,) = [r for r in recipe.reward_functions if r.__name__ == "soft_overlong"]
    assert overlong.max_completion_length == 2048 and overlong.cache_length == 409  # a fifth of the limit
    with pytest.raises(
        RecipeError,
        match=r"rewards\[1\]\.params\.max_completion_length: 1024 differs from trainer\.max_completion_length \(2048\)",
    ):
        load_recipe(
            math,
            [*local, "trainer.max_completion_length=2048", "rewards.1.params.max_completion_length=1024"],
            check_trainer=False,
        )


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_validates_and_dry_runs(path, capsys, monkeypatch):
    """Every shipped recipe parses, builds its GRPOConfig, and (with its data local) renders prompts."""
    import huggingface_hub.constants

    # A tool recipe's check loads its tokenizer: a Hub model's fails at once here instead of retrying the network.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    recipe = load_recipe(path, [*stand_in_teacher(path), *offline_data(path)])
    check(recipe, load_data=True)
    out = capsys.readouterr().out
    assert "first prompt:" in out and out.rstrip().endswith("OK")


@pytest.mark.slow
@pytest.mark.long  # about a minute over every recipe; each recipe's pieces have faster tests of their own
@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_trains_one_step_on_a_tiny_model(path, tiny_model, tmp_path):
    """Each recipe's prompts, rewards, LoRA setting and loss through one real GRPO step, on the tiny model,
    a few rows of its data and short completions; GPU-only settings (vLLM, bf16) off on this CPU."""
    from grpo_recipes.training.train import train

    recipe = load_recipe(path, stand_in_teacher(path))
    sample = (
        ["dataset.generator.train_size=8", "dataset.generator.eval_size=2"]
        if recipe.dataset.generator is not None
        else ["dataset.max_train_samples=8", "dataset.max_eval_samples=2"]
    )
    overrides = [
        *offline_data(path),
        *sample,
        f"model.name_or_path={tiny_model}",
        "model.dtype=float32",
        "evaluation.enabled=false",  # the before/after evaluation is tested in test_train_e2e.py
        f"trainer.output_dir={tmp_path / 'run'}",
        "trainer.max_steps=1",
        # A warm-up (calculator-cpu's is 24 steps) cut to one step: tests/training/test_train.py tests its own.
        *(["warmup.max_steps=1", "warmup.per_device_train_batch_size=2"] if recipe.warmup else []),
        "trainer.per_device_train_batch_size=2",
        "trainer.gradient_accumulation_steps=1",
        # A distillation recipe: the tiny model teaches itself, one sample a prompt.
        *([f"teacher.name_or_path={tiny_model}", "teacher.dtype=float32"] if recipe.teacher else []),
        *(["trainer.num_generations=2"] if recipe.teacher is None else []),
        "trainer.max_completion_length=8",
        "trainer.use_vllm=false",
        "trainer.bf16=false",
        "trainer.gradient_checkpointing=false",
        "trainer.log_completions=false",
        "trainer.save_strategy='no'",  # quoted: YAML reads a bare no as false
    ]
    summary = train(load_recipe(path, overrides), log=lambda *_: None)
    assert summary["global_step"] == 1
    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    step = next(h for h in history if "reward" in h)
    for spec in recipe.rewards:  # every reward of the recipe scored the step's completions
        assert any(key.startswith(f"rewards/{spec.name}") for key in step), sorted(step)


def rows_file(path: Path, count: int, start: int = 0) -> Path:
    """A small JSONL of question/answer rows in the columns `q` and `ans`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"q": f"{i} + 1", "ans": str(i + 1)}) + "\n" for i in range(start, count))
    )
    return path


def own_data_recipe(**dataset) -> dict:
    return with_change(
        lambda d: d.update(dataset=dataset, prompt={"user": "{q} Answer: <number>", "solution_column": "ans"})
    )


def test_relative_data_paths_are_found_next_to_the_recipe_first(tmp_path, monkeypatch):
    recipe_dir, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    rows_file(recipe_dir / "data" / "train.jsonl", 30)
    rows_file(recipe_dir / "data" / "test.jsonl", 5)
    path = write_recipe(
        recipe_dir / "r.yaml", own_data_recipe(path="data/train.jsonl", eval_path="data/test.jsonl")
    )
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory has no data/ folder: the recipe's folder is used
    recipe = load_recipe(path)
    assert recipe.dataset.path == str(recipe_dir / "data" / "train.jsonl")
    assert recipe.dataset.eval_path == str(recipe_dir / "data" / "test.jsonl")
    splits = load_splits(recipe)
    assert (len(splits.train), len(splits.eval)) == (30, 5)

    # Not next to the recipe: the working directory, as before (overrides follow the same rule).
    rows_file(elsewhere / "mine.jsonl", 10)
    assert load_recipe(path, ["dataset.path=mine.jsonl"]).dataset.path == "mine.jsonl"
    # Next to the recipe wins when both exist.
    rows_file(elsewhere / "data" / "train.jsonl", 10)
    assert load_recipe(path).dataset.path == str(recipe_dir / "data" / "train.jsonl")
    # Nowhere: the error says where it looked.
    with pytest.raises(RecipeError) as error:
        load_recipe(path, ["dataset.eval_path=data/missing.jsonl"])
    assert (
        "dataset.eval_path: local file data/missing.jsonl does not exist (looked next to the recipe "
        f"({recipe_dir}) nor in the working directory)." in str(error.value)
    )


def test_a_data_file_suffix_in_capitals_is_read_and_an_unread_one_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows_file(tmp_path / "ROWS.JSONL", 30)
    (tmp_path / "rows.txt").write_text("1 + 1 = 2\n")
    path = write_recipe(tmp_path / "r.yaml", own_data_recipe(path="ROWS.JSONL"))
    recipe = load_recipe(path)
    assert peek_columns(recipe) == ["q", "ans"]
    assert load_splits(recipe).rows_before_hold_out == 30
    import datasets

    from grpo_recipes.launch.smoke import is_hub_dataset

    rows = [{"q": f"{i} + 1", "ans": str(i + 1)} for i in range(20)]
    (tmp_path / "ROWS.JSON").write_text(json.dumps(rows))
    (tmp_path / "ROWS.CSV").write_text("q,ans\n" + "".join(f"{r['q']},{r['ans']}\n" for r in rows))
    datasets.Dataset.from_list(rows).to_parquet(tmp_path / "ROWS.PARQUET")
    for name in ("ROWS.JSON", "ROWS.CSV", "ROWS.PARQUET"):
        assert load_splits(load_recipe(path, [f"dataset.path={name}"])).rows_before_hold_out == 20
        assert not is_hub_dataset(name)
    # A file that exists but is not one this reads is named, not looked up on the Hub.
    for name, what in (("rows.txt", "suffix '.txt'"), ("r.yaml", "suffix '.yaml'")):
        with pytest.raises(RecipeError) as error:
            load_recipe(path, [f"dataset.eval_path={name}"])
        assert str(error.value).endswith(
            f"dataset.eval_path: local file {tmp_path / name} is not a data file this reads ({what}); "
            "use one of .jsonl, .json, .parquet, .csv (for a Hub id, move the file: it has the same name)."
        )
    # A Hub id is still a Hub id.
    assert load_recipe(path, ["dataset.path=openai/gsm8k", "dataset.config=main"]).dataset.path == (
        "openai/gsm8k"
    )


def test_a_parquet_file_without_rows_is_refused_as_the_other_kinds_are(tmp_path):
    import datasets

    from grpo_recipes.data import DataFileError, load_local_file, read_data_file

    datasets.Dataset.from_dict({"q": [], "ans": []}).to_parquet(tmp_path / "empty.parquet")
    (tmp_path / "empty.jsonl").write_text("\n")
    for name in ("empty.parquet", "empty.jsonl"):
        with pytest.raises(DataFileError, match=r"empty\.\w+: no rows\.$"):
            load_local_file(str(tmp_path / name))
        # As `--data` reads it (evaluation, the audit): the same line, not wrapped in another.
        with pytest.raises(DataFileError) as error:
            read_data_file(tmp_path / name)
        assert str(error.value) == f"{tmp_path / name}: no rows."
    # A .parquet file that is not Parquet: one line naming the file, when training loads it.
    (tmp_path / "text.parquet").write_text("not parquet\n")
    recipe = parse_recipe(own_data_recipe(path=str(tmp_path / "text.parquet")), "r.yaml")
    with pytest.raises(RecipeError) as error:
        load_splits(recipe)
    assert str(error.value).startswith(f"r.yaml: dataset.path: {tmp_path / 'text.parquet'}: cannot be read (")


def test_rows_held_out_of_the_training_data_are_announced(tmp_path, capsys):
    data = own_data_recipe(path=str(rows_file(tmp_path / "train.jsonl", 50)))
    recipe = parse_recipe(data, "r.yaml")
    check(recipe, load_data=True)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("dataset:"))
    assert line == (
        "dataset: 40 training rows, 10 held-out rows (the recipe names no held-out data, dataset.eval_path "
        "or dataset.eval_split, so 10 of its 50 rows, a fifth at most, are held out of training for evaluation)"
    )
    # With held-out data named, or evaluation off, nothing is taken from the training rows and nothing said.
    data["dataset"]["eval_path"] = str(rows_file(tmp_path / "test.jsonl", 55, start=50))
    assert (
        load_splits(parse_recipe(data, "r.yaml")).describe() == "dataset: 50 training rows, 5 held-out rows"
    )
    data["dataset"].pop("eval_path")
    data["evaluation"] = {"enabled": False}
    assert (
        load_splits(parse_recipe(data, "r.yaml")).describe() == "dataset: 50 training rows, 0 held-out rows"
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "model:\n  name_or_path: x\n seed: 3\n",
            "r.yaml:3:2: not valid YAML: expected <block end>, but found '<block mapping start>' (while "
            "parsing a block mapping at line 1, column 1)\n"
            "    1 | model:\n"
            "      | ^\n"
            "    3 |  seed: 3\n"
            "      |  ^",
        ),
        (
            "trainer:\n  seed: 0\n  max_steps 10: x: y\n",
            "r.yaml:3:18: not valid YAML: mapping values are not allowed here\n"
            "    3 |   max_steps 10: x: y\n"
            "      |                  ^",
        ),
        (
            'prompt:\n  user: "{q}\n',
            "r.yaml:3:1: not valid YAML: found unexpected end of stream (while scanning a quoted scalar at "
            "line 2, column 9)\n"
            '    2 |   user: "{q}\n'
            "      |         ^\n"
            "    3 |  (end of file)\n"
            "      | ^",
        ),
        (
            "model:\n\tname_or_path: x\n",
            "r.yaml:2:1: not valid YAML: found character '\\t' that cannot start any token\n"
            "    2 | \tname_or_path: x\n"
            "      | ^",
        ),
    ],
    ids=["indentation", "colon", "unclosed-quote", "tab"],
)
def test_yaml_syntax_errors_give_file_line_column_and_a_caret(tmp_path, text, expected):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert str(error.value) == f"{tmp_path}/{expected}"
    assert "<unicode string>" not in str(error.value)


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda d: d.update(seed=3),
            "r.yaml: unknown key 'seed' at the top level. Did you mean trainer.seed or dataset.generator.seed?",
        ),
        (
            lambda d: d.update(learning_rate=1e-5),
            "r.yaml: unknown key 'learning_rate' at the top level. Did you mean trainer.learning_rate?",
        ),
        (
            lambda d: d["model"].update(max_steps=3),
            "r.yaml: model: unknown key 'max_steps'. Did you mean trainer.max_steps?",
        ),
        (
            lambda d: d.update(trainer={"max_train_samples": 3}),
            "r.yaml: trainer: unknown key 'max_train_samples'. Did you mean dataset.max_train_samples?",
        ),
        (
            lambda d: d["dataset"].update(train_size=10),
            "r.yaml: dataset: unknown key 'train_size'. Did you mean dataset.generator.train_size?",
        ),
        (
            lambda d: d.update(Lora={"r": 8}),
            "r.yaml: unknown key 'Lora' at the top level. Did you mean model.lora?",
        ),
    ],
    ids=["seed", "learning_rate", "model.max_steps", "trainer.max_train_samples", "train_size", "Lora"],
)
def test_a_key_in_the_wrong_section_names_the_right_one(tmp_path, change, expected):
    path = write_recipe(tmp_path / "r.yaml", with_change(change))
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert str(error.value) == f"{tmp_path}/{expected}"


def test_a_difference_of_case_alone_is_suggested(tmp_path):
    data = own_data_recipe(path=str(rows_file(tmp_path / "train.jsonl", 10)))
    data["prompt"]["user"] = "{Q} Answer: <number>"
    assert recipe_error(data, tmp_path=tmp_path).endswith(
        "prompt.user: placeholder {Q} has no matching dataset column. Columns: q, ans. Did you mean 'q'?"
    )
    data["prompt"]["user"], data["prompt"]["solution_column"] = "{q}", "Ans"
    assert recipe_error(data, tmp_path=tmp_path).endswith("Did you mean 'ans'?")
    data["prompt"]["solution_column"] = "ans"
    data["trainer"] = {"Learning_Rate": 1e-5}
    assert recipe_error(data, tmp_path=tmp_path).endswith(
        "trainer: unknown key 'Learning_Rate'. Did you mean 'learning_rate'?"
    )


def test_a_key_given_twice_is_an_error_not_the_last_one_silently(tmp_path):
    """PyYAML keeps the last of two equal keys: a `trainer:` section appended to change one setting would drop
    every setting of the first. The error points at the second, with the line of the first."""
    path = write_recipe(tmp_path / "r.yaml", MINIMAL)
    path.write_text(path.read_text() + "trainer:\n  learning_rate: 1e-6\ntrainer:\n  max_steps: 5\n")
    with pytest.raises(
        RecipeError, match=r"r.yaml:\d+:1: not valid YAML: key 'trainer' given twice .*first at line \d+"
    ):
        load_recipe(path)
    path.write_text(yaml.safe_dump(MINIMAL) + "trainer:\n  seed: 1\n  seed: 2\n")
    with pytest.raises(RecipeError, match="key 'seed' given twice"):
        load_recipe(path)
    # A merge key may repeat what it merges: that is what it is for.
    from grpo_recipes.recipe import load_yaml_strict

    assert load_yaml_strict("a: &a {seed: 1, lr: 2}\nb:\n  <<: *a\n  seed: 2\n")["b"] == {"seed": 2, "lr": 2}
    # ...also where the merged mapping merges one itself, and is merged again further down.
    nested = "d: {base: &b {lr: 1}, tuned: &t {<<: *b, lr: 2}}\nrun: {<<: *t}\n"
    assert load_yaml_strict(nested)["run"] == {"lr": 2}
    # An override's value is read the same way.
    with pytest.raises(RecipeError, match="key 'r' given twice"):
        load_recipe(write_recipe(tmp_path / "o.yaml", MINIMAL), ["model.lora={r: 8, r: 16}"])


def test_a_recipe_that_is_a_folder_or_not_utf8_is_one_line(tmp_path):
    with pytest.raises(RecipeError, match="is a folder, not a recipe file"):
        load_recipe(tmp_path)
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(MINIMAL).encode() + "description: caf\xe9\n".encode("latin-1"))
    with pytest.raises(RecipeError, match="not UTF-8 text"):
        load_recipe(path)
