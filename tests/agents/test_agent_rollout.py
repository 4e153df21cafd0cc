"""The evaluation's multi-turn loop, driven by a scripted model: it writes pre-written turns (real SmolLM2 token ids
under TRL's Qwen2.5 template) and sees every context the loop gives it."""

from __future__ import annotations

import copy

import pytest
import user_tools

from grpo_recipes.agents import ToolStats, get_tool
from grpo_recipes.agents.environments import GuessNumber, guarded_factory
from grpo_recipes.agents.rollout import run_rollouts, transcript
from rewards.environment import EnvironmentReward

END = "<|im_end|>"


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class Script:
    """A model that writes, for each conversation (told apart by a marker in its prompt), its turns in order."""

    def __init__(self, tokenizer, turns: dict[str, list[str]]):
        self.tokenizer = tokenizer
        self.turns = {marker: list(texts) for marker, texts in turns.items()}
        self.calls: list[tuple[list[list[int]], int]] = []  # (contexts, max_new_tokens) of each generate call

    def __call__(self, contexts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        self.calls.append(([list(c) for c in contexts], max_new_tokens))
        out = []
        for context in contexts:
            text = self.tokenizer.decode(context)
            (marker,) = [m for m in self.turns if m in text]
            out.append(self.ids(self.turns[marker].pop(0)))
        return out

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def contexts(self, marker: str) -> list[str]:
        """The decoded contexts the conversation with `marker` was generated from, in order."""
        return [
            self.tokenizer.decode(c)
            for contexts, _ in self.calls
            for c in contexts
            if marker in self.tokenizer.decode(c)
        ]


def prompt(marker: str, question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Use the tools. End with 'The answer is N.'"},
        {"role": "user", "content": f"{marker} {question}"},
    ]


@pytest.fixture
def calculator():
    stats = ToolStats()
    return get_tool("calculator", stats=stats), stats


def test_a_call_its_result_and_the_answer(qwen_tokenizer, calculator):
    tool, stats = calculator
    script = Script(
        qwen_tokenizer,
        {"[A]": [call("calculator", expression="417 * 23") + END, "The answer is 9591." + END]},
    )
    prompts = [prompt("[A]", "What is 417 * 23?")]
    original = copy.deepcopy(prompts)
    (rollout,) = run_rollouts(
        prompts, [{}], qwen_tokenizer, script, tools=[tool], max_iterations=2, max_tokens=256
    )

    assert rollout.messages == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "417 * 23"}},
                }
            ],
        },
        {"role": "tool", "name": "calculator", "content": "9591"},
        {"role": "assistant", "content": "The answer is 9591."},
    ]
    assert (rollout.tool_calls, rollout.tool_failures, rollout.truncated) == (1, 0, False)
    assert rollout.final_text == "The answer is 9591."
    assert stats.as_dict() == {"calls": 1, "failures": 0, "timeouts": 0, "truncated": 0}
    assert prompts == original  # the caller's prompts are left as they were

    first, second = script.contexts("[A]")
    assert '"name": "calculator"' in first and first.endswith(
        "[A] What is 417 * 23?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert second.startswith(first)  # the conversation grows; the prompt is never re-rendered differently
    assert second.endswith("<tool_response>\n9591\n</tool_response><|im_end|>\n<|im_start|>assistant\n")

    # The budget: what the completion has used so far (tool results included) counts against max_tokens.
    (first_ids, first_max), (second_ids, second_max) = [(c[0], m) for c, m in script.calls]
    assert first_max == 256 and second_max == 256 - (len(second_ids) - len(first_ids))
    assert rollout.tokens == len(second_ids) - len(first_ids) + len(script.ids("The answer is 9591." + END))
    assert (
        transcript(rollout.messages)
        == "[call] calculator(expression='417 * 23')\n[calculator] 9591\nThe answer is 9591."
    )


def test_conversations_are_batched_turn_by_turn(qwen_tokenizer, calculator):
    tool, _ = calculator
    script = Script(
        qwen_tokenizer,
        {
            "[A]": ["The answer is 4." + END],
            "[B]": [
                call("calculator", expression="12 * 12") + END,
                call("calculator", expression="144 - 4") + END,
                "The answer is 140." + END,
            ],
            "[C]": [call("calculator", expression="1 + 1") + END, "The answer is 2." + END],
        },
    )
    prompts = [
        prompt("[A]", "What is 2 + 2?"),
        prompt("[B]", "What is 12 * 12 - 4?"),
        prompt("[C]", "What is 1 + 1?"),
    ]
    a, b, c = run_rollouts(prompts, [{}, {}, {}], qwen_tokenizer, script, tools=[tool], max_iterations=4)
    assert [len(contexts) for contexts, _ in script.calls] == [3, 2, 1]
    assert (a.final_text, b.final_text, c.final_text) == (
        "The answer is 4.",
        "The answer is 140.",
        "The answer is 2.",
    )
    assert [m["role"] for m in b.messages] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["content"] for m in b.messages if m["role"] == "tool"] == ["144", "140"]
    assert (a.tool_calls, b.tool_calls, c.tool_calls) == (0, 2, 1)
    assert all(script.turns[marker] == [] for marker in script.turns)


