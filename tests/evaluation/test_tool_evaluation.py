"""Evaluation, comparison, run reports and the step line of tool recipes (multi-turn rollouts).

The tool figures are checked on hand-made rollouts that do call tools (the tiny random model never does),
then `make eval`'s script runs the shipped calculator recipe on the tiny model end to end.
"""

from __future__ import annotations

import json
import time

import pytest
from support import MINIMAL, REPO, run_script

from grpo_recipes.evaluation.evaluate import (
    comparison_table,
    evaluation_report,
    read_samples,
    score_samples,
    write_evaluation,
)
from grpo_recipes.evaluation.generate import Generation
from grpo_recipes.evaluation.metrics import compare, summarize
from grpo_recipes.evaluation.report import REPORT_MD, read_run, select_panels, write_report
from grpo_recipes.recipe import parse_recipe
from grpo_recipes.training.console import step_line

TOOL_KEYS = {"tool_calls", "tool_failures", "mean_tool_calls", "tool_call_rate", "tool_failure_rate"}


def calculator_recipe():
    data = {**MINIMAL, "tools": [{"name": "calculator"}]}
    return parse_recipe(data, "calculator", check_trainer=False)


def call(expression: str) -> dict:
    return {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}


def rollout(calls: list[tuple[str, str]], answer: str) -> Generation:
    """A rollout that makes `calls` ((expression, result) pairs, one turn each) and then answers."""
    from grpo_recipes.agents.rollout import transcript

    messages = []
    for expression, result in calls:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call(expression)]})
        messages.append({"role": "tool", "name": "calculator", "content": result})
    messages.append({"role": "assistant", "content": answer})
    failures = sum(result.startswith("Error:") for _, result in calls)
    return Generation(transcript(messages), 20, False, messages, len(calls), failures)


def rows(*answers: str) -> list[dict]:
    return [
        {
            "prompt": [{"role": "user", "content": f"Calculate {i}."}],
            "solution": a,
            "question": str(i),
            "answer": a,
        }
        for i, a in enumerate(answers)
    ]


def records(tool_calls: list[int], correct: list[int] | None = None) -> list[dict]:
    """samples.jsonl records, one greedy sample per problem, with these tool calls."""
    correct = correct or [0] * len(tool_calls)
    return [
        {"problem": p, "sample": 0, "gold": str(p), "correct": c, "vote": None, "answer": None, "completion": "",
         "tokens": 10, "truncated": False, "tool_calls": n, "tool_failures": 0}
        for p, (n, c) in enumerate(zip(tool_calls, correct, strict=True))
    ]  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# Scoring and summaries of hand-made rollouts.
# --------------------------------------------------------------------------------------------------------


def test_tool_rollouts_are_scored_on_their_last_turn_and_recorded_with_their_messages(tmp_path):
    recipe = calculator_recipe()
    generations = [
        [rollout([("417 * 23", "9591")], "The answer is 9591.")],  # one call, right
        [
            rollout([("1 / 0", "Error: division by zero"), ("2 + 2", "4")], "The answer is 4.")
        ],  # 2 calls, 1 failed
        [rollout([], "The answer is 7.")],  # no call, wrong
        [rollout([("5 - 3", "2")], "I do not know.")],  # one call, no answer
    ]
    samples = score_samples(recipe, rows("9591", "4", "8", "2"), generations, [0, 1, 2, 3])
    assert [r["correct"] for r in samples] == [1, 1, 0, 0]
    # The answer is read from the last assistant turn, not from the transcript's tool results.
    assert [r["answer"] for r in samples] == ["9591", "4", "7", None]
    assert [(r["tool_calls"], r["tool_failures"]) for r in samples] == [(1, 0), (2, 1), (0, 0), (1, 0)]
    assert samples[1]["messages"][1] == {
        "role": "tool",
        "name": "calculator",
        "content": "Error: division by zero",
    }
    assert samples[0]["completion"].startswith("[call] calculator(expression='417 * 23')\n[calculator] 9591")

    metrics = summarize(samples)
    assert metrics["pass@1"] == 0.5
    assert {key: metrics[key] for key in TOOL_KEYS} == {
        "tool_calls": 4,
        "tool_failures": 1,
        "mean_tool_calls": 1.0,  # 4 calls, 4 problems
        "tool_call_rate": 0.75,  # 3 of 4 problems made a call
        "tool_failure_rate": 0.25,  # 1 of 4 calls failed
    }

    out = tmp_path / "eval"
    write_evaluation(out, samples, metrics, {"model": "m", "recipe": "calculator", "sampling": "greedy"})
    lines = read_samples(out / "samples.jsonl")
    assert [line["messages"] for line in lines] == [g[0].messages for g in generations]
    assert [line["tool_calls"] for line in lines] == [1, 2, 0, 1]
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["tool_call_rate"] == 0.75 and saved["tool_failure_rate"] == 0.25
    report = (out / "report.md").read_text()
    assert "| tool calls per completion | 1.00 |" in report
    assert "| tool-call rate | 75.0 % (completions with a call) |" in report
    assert "| failed tool calls | 25.0 % (1 of 4) |" in report
    assert "- sample 0, correct, answer `4`, 2 tool calls (1 failed): [call] calculator(" in report


