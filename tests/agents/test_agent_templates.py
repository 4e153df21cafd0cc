"""Chat templates of tool recipes: SmolLM2's own is refused, TRL's Qwen2.5 template parses its tool calls."""

from __future__ import annotations

import copy

import pytest
from trl.chat_template_utils import parse_response

from grpo_recipes.agents import get_tool
from grpo_recipes.agents.templates import (
    apply_chat_template_choice,
    parses_tool_calls,
    shipped_templates,
    template_problem,
    template_text,
    tool_templates,
    trl_templates_dir,
)

CALL = '<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{}"}}}}\n</tool_call>'


def test_smollm2s_own_template_is_refused_with_the_fix(smollm2_tokenizer):
    problem = template_problem(None, smollm2_tokenizer)
    assert problem is not None and "model.chat_template" in problem and "qwen2_5" in problem
    assert not parses_tool_calls(smollm2_tokenizer.chat_template)
    assert template_problem(None) is None  # without the tokenizer it cannot be told yet


def test_the_qwen2_5_template_passes(qwen_tokenizer):
    assert template_problem(None, qwen_tokenizer) is None
    assert template_problem("qwen2_5") is None
    assert qwen_tokenizer.chat_template == template_text("qwen2_5")


def prompt_ids(tokenizer, tools):
    messages = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is 2 + 3?"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_single_tool_call_in_the_qwen_format_is_parsed(qwen_tokenizer):
    tools = [get_tool("calculator")]
    prefix = prompt_ids(qwen_tokenizer, tools)
    ids = qwen_tokenizer(CALL.format("2 + 3") + "<|im_end|>", add_special_tokens=False)["input_ids"]
    message = parse_response(qwen_tokenizer, ids, prefix=prefix, tools=tools)
    assert message["tool_calls"] == [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2 + 3"}}}
    ]
    assert message["content"] == ""


def test_parallel_tool_calls_and_text_around_them_are_parsed(qwen_tokenizer):
    tools = [get_tool("calculator")]
    prefix = prompt_ids(qwen_tokenizer, tools)
    text = "Let me compute both.\n" + CALL.format("2 + 3") + "\n" + CALL.format("4 * 5") + "<|im_end|>"
    message = parse_response(
        qwen_tokenizer,
        qwen_tokenizer(text, add_special_tokens=False)["input_ids"],
        prefix=prefix,
        tools=tools,
    )
    assert [call["function"]["arguments"]["expression"] for call in message["tool_calls"]] == [
        "2 + 3",
        "4 * 5",
    ]
    assert message["content"].strip() == "Let me compute both."


def test_a_plain_answer_has_no_tool_calls(qwen_tokenizer):
    tools = [get_tool("calculator")]
    ids = qwen_tokenizer("The answer is 5.<|im_end|>", add_special_tokens=False)["input_ids"]
    message = parse_response(qwen_tokenizer, ids, prefix=prompt_ids(qwen_tokenizer, tools), tools=tools)
    assert message["content"] == "The answer is 5." and not message.get("tool_calls")


def test_the_tools_schema_is_in_the_rendered_prompt(qwen_tokenizer):
    text = qwen_tokenizer.decode(prompt_ids(qwen_tokenizer, [get_tool("calculator")]))
    assert '"name": "calculator"' in text and "<tool_call>" in text
    assert text.startswith("<|im_start|>system\nUse the tools.") and "Alibaba" not in text


def test_choosing_a_template_sets_the_response_parser_only_where_trl_has_one(smollm2_tokenizer):
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    apply_chat_template_choice(tokenizer, "phi3")
    assert tokenizer.chat_template == template_text("phi3")
    assert getattr(tokenizer, "response_template", None) is None
    apply_chat_template_choice(tokenizer, "qwen2_5")
    assert tokenizer.response_template is not None
    assert tokenizer.parse_response(CALL.format("1 + 1") + "<|im_end|>", prefix="")["tool_calls"]


def test_tool_templates_are_those_trl_parses():
    names = tool_templates()
    assert {"qwen2_5", "qwen3", "llama3_1"} <= set(names)
    assert "phi3" not in names and "gemma" not in names and "llama3" not in names
    assert set(names) < set(shipped_templates())
    assert not any(name.endswith("_training") for name in shipped_templates())


@pytest.mark.parametrize("name", ["phi3", "gemma", "llama3"])
def test_a_template_trl_cannot_parse_calls_with_is_refused_naming_the_choices(name):
    problem = template_problem(name)
    assert problem.startswith(f"TRL cannot parse tool calls written with '{name}'; choose one of ")
    assert "qwen2_5" in problem


def test_an_unknown_template_lists_what_trl_ships():
    with pytest.raises(ValueError) as caught:
        template_text("qwen9")
    message = str(caught.value)
    assert message.startswith("unknown chat template 'qwen9'. TRL ships: ")
    assert "qwen2_5" in message and "phi3" in message and ".jinja" in message
    assert template_problem("qwen9") == message


def test_a_jinja_file_is_read_and_checked(tmp_path):
    good = tmp_path / "chatml-tools.jinja"
    good.write_text((trl_templates_dir() / "qwen2_5.jinja").read_text())
    bad = tmp_path / "phi.jinja"
    bad.write_text((trl_templates_dir() / "phi3.jinja").read_text())
    assert template_problem(str(good)) is None
    assert template_problem(str(bad)).startswith(f"TRL cannot parse tool calls written with '{bad}'")
    assert (
        template_problem(str(tmp_path / "missing.jinja"))
        == f"no such template file: {tmp_path / 'missing.jinja'}"
    )


def test_no_template_named_keeps_the_tokenizers_own(smollm2_tokenizer):
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    own = tokenizer.chat_template
    assert apply_chat_template_choice(tokenizer, None) is tokenizer
    assert tokenizer.chat_template == own and getattr(tokenizer, "response_template", None) is None