def test_failed_calls_are_answered_with_errors_and_counted(qwen_tokenizer, calculator):
    tool, stats = calculator
    turn = (
        call("weather", city="Paris")
        + "\n"
        + call("calculator", expr="1 + 1")
        + "\n"
        + call("calculator", expression="1 / 0")
        + "\n"
        + call("calculator", expression="6 * 7")
        + '\n<tool_call>\n{"name": "calculator", "arguments": "6 * 7"}\n</tool_call>'
        + END
    )
    script = Script(qwen_tokenizer, {"[A]": [turn, "The answer is 42." + END]})
    (rollout,) = run_rollouts(
        [prompt("[A]", "What is 6 * 7?")], [{}], qwen_tokenizer, script, tools=[tool], max_tokens=1024
    )
    results = [m for m in rollout.messages if m["role"] == "tool"]
    assert [m["name"] for m in results] == ["weather", "calculator", "calculator", "calculator", "calculator"]
    assert results[0]["content"] == "Error: there is no tool named 'weather' (tools: calculator)"
    assert (
        results[1]["content"]
        == "Error: bad arguments for calculator: missing a required argument: 'expression'"
    )
    assert results[2]["content"] == "Error: division by zero"
    assert results[3]["content"] == "42"
    assert results[4]["content"] == "Error: the arguments must be a JSON object"
    assert (rollout.tool_calls, rollout.tool_failures) == (5, 4)
    # The unknown tool and the call without an arguments object never reached a tool.
    assert stats.as_dict() == {"calls": 3, "failures": 2, "timeouts": 0, "truncated": 0}
    assert rollout.final_text == "The answer is 42." and not rollout.truncated
    assert "[weather] Error: there is no tool named 'weather'" in transcript(rollout.messages)


def test_a_malformed_call_is_text_and_ends_the_rollout(qwen_tokenizer, calculator):
    tool, stats = calculator
    script = Script(
        qwen_tokenizer, {"[A]": ['<tool_call>\n{"name": "calculator", "arguments": {\n</tool_call>' + END]}
    )
    (rollout,) = run_rollouts([prompt("[A]", "What is 1 + 1?")], [{}], qwen_tokenizer, script, tools=[tool])
    assert len(script.calls) == 1 and rollout.tool_calls == 0 and stats.as_dict()["calls"] == 0
    assert [m["role"] for m in rollout.messages] == ["assistant"] and not rollout.messages[0].get(
        "tool_calls"
    )


@pytest.mark.parametrize("max_iterations", [0, 1, 3])
def test_at_most_max_iterations_rounds_of_calls(qwen_tokenizer, calculator, max_iterations):
    tool, stats = calculator
    always = [call("calculator", expression=f"{i} + 1") + END for i in range(10)]
    script = Script(qwen_tokenizer, {"[A]": always})
    (rollout,) = run_rollouts(
        [prompt("[A]", "Count.")],
        [{}],
        qwen_tokenizer,
        script,
        tools=[tool],
        max_iterations=max_iterations,
        max_tokens=4096,
    )
    assert len(script.calls) == max_iterations + 1
    assert rollout.tool_calls == stats.as_dict()["calls"] == max_iterations
    assert [m["role"] for m in rollout.messages] == ["assistant", "tool"] * max_iterations + ["assistant"]
    assert rollout.messages[-1]["tool_calls"] and not rollout.truncated  # the last round's call is not made


def test_an_unfinished_turn_is_cut_at_the_budget_and_marked_truncated(qwen_tokenizer):
    words = " ".join(f"word{i}" for i in range(100))  # no end of turn: the model would go on
    script = Script(qwen_tokenizer, {"[A]": [words]})
    (rollout,) = run_rollouts([prompt("[A]", "Talk.")], [{}], qwen_tokenizer, script, max_tokens=20)
    assert script.calls[0][1] == 20
    assert rollout.truncated and rollout.tokens == 20
    assert rollout.final_text == qwen_tokenizer.decode(script.ids(words)[:20])