def test_the_environment_reward_reads_each_rollouts_environment():
    from grpo_recipes.toolset import Toolset

    data = {**MINIMAL, "environment": {"name": "guess_number", "params": {"max_guesses": 3}}}
    data["rewards"] = [{"name": "environment_reward"}]
    recipe = parse_recipe(data, "guess", check_trainer=False)
    factory = Toolset.for_recipe(recipe).environment_factory
    generations = []
    for guesses in ([50, 42], [50, 25, 12], []):
        game = factory()
        game.reset(secret=42)
        messages = []
        for number in guesses:
            result = game.guess(number=number)
            messages += [
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "guess", "arguments": {"number": number}}}]},
                {"role": "tool", "name": "guess", "content": result},
            ]  # fmt: skip
        messages.append({"role": "assistant", "content": "Done."})
        generations.append([Generation("", 9, False, messages, len(guesses), 0, environment=game)])
    problems = [{**row, "secret": 42} for row in rows("42", "42", "42")]
    samples = score_samples(recipe, problems, generations, [0, 1, 2])
    assert [r["rewards"]["environment_reward"] for r in samples] == [1.0, 0.0, 0.0]
    assert [r["correct"] for r in samples] == [1, 0, 0]
    assert "environment" not in samples[0]  # the game object is not written to samples.jsonl
    json.dumps(samples)
    metrics = summarize(samples, votes=recipe.evaluation_function.reads_answers)
    assert metrics["pass@1"] == pytest.approx(1 / 3)
    assert metrics["mean_tool_calls"] == pytest.approx(5 / 3) and metrics["tool_call_rate"] == pytest.approx(
        2 / 3
    )


def test_summaries_without_tools_are_unchanged():
    plain = [{k: v for k, v in r.items() if not k.startswith("tool_")} for r in records([1, 0], [1, 0])]
    metrics = summarize(plain)
    assert not TOOL_KEYS & set(metrics)
    assert set(metrics) == {
        "problems", "samples_per_problem", "pass@1", "maj@1", "pass@1_interval", "correct_samples",
        "mean_completion_tokens", "truncated", "well_formed",
    }  # fmt: skip
    assert [row["metric"] for row in compare(plain, plain)["metrics"]] == ["pass@1", "maj@1"]
    report = evaluation_report(plain, metrics, {})
    assert "tool" not in report
    # Rollouts that made no call at all: the figures are there, with no failure share to give.
    metrics = summarize(records([0, 0]))
    assert (
        metrics["tool_call_rate"] == 0.0
        and metrics["tool_calls"] == 0
        and metrics["tool_failure_rate"] is None
    )
    assert "| failed tool calls | no calls |" in evaluation_report(records([0, 0]), metrics, {})


def test_compare_shows_the_tool_call_rate_of_both_sides():
    base, model = records([0, 0, 1, 0], [0, 0, 1, 0]), records([1, 2, 1, 0], [1, 1, 1, 0])
    result = compare(base, model, votes=False)
    assert [row["metric"] for row in result["metrics"]] == ["pass@1", "tool-call rate"]
    row = result["metrics"][1]
    # Per problem, with a call: base 0 0 1 0, model 1 1 1 0; differences 1 1 0 0.
    assert (row["base"], row["model"], row["difference"]) == (0.25, 0.75, 0.5)
    assert row["low"] < 0.5 < row["high"]
    table = comparison_table(result)
    assert "tool-call rate" in table and "25.0%" in table and "75.0%" in table
    # One line per row, the columns aligned.
    widths = {len(line) for line in table.splitlines()[:3]}
    assert len(widths) == 1, table
    # A side evaluated without tools (an older samples file): no tool row.
    plain = [{k: v for k, v in r.items() if not k.startswith("tool_")} for r in base]
    assert [row["metric"] for row in compare(plain, model, votes=False)["metrics"]] == ["pass@1"]


