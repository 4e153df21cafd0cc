"""Recipe sections tools, environment, warmup and model.chat_template: each mistake is one line naming file and
key, found when the recipe loads (before any model), and a recipe's toolset is built as it says."""

from __future__ import annotations

import pytest
import yaml
from support import REPO, model_stub, run_script, write_recipe

from grpo_recipes.agents.templates import trl_templates_dir
from grpo_recipes.recipe import RecipeError, load_recipe
from grpo_recipes.toolset import Toolset

CALCULATOR = REPO / "recipes" / "calculator-cpu.yaml"


def calculator_recipe(tmp_path, change=None):
    """A copy of recipes/calculator-cpu.yaml, changed by `change(data)`; its model folder holds a config only,
    so a check that loaded the model would fail on that instead."""
    data = yaml.safe_load(CALCULATOR.read_text())
    data["model"]["name_or_path"] = str(model_stub(tmp_path / "no-model-here"))
    if change is not None:
        change(data)
    return write_recipe(tmp_path / "calc.yaml", data)


def set_in(path: str, value):
    def change(data):
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def delete(path: str):
    def change(data):
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        del node[last]

    return change


def test_the_shipped_recipe_loads_with_its_tools_and_warmup(tmp_path):
    recipe = load_recipe(calculator_recipe(tmp_path), check_trainer=False)
    assert recipe.uses_tools and recipe.environment is None
    assert [(t.name, t.timeout_seconds, t.max_result_chars) for t in recipe.tools] == [("calculator", 5, 200)]
    assert recipe.model.chat_template == "qwen2_5"
    assert recipe.warmup.calls[0].tool == "calculator" and recipe.warmup.answer == "The answer is {answer}."


CASES = [
    (
        set_in("tools.0.name", "calculater"),
        "tools[0].name",
        "unknown tool 'calculater'. Shipped: calculator, python",
    ),
    (
        set_in("tools.0.name", "no_such_module_for_tools:calc"),
        "tools[0].name",
        "cannot import no_such_module_for_tools (looked in",
    ),
    (
        set_in("tools.0.name", "grpo_recipes.agents.calculator:nothing"),
        "tools[0].name",
        "has no attribute 'nothing'",
    ),
    (
        set_in("tools.0", {"name": "grpo_recipes.agents.calculator:calculate", "params": {"max_length": 9}}),
        "tools[0].params",
        "a tool given by import path takes no params (got max_length)",
    ),
    (set_in("tools.0.params", {"max_lenght": 9}), "tools[0].params", "unknown key 'max_lenght'"),
    (set_in("tools.0.params", {"max_length": "long"}), "tools[0].params.max_length", "expected an integer"),
    (set_in("tools.0.timeout_seconds", 0), "tools[0].timeout_seconds", "must be in (0, 3600] seconds, got 0"),
    (
        set_in("tools.0.timeout_seconds", -1),
        "tools[0].timeout_seconds",
        "must be in (0, 3600] seconds, got -1",
    ),
    (set_in("tools.0.max_result_chars", 0), "tools[0].max_result_chars", "must be at least 1, got 0"),
    (set_in("tools.0.timeout", 5), "tools[0]", "unknown key 'timeout'"),
    (delete("tools"), "warmup.calls", "the warm-up demonstrates tool calls, but the recipe has no tools."),
    (set_in("warmup.max_steps", 0), "warmup.max_steps", "must be a whole number >= 1, not 0"),
    (set_in("warmup.examples", -3), "warmup.examples", "must be a whole number >= 1, not -3"),
    (set_in("warmup.learning_rate", 0.0), "warmup.learning_rate", "must be a number in (0, 1), not 0.0"),
    (
        set_in("warmup.calls.0.tool", "python"),
        "warmup.calls[0].tool",
        "'python' is not one of the recipe's tools (calculator).",
    ),
    (
        set_in("model.chat_template", "phi3"),
        "model.chat_template",
        "TRL cannot parse tool calls written with 'phi3'; choose one of ",
    ),
    (
        set_in("model.chat_template", "qwen9"),
        "model.chat_template",
        "unknown chat template 'qwen9'. TRL ships: ",
    ),
    (
        set_in("model.chat_template", "missing.jinja"),
        "model.chat_template",
        "no such template file: missing.jinja",
    ),
    (delete("prompt.system"), "prompt.system", "the qwen2_5 template writes its own system message"),
    (
        set_in("environment", {"name": "guess_numbr"}),
        "environment.name",
        "unknown environment 'guess_numbr'. Shipped: guess_number",
    ),
    (
        set_in("environment", {"name": "guess_number", "params": {"highest": 9}}),
        "environment.params",
        "unknown key 'highest'",
    ),
    (
        set_in("environment", {"name": "guess_number", "timeout_seconds": 0}),
        "environment.timeout_seconds",
        "must be in (0, 3600] seconds",
    ),
]


@pytest.mark.parametrize("change, key, problem", CASES, ids=[f"{case[1]}:{case[2][:30]}" for case in CASES])
def test_each_mistake_is_one_line_naming_file_and_key(tmp_path, change, key, problem):
    path = calculator_recipe(tmp_path, change)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path, check_trainer=False)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert problem in message and "\n" not in message