def test_a_turn_that_ends_exactly_at_the_budget_is_not_truncated(qwen_tokenizer):
    answer = "The answer is 4." + END
    script = Script(qwen_tokenizer, {"[A]": [answer]})
    budget = len(script.ids(answer))
    (rollout,) = run_rollouts(
        [prompt("[A]", "What is 2 + 2?")], [{}], qwen_tokenizer, script, max_tokens=budget
    )
    assert not rollout.truncated and rollout.final_text == "The answer is 4." and rollout.tokens == budget


def test_tool_results_use_up_the_budget_and_stop_the_rollout(qwen_tokenizer, calculator):
    tool, _ = calculator
    turn = call("calculator", expression="417 * 23") + END
    probe = Script(qwen_tokenizer, {"[A]": [turn, "The answer is 9591." + END]})
    run_rollouts([prompt("[A]", "What is 417 * 23?")], [{}], qwen_tokenizer, probe, tools=[tool])
    used = len(probe.calls[1][0][0]) - len(probe.calls[0][0][0])  # the call and its rendered result

    script = Script(qwen_tokenizer, {"[A]": [turn, "The answer is 9591." + END]})
    (rollout,) = run_rollouts(
        [prompt("[A]", "What is 417 * 23?")], [{}], qwen_tokenizer, script, tools=[tool], max_tokens=used
    )
    assert len(script.calls) == 1 and rollout.truncated  # no room left for an answer: not generated
    assert [m["role"] for m in rollout.messages] == ["assistant", "tool"] and rollout.tool_calls == 1

    script = Script(qwen_tokenizer, {"[A]": [turn, "The answer is 9591." + END]})
    (rollout,) = run_rollouts(
        [prompt("[A]", "What is 417 * 23?")], [{}], qwen_tokenizer, script, tools=[tool], max_tokens=used + 3
    )
    assert script.calls[1][1] == 3 and rollout.truncated and rollout.tokens == used + 3


def test_an_environment_is_reset_with_its_row_and_gives_the_reward(qwen_tokenizer):
    stats = ToolStats()
    factory = guarded_factory(GuessNumber, {"max_guesses": 3}, stats=stats)
    script = Script(
        qwen_tokenizer,
        {
            "[A]": [call("guess", number=50) + END, call("guess", number=42) + END, "Found it: 42." + END],
            "[B]": [call("guess", number=50) + END, call("guess", number=25) + END, "I give up." + END],
        },
    )
    prompts = [prompt("[A]", "Guess my number."), prompt("[B]", "Guess my number.")]
    rows = [{"secret": 42, "prompt": prompts[0]}, {"secret": 7, "prompt": prompts[1]}]
    a, b = run_rollouts(prompts, rows, qwen_tokenizer, script, environment_factory=factory, max_iterations=4)
    assert [m["content"] for m in a.messages if m["role"] == "tool"] == ["lower", "correct: the number is 42"]
    assert [m["content"] for m in b.messages if m["role"] == "tool"] == ["lower", "lower"]
    assert '"name": "guess"' in script.contexts("[A]")[0]  # the environment's tool is described in the prompt
    assert a.environment is not b.environment and a.environment.inner.secret == 42
    assert EnvironmentReward()(["", ""], environments=[a.environment, b.environment]) == [1.0, 0.0]
    assert stats.as_dict()["calls"] == 4


def test_an_environments_observation_is_added_to_the_prompt_and_tools_combine(qwen_tokenizer, calculator):
    tool, _ = calculator
    factory = guarded_factory(user_tools.Walk, {})
    script = Script(
        qwen_tokenizer,
        {
            "[A]": [
                call("move", direction="right", steps=2)
                + "\n"
                + call("calculator", expression="5 + 2")
                + END,
                "At 7." + END,
            ]
        },
    )
    (rollout,) = run_rollouts(
        [prompt("[A]", "Walk right twice.")],
        [{"start": 5}],
        qwen_tokenizer,
        script,
        tools=[tool],
        environment_factory=factory,
    )
    first = script.contexts("[A]")[0]
    assert "[A] Walk right twice. You stand at 5.<|im_end|>" in first
    assert '"name": "move"' in first and '"name": "calculator"' in first
    assert [m["content"] for m in rollout.messages if m["role"] == "tool"] == ["at 7", "7"]
    assert EnvironmentReward()([""], environments=[rollout.environment]) == [7.0]