# --------------------------------------------------------------------------------------------------------
# The step line and the run report.
# --------------------------------------------------------------------------------------------------------


def test_step_line_shows_tool_use_only_for_runs_with_tools():
    logs = {"reward": 0.5, "completions/mean_length": 40.0, "step_time": 12.0}
    plain = step_line(logs, 3, 40, 30.0)
    assert plain == "step 3/40  reward 0.500  mean length 40.0  12.0 s/step  (30 s)"
    tools = {
        **logs,
        "tools/call_frequency": 0.875,
        "tools/failure_frequency": 0.0,
        "tools/failures": 2.0,
        "tools/timeouts": 1.0,
        "tools/truncated": 0.0,
    }
    assert step_line(tools, 3, 40, 30.0) == (
        "step 3/40  reward 0.500  mean length 40.0  tool calls 0.88/completion (2 failed, 1 timed out)  "
        "12.0 s/step  (30 s)"
    )
    # TRL's own keys only (no guarded tools' counts): its failure share.
    trl_only = {**logs, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.25}
    assert "tool calls 1.00/completion (25 % failed)" in step_line(trl_only, 3, 40, 30.0)


def tool_history(steps: int = 20) -> list[dict]:
    return [
        {
            "step": step,
            "reward": step / steps,
            "completions/mean_length": 50.0,
            "tools/call_frequency": step / steps,
            "tools/failure_frequency": 0.0,
            "tools/failures": 2.0 if step in (3, 7) else 0.0,
            "tools/timeouts": 1.0 if step == 5 else 0.0,
            "tools/truncated": 0.0,
            "grad_norm": 0.5,
        }
        for step in range(1, steps + 1)
    ]