def test_the_template_error_names_the_templates_that_work(tmp_path):
    with pytest.raises(RecipeError) as caught:
        load_recipe(calculator_recipe(tmp_path, set_in("model.chat_template", "phi3")), check_trainer=False)
    assert "qwen2_5" in caught.value.problem and "llama3_1" in caught.value.problem


def test_a_jinja_template_is_found_next_to_the_recipe(tmp_path):
    (tmp_path / "chatml-tools.jinja").write_text((trl_templates_dir() / "qwen2_5.jinja").read_text())
    recipe = load_recipe(
        calculator_recipe(tmp_path, set_in("model.chat_template", "chatml-tools.jinja")), check_trainer=False
    )
    assert recipe.model.chat_template == str(tmp_path / "chatml-tools.jinja")


def test_a_template_without_tool_parsing_is_fine_for_a_recipe_without_tools(tmp_path):
    def no_tools(data):
        del data["tools"], data["warmup"]
        data["model"]["chat_template"] = "phi3"

    recipe = load_recipe(calculator_recipe(tmp_path, no_tools), check_trainer=False)
    assert not recipe.uses_tools and recipe.model.chat_template == "phi3"


def test_an_environment_alone_makes_a_tool_recipe(tmp_path):
    def game(data):
        del data["tools"], data["warmup"]
        data["environment"] = {"name": "guess_number", "params": {"high": 50}, "timeout_seconds": 2}

    recipe = load_recipe(calculator_recipe(tmp_path, game), check_trainer=False)
    assert recipe.uses_tools and recipe.environment.params == {"high": 50}
    toolset = Toolset.for_recipe(recipe)
    assert toolset.tools == [] and toolset.enabled
    game_instance = toolset.environment_factory()
    game_instance.reset(secret=30)
    assert game_instance.guess(number=40) == "lower" and toolset.stats.as_dict()["calls"] == 1


def test_the_toolset_follows_the_recipe(tmp_path):
    recipe = load_recipe(
        calculator_recipe(tmp_path, set_in("tools.0.max_result_chars", 3)), check_trainer=False
    )
    toolset = Toolset.for_recipe(recipe)
    assert list(toolset.by_name()) == ["calculator"] and toolset.environment_factory is None
    assert toolset.tools[0](expression="1000 * 1000") == "10\n[... cut: 7 characters in all ...]\n0"
    assert toolset.stats.as_dict() == {"calls": 1, "failures": 0, "timeouts": 0, "truncated": 1}


def test_two_tools_of_the_same_name_are_refused_when_the_recipe_loads(tmp_path):
    path = calculator_recipe(tmp_path, set_in("tools", [{"name": "calculator"}, {"name": "calculator"}]))
    with pytest.raises(RecipeError) as error:
        load_recipe(path, check_trainer=False)
    assert str(error.value) == (
        f"{path}: tools[1].name: tools[0] is also called 'calculator': the model could not tell them apart."
    )


def test_an_environment_whose_constructor_refuses_its_params_fails_when_the_recipe_loads(tmp_path):
    data = yaml.safe_load((REPO / "recipes" / "guess-number.yaml").read_text())
    data["environment"]["params"] = {"low": 10, "high": 5, "max_guesses": 7}
    path = tmp_path / "game.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError) as error:
        load_recipe(path, check_trainer=False)
    assert str(error.value) == (
        f"{path}: environment.params: guess_number could not be created: ValueError: low (10) must be below high (5)"
    )


@pytest.mark.parametrize(
    "overrides, key, promised",
    [
        (["environment.params={max_guesses: 5}"], "dataset.generator.params", 7),
        (["dataset.generator.params.max_guesses=9"], "dataset.generator.params", 9),
        (["dataset.generator.train_params={max_guesses: 9}"], "dataset.generator.train_params", 9),
        (["dataset.generator.warmup_params={max_guesses: 9}", "dataset.generator.warmup_size=4", "dataset.generator.train_size=60"], "dataset.generator.warmup_params", 9),
        (["curriculum.levels=[{max_guesses: 12}, {}]", "dataset.generator.train_size=40"], "curriculum.levels.0", 12),
    ],
)  # fmt: skip
def test_the_environment_allows_the_guesses_the_questions_promise(overrides, key, promised):
    path = REPO / "recipes" / "guess-number.yaml"
    with pytest.raises(RecipeError) as error:
        load_recipe(path, overrides, check_trainer=False)
    allowed = 5 if "environment" in overrides[0] else 7
    assert str(error.value).endswith(
        f"{key}.max_guesses: the questions promise {promised} guesses, but the environment allows {allowed} "
        "(environment.params.max_guesses); give both the same value."
    )
    # Both changed together, or the range alone (the secret comes from the row): the recipe loads.
    load_recipe(
        path,
        ["environment.params={max_guesses: 9}", "dataset.generator.params.max_guesses=9"],
        check_trainer=False,
    )
    load_recipe(path, ["dataset.generator.params.high=1000"], check_trainer=False)


def test_train_stops_on_a_tool_mistake_before_loading_anything(tmp_path):
    out = tmp_path / "out"
    path = calculator_recipe(tmp_path, set_in("tools.0.name", "calculater"))
    result = run_script("train.py", "--config", str(path), f"trainer.output_dir={out}", timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert (
        len(errors) == 1
        and f"{path}" in errors[0]
        and "tools[0].name: unknown tool 'calculater'" in errors[0]
    )
    assert "Traceback" not in result.stderr and not out.exists()
