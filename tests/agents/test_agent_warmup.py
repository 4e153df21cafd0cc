"""The supervised warm-up's data: demonstrations built from a recipe's rows (calls made for real), tokenized with
the loss on the assistant's turns only."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from support import REPO, write_recipe
from transformers.utils import get_json_schema

from grpo_recipes.agents import get_tool
from grpo_recipes.agents.demonstrations import demonstration
from grpo_recipes.data import build_prompt, generated_rows, generated_splits
from grpo_recipes.recipe import RecipeError, load_recipe
from grpo_recipes.toolset import Toolset
from grpo_recipes.training.warmup import IGNORE, demonstrations, tokenize_demonstration

CALCULATOR = REPO / "recipes" / "calculator-cpu.yaml"
RESULT = "RESULT-7788-FROM-THE-TOOL"


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"{RESULT} for {key}"


def spans(ids: list[int], labels: list[int]) -> list[list[int]]:
    """The runs of labelled (trained) tokens."""
    runs, current = [], []
    for token, label in zip(ids, labels, strict=True):
        if label == IGNORE:
            if current:
                runs.append(current)
            current = []
        else:
            assert label == token
            current.append(token)
    return runs + ([current] if current else [])


def render(tokenizer, messages, tools) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)


def test_the_loss_is_on_the_calls_and_the_answer_never_on_the_prompt_or_the_results(qwen_tokenizer):
    row = {
        "prompt": [
            {"role": "system", "content": "Look things up."},
            {"role": "user", "content": "What is alpha?"},
        ],
        "key": "alpha",
        "answer": "first",
    }
    demo = demonstration(row, [("lookup", {"key": "{key}"})], "It is {answer}.", {"lookup": lookup})
    schemas = [get_json_schema(lookup)]
    ids, labels = tokenize_demonstration(qwen_tokenizer, demo, schemas)

    assert len(ids) == len(labels)
    # Every token of the conversation is there once, in order.
    assert qwen_tokenizer.decode(ids) == render(qwen_tokenizer, demo["prompt"] + demo["completion"], schemas)
    call, answer = (qwen_tokenizer.decode(run) for run in spans(ids, labels))
    assert call == '<tool_call>\n{"name": "lookup", "arguments": {"key": "alpha"}}\n</tool_call><|im_end|>\n'
    assert answer == "It is first.<|im_end|>\n"
    ignored = qwen_tokenizer.decode([t for t, label in zip(ids, labels, strict=True) if label == IGNORE])
    assert f"<tool_response>\n{RESULT} for alpha\n</tool_response>" in ignored
    assert "What is alpha?" in ignored and "Look things up." in ignored
    assert ignored.endswith("<|im_start|>assistant\n")  # the header before the answer is not trained either


def test_parallel_calls_are_one_trained_turn_and_their_results_one_ignored_block(qwen_tokenizer):
    row = {
        "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Both?"}],
        "a": "x",
        "b": "y",
    }
    calls = [("lookup", {"key": "{a}"}), ("lookup", {"key": "{b}"})]
    demo = demonstration(row, calls, "Done.", {"lookup": lookup})
    assert [m["role"] for m in demo["completion"]] == ["assistant", "tool", "tool", "assistant"]
    ids, labels = tokenize_demonstration(qwen_tokenizer, demo, [get_json_schema(lookup)])
    trained = [qwen_tokenizer.decode(run) for run in spans(ids, labels)]
    assert len(trained) == 2 and trained[0].count("<tool_call>") == 2 and trained[1] == "Done.<|im_end|>\n"
    assert not any(RESULT in text or "tool_response" in text for text in trained)
    assert qwen_tokenizer.decode(ids).count(RESULT) == 2


def test_a_template_that_rewrites_earlier_turns_is_refused(qwen_tokenizer):
    """Qwen3-style templates drop earlier reasoning from the history: a turn would not be a prefix of the next."""
    import copy

    tokenizer = copy.deepcopy(qwen_tokenizer)
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n{{ m.content | length }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    demo = {
        "prompt": [{"role": "user", "content": "Hi"}],
        "completion": [{"role": "assistant", "content": "Hello"}, {"role": "tool", "content": "x"}],
    }
    with pytest.raises(ValueError, match="does not render a conversation as a prefix of its continuation"):
        tokenize_demonstration(tokenizer, demo, None)


@pytest.fixture(scope="module")
def calculator_rows():
    recipe = load_recipe(CALCULATOR, check_trainer=False)
    train, _ = generated_rows(recipe.dataset)
    rows = [
        {**row, "prompt": build_prompt(row, recipe.prompt), "solution": row["answer"]} for row in train[:40]
    ]
    return recipe, rows


def test_demonstrations_from_the_calculator_recipe_are_right(calculator_rows):
    recipe, rows = calculator_rows
    toolset = Toolset.for_recipe(recipe)
    demos = demonstrations(replace(recipe, warmup=replace(recipe.warmup, examples=50)), rows, toolset)
    # Only the rows the recipe's warmup.where picks (problems asked in symbols), cycled to make 50.
    chosen = [row for row in rows if row["phrasing"] == "symbols"]
    assert 0 < len(chosen) < len(rows) and recipe.warmup.where == {"phrasing": "symbols"}
    assert len(demos) == 50
    assert demos[len(chosen)] == demos[0] and demos[len(chosen) + 1] == demos[1]
    for demo, row in zip(demos, chosen, strict=False):
        assert demo["prompt"] == row["prompt"]
        call, result, answer = demo["completion"]
        assert call["tool_calls"] == [
            {
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": row["question"]}},
            }
        ]
        # The calculator, called for real on the question, agrees with the generator's answer.
        assert result == {"role": "tool", "name": "calculator", "content": row["answer"]}
        assert answer == {"role": "assistant", "content": f"The answer is {row['answer']}."}
    assert toolset.stats.as_dict() == {"calls": 50, "failures": 0, "timeouts": 0, "truncated": 0}


def test_the_calculator_demonstrations_tokenize_with_the_recipes_template(calculator_rows, qwen_tokenizer):
    recipe, rows = calculator_rows
    toolset = Toolset.for_recipe(recipe)
    demo = demonstrations(replace(recipe, warmup=replace(recipe.warmup, examples=1)), rows, toolset)[0]
    ids, labels = tokenize_demonstration(qwen_tokenizer, demo, [get_json_schema(t) for t in toolset.tools])
    call, answer = (qwen_tokenizer.decode(run) for run in spans(ids, labels))
    first = next(row for row in rows if row["phrasing"] == "symbols")  # the first row warmup.where picks
    assert f'"arguments": {{"expression": "{first["question"]}"}}' in call
    assert answer == f"The answer is {first['answer']}.<|im_end|>\n"
    assert sum(label != IGNORE for label in labels) < len(ids) // 3  # the prompt (with the schema) dominates


@pytest.mark.parametrize(
    "change, missing",
    [
        ({"answer": "The answer is {result}."}, "'result'"),
        ({"calls": [{"tool": "calculator", "arguments": {"expression": "{expr}"}}]}, "'expr'"),
    ],
)
def test_a_template_naming_a_missing_column_is_a_recipe_error(calculator_rows, tmp_path, change, missing):
    _, rows = calculator_rows
    data = yaml.safe_load(CALCULATOR.read_text())
    data["warmup"].update(change)
    path = write_recipe(tmp_path / "calc.yaml", data)
    recipe = load_recipe(path, check_trainer=False)
    with pytest.raises(RecipeError) as caught:
        demonstrations(recipe, rows, Toolset.for_recipe(recipe))
    message = str(caught.value)
    assert message.startswith(
        f"{path}: warmup: cannot fill a demonstration from the row: KeyError: {missing}"
    )
    assert "\n" not in message


def test_a_failing_call_is_demonstrated_with_its_error_text():
    row = {"prompt": [{"role": "user", "content": "?"}], "question": "1 / 0"}
    demo = demonstration(
        row,
        [("calculator", {"expression": "{question}"})],
        "No answer.",
        {"calculator": get_tool("calculator")},
    )
    assert demo["completion"][1]["content"] == "Error: division by zero"


DEFAULT = REPO / "recipes" / "default.yaml"


def test_the_default_recipes_warm_up_is_the_answer_alone_and_earns_its_own_reward(smollm2_tokenizer):
    """Every demonstration of the default recipe is right by the recipe's own reward, and the negative ones
    show the minus sign the base model never writes."""
    from grpo_recipes.reward_stack import RewardStack

    recipe = load_recipe(DEFAULT, check_trainer=False)
    assert recipe.warmup is not None and recipe.warmup.calls == [] and not recipe.uses_tools
    shown = generated_splits(recipe.dataset).warmup  # the rows apart for it, never GRPO's
    rows = [{**row, "prompt": build_prompt(row, recipe.prompt), "solution": row["answer"]} for row in shown]
    demos = demonstrations(recipe, rows, Toolset.for_recipe(recipe))
    assert len(demos) == recipe.warmup.examples == len(rows)  # each row once
    answers = [demo["completion"] for demo in demos]
    assert all(len(turns) == 1 and turns[0]["role"] == "assistant" for turns in answers)
    texts = [turns[0]["content"] for turns in answers]
    assert texts == [row["worked"] for row in rows]
    for text, row in zip(texts, rows, strict=True):
        a, op, b = row["question"].split(" ")
        if op == "-" and int(a) < int(b):  # the opposite of a difference the model can do
            assert text == f"{a} - {b} = -({b} - {a}) = {row['answer']}"
        else:
            assert text == f"{row['question']} = {row['answer']}"
    assert sum(row["answer"].startswith("-") for row in rows) >= 10
    reward = RewardStack.for_recipe(recipe).functions[0]
    scores = reward(
        prompts=[row["prompt"] for row in rows],
        completions=[[{"role": "assistant", "content": text}] for text in texts],
        solution=[row["solution"] for row in rows],
    )
    assert scores == [1.0] * len(rows)

    # Without tools the demonstration renders with no tool prompt, and only the answer is trained.
    ids, labels = tokenize_demonstration(smollm2_tokenizer, demos[0], None)
    (trained,) = (smollm2_tokenizer.decode(run) for run in spans(ids, labels))
    assert trained == f"{texts[0]}<|im_end|>\n"
    assert smollm2_tokenizer.decode(ids) == render(smollm2_tokenizer, demos[0]["prompt"] + answers[0], None)