def test_run_report_of_a_tool_run_shows_the_tools_during_training_and_before_after(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "log_history.json").write_text(json.dumps(tool_history()))
    before, after = records([0, 0, 1, 0, 0], [0, 0, 1, 0, 0]), records([1, 1, 1, 2, 0], [1, 1, 1, 0, 0])
    after[3]["tool_failures"] = 1
    for when, samples in (("before", before), ("after", after)):
        metrics = summarize(samples)
        correct = sum(r["correct"] for r in samples)
        result = {"accuracy": correct / 5, "ci_low": 0.0, "ci_high": 1.0, "correct": correct, "total": 5}
        (run / f"eval_{when}.json").write_text(json.dumps({**result, "metrics": metrics}))
        (run / f"eval_{when}_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
        time.sleep(0.01)

    titles = [panel.title for panel in select_panels(read_run(run).log_history)]
    assert "tool calls" in titles and "tool failures" in titles
    text = write_report(run)[-1].read_text()
    section = text.split("## Tool use\n", 1)[1].split("\n## ", 1)[0]
    assert "| tool calls per completion (`tools/call_frequency`) | 0.525 | 1.000 | 20 of 20 |" in section
    assert "| failed calls (`tools/failures`) | 0.200 | 2.000 | 2 of 20 |" in section
    assert "| timed-out calls (`tools/timeouts`) | 0.050 | 1.000 | 1 of 20 |" in section
    assert "from eval_before_samples.jsonl and eval_after_samples.jsonl" in section
    assert "| before | 20.0 % | 0.20 | 0 of 1 (0.0 %) |" in section
    assert "| after | 80.0 % | 1.00 | 1 of 5 (20.0 %) |" in section
    # Paired over the 5 problems: differences 1, 1, 0, 1, 0.
    assert "Change in the tool-call rate: +60.0 points [" in section and "(paired 95 % interval)" in section
    # The first-vs-last table follows tool calls per completion too.
    assert "| `tools/call_frequency` |" in text

    # Without the samples files the saved metrics give the same figures, unpaired.
    for when in ("before", "after"):
        (run / f"eval_{when}_samples.jsonl").unlink()
    section = write_report(run)[-1].read_text().split("## Tool use\n", 1)[1]
    assert "| after | 80.0 % | 1.00 | 1 of 5 (20.0 %) |" in section
    assert "Change in the tool-call rate: +60.0 points." in section


def test_run_report_without_tools_has_no_tool_section(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    history = [{k: v for k, v in e.items() if not k.startswith("tools/")} for e in tool_history()]
    (run / "log_history.json").write_text(json.dumps(history))
    samples = [{k: v for k, v in r.items() if not k.startswith("tool_")} for r in records([0, 1])]
    (run / "eval_before.json").write_text(
        json.dumps({"accuracy": 0.0, "ci_low": 0.0, "ci_high": 1.0, "correct": 0, "total": 2})
    )
    (run / "eval_before_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    text = write_report(run)[-1].read_text()
    assert "Tool use" not in text and "tools/" not in text
    assert not {"tool calls", "tool failures"} & {panel.title for panel in select_panels(history)}
    assert (run / REPORT_MD).is_file()


# --------------------------------------------------------------------------------------------------------
# make eval RECIPE=calculator-cpu MODEL=<the tiny model>, end to end.
# --------------------------------------------------------------------------------------------------------


def test_make_eval_of_the_calculator_recipe_on_the_tiny_model(tmp_path, tiny_model):
    out = tmp_path / "eval"
    # What `make eval RECIPE=calculator-cpu MODEL=... LIMIT=3` runs, with fewer new tokens.
    result = run_script(
        "evaluate.py", "--config", str(REPO / "recipes" / "calculator-cpu.yaml"), "--model", str(tiny_model),
        "--samples", "1", "--limit", "3", "--max-new-tokens", "12", "--output-dir", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tool recipe: evaluated with transformers" in result.stdout
    assert "tool-call rate 0 %" in result.stdout and "0 of 0 calls failed" in result.stdout
    samples = read_samples(out / "samples.jsonl")
    assert [r["problem"] for r in samples] == [0, 1, 2]
    for record in samples:
        # The conversation after the prompt: the random model's one assistant turn, no call.
        assert [m["role"] for m in record["messages"]] == ["assistant"]
        assert record["completion"] == record["messages"][0]["content"]
        assert (record["tool_calls"], record["tool_failures"]) == (0, 0)
        assert set(record["rewards"]) == {"numeric_accuracy"}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["problems"] == 3 and metrics["backend"] == "transformers"
    assert (
        metrics["tool_calls"] == 0
        and metrics["tool_call_rate"] == 0.0
        and metrics["tool_failure_rate"] is None
    )
    assert metrics == {**metrics, **summarize(samples)}  # metrics.json is what samples.jsonl recomputes to
    report = (out / "report.md").read_text()
    assert "| tool-call rate | 0.0 % (completions with a call) |" in report
    assert "| failed tool calls | no calls |" in report


def test_training_before_evaluation_of_a_tool_recipe_feeds_the_run_report(tmp_path, tiny_model):
    """greedy_accuracy (training's before/after) runs rollouts, writes their messages, and the report reads them."""
    from grpo_recipes.evaluation.evaluate import eval_rows, greedy_accuracy
    from grpo_recipes.evaluation.generate import load_eval_model
    from grpo_recipes.recipe import load_recipe

    recipe = load_recipe(
        REPO / "recipes" / "calculator-cpu.yaml",
        [f"model.name_or_path={tiny_model}", "evaluation.max_new_tokens=8"],
        check_trainer=False,
    )
    tokenizer, model = load_eval_model(str(tiny_model), recipe.model)
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    result = greedy_accuracy(
        model, tokenizer, eval_rows(recipe, limit=3), recipe, log=lines.append,
        samples_path=run / "eval_before_samples.jsonl",
    )  # fmt: skip
    assert result.total == 3
    assert {key: result.metrics[key] for key in ("tool_calls", "tool_call_rate")} == {
        "tool_calls": 0,
        "tool_call_rate": 0.0,
    }
    samples = read_samples(run / "eval_before_samples.jsonl")
    assert all(r["messages"][-1]["role"] == "assistant" and r["tool_calls"] == 0 for r in samples)
    (run / "eval_before.json").write_text(json.dumps(result.to_dict()))
    text = write_report(run)[-1].read_text()
    assert "Held-out rollouts (greedy), from eval_before_samples.jsonl:" in text
    assert "| before | 0.0 % | 0.00 | 0 of 0 |" in text and "| after | - | - | - |" in text
