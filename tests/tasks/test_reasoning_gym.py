"""reasoning-gym: the generator's splits and checks, the reward's guarantees, and the audit on every task."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support import MINIMAL, REPO, alive

import rewards
from grpo_recipes.evaluation.audit import audit, format_report
from grpo_recipes.recipe import RecipeError, load_recipe, parse_recipe
from grpo_recipes.tasks.reasoning_gym import GENERATOR
from rewards import tagged_json
from rewards.reasoning_gym import WORKER

reasoning_gym = pytest.importorskip("reasoning_gym")


def recipe_for(params: dict, answer_format: str = "answer_tag", **reward_params):
    template = "<answer>{answer}</answer>" if answer_format == "answer_tag" else "\\boxed{{{answer}}}"
    data = {
        **MINIMAL,
        "dataset": {
            "generator": {"name": "reasoning_gym", "train_size": 4, "eval_size": 2, "params": params}
        },
        "prompt": {"user": "{question}", "solution_column": "answer"},
        "rewards": [{"name": "reasoning_gym", "params": {"answer_format": answer_format, **reward_params}}],
        "audit": {"completion_template": template},
    }
    return parse_recipe(data, "rg.yaml", check_trainer=False)


def score(completions: list[str], row: dict, **params) -> list[float | None]:
    reward = rewards.get_reward("reasoning_gym", **params)
    columns = {key: [value] * len(completions) for key, value in row.items() if key != "answer"}
    return reward(completions, solution=[row["answer"]] * len(completions), **columns)


# --- the generator ------------------------------------------------------------------------------------


def test_splits_are_distinct_and_held_out_on_a_small_task_space():
    # Sums and differences of two 1-digit terms: about 240 questions. Seeds alone repeat them (item i of
    # seed s is seeded s + i, and a small space repeats itself); the splits must not.
    params = {
        "task": "basic_arithmetic",
        "min_terms": 2,
        "max_terms": 2,
        "max_digits": 1,
        "operators": ["+", "-"],
        "allow_negation": False,
        "allow_parentheses": False,
    }
    shifted = reasoning_gym.create_dataset(
        "basic_arithmetic", seed=1, size=2, **{k: v for k, v in params.items() if k != "task"}
    )
    again = reasoning_gym.create_dataset(
        "basic_arithmetic", seed=0, size=2, **{k: v for k, v in params.items() if k != "task"}
    )
    assert shifted[0]["question"] == again[1]["question"]  # why different seeds are not enough
    train, held_out = GENERATOR.splits(100, 40, seed=0, **params)
    questions = [row["question"] for row in train]
    assert len(set(questions)) == len(questions) == 100
    assert not set(questions) & {row["question"] for row in held_out}
    assert (train, held_out) == GENERATOR.splits(100, 40, seed=0, **params)
    with pytest.raises(ValueError, match="got only"):
        GENERATOR.splits(400, 40, seed=0, **params)


def test_a_mix_draws_tasks_by_weight_and_keeps_what_the_reward_needs():
    rows = GENERATOR.generate(
        300, seed=1, tasks={"leg_counting": 1, "basic_arithmetic": {"weight": 3, "max_terms": 2}}
    )
    counts = {task: sum(row["task"] == task for row in rows) for task in ("leg_counting", "basic_arithmetic")}
    assert sum(counts.values()) == 300 and 50 <= counts["leg_counting"] <= 100, counts
    arithmetic = next(row for row in rows if row["task"] == "basic_arithmetic")
    assert json.loads(arithmetic["task_config"]) == {"max_terms": 2}
    assert tagged_json.decode(arithmetic["metadata"])["source_dataset"] == "basic_arithmetic"
    import datasets  # heterogeneous metadata: one string column holds it

    assert datasets.Dataset.from_list(rows).column_names == list(GENERATOR.columns)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"task": "leg_countng"},
            "dataset.generator.params.task: unknown reasoning-gym task 'leg_countng'. Did you mean 'leg_counting'?",
        ),
        (
            {"tasks": {"basic_arithmetc": 1}},
            "dataset.generator.params.tasks.basic_arithmetc: unknown reasoning-gym task 'basic_arithmetc'. Did you mean 'basic_arithmetic'?",
        ),
        (
            {"task": "leg_counting", "max_animal": 3},
            "dataset.generator.params: unknown key 'max_animal'. Allowed: min_animals, max_animals, min_instances, max_instances. Did you mean 'max_animals'?",
        ),
        (
            {"task": "leg_counting", "max_animals": "three"},
            "dataset.generator.params.max_animals: expected an integer, got 'three'.",
        ),
        (
            {"task": "leg_counting", "min_animals": 5, "max_animals": 2},
            "dataset.generator.params: reasoning-gym's leg_counting rejects these settings: max_animals must be >= min_animals.",
        ),
        (
            {"task": "leg_counting", "seed": 3},
            "dataset.generator.params.seed: set by the generator (dataset.generator.seed); remove it here.",
        ),
        (
            {"tasks": {"leg_counting": 0}},
            "dataset.generator.params.tasks.leg_counting: a weight must be > 0, got 0.0.",
        ),
        ({"task": "leg_counting", "tasks": {}}, "dataset.generator.params: give exactly one of 'task'"),
    ],
)
def test_bad_params_are_one_line_naming_the_key(params, message):
    with pytest.raises(RecipeError) as caught:
        recipe_for(params)
    assert str(caught.value).startswith(f"rg.yaml: {message}"), str(caught.value)
    assert "\n" not in str(caught.value)


# --- the reward ---------------------------------------------------------------------------------------


def row_of(task: str, **settings) -> dict:
    return GENERATOR.generate(1, seed=0, task=task, **settings)[0]


def test_reward_reads_the_answer_and_keeps_tuples_in_metadata():
    # rearc compares the parsed grid with metadata["output"], a tuple of tuples: plain JSON would lose it.
    row = row_of("rearc")
    assert score([f"<answer>{row['answer']}</answer>", f"\\boxed{{{row['answer']}}}", "no answer"], row) == [
        1.0,
        0.0,
        0.0,
    ]
    assert score([f"\\boxed{{{row['answer']}}}"], row, answer_format="boxed") == [1.0]


def test_reward_never_executes_model_output(tmp_path: Path):
    marker = tmp_path / "ran"
    # binary_matrix's scorer evals an answer that is not an exact match; simple_integration's parses it with
    # sympy's parse_expr, which evals the Python it builds with builtins such as open in reach.
    attacks = [
        f"__import__('pathlib').Path('{marker}').touch()",
        f"open('{marker}', 'w')",
        f"lambdify([], \"open('{marker}', 'w')\")()",
        "[[0]*10**9]",
    ]
    for task in ("binary_matrix", "spiral_matrix", "simple_integration", "n_queens"):
        row = row_of(task)
        assert score([f"<answer>{attack}</answer>" for attack in attacks], row) == [0.0] * len(attacks), task
    assert not marker.exists()
    # a Python list is still read as the scorer's authors meant (partial credit), without eval
    matrix = row_of("binary_matrix")
    as_list = str([[int(x) for x in line.split()] for line in matrix["answer"].splitlines()])
    assert score([f"<answer>{as_list}</answer>"], matrix) == [0.1]


def test_reward_is_bounded_in_time_and_survives_a_dead_worker():
    row = row_of("intermediate_integration")
    started = time.monotonic()
    # sympy would compute these for hours; the worker's alarm stops each at 0.9 s
    slow = ["9**9**9**9**9", "x**(10**10**10)", "factorial(10**9)"]
    scores = score(
        [f"<answer>{a}</answer>" for a in slow] + [f"<answer>{row['answer']}</answer>"],
        row,
        timeout_seconds=1.0,
    )
    assert scores == [0.0, 0.0, 0.0, 1.0]
    assert time.monotonic() - started < 15
    WORKER._worker.process.kill()  # a worker that died (or was killed for overrunning) is replaced
    assert score([f"<answer>{row['answer']}</answer>"], row) == [1.0]
    long = "1" * 20_001
    assert score([f"<answer>{long}</answer>"], row, max_answer_chars=20_000) == [0.0]


def test_reward_scores_rows_that_cannot_be_scored_as_none_and_never_raises_on_completions():
    row = row_of("leg_counting")
    assert score(["<answer>1</answer>"], {**row, "task": "no_such_task"}) == [None]
    weird = [
        None,
        "",
        "<answer>",
        "<answer></answer>",
        "\\boxed{",
        "<answer>" + "{" * 5000 + "</answer>",
        b"\xff",
    ]
    assert all(s == 0.0 for s in score(weird, row))


def test_partial_credit_can_be_turned_off():
    row = row_of("leg_counting")
    answer = f"<answer>{row['answer']} legs</answer>"
    assert 0 < score([answer], row)[0] < 1
    assert score([answer], row, partial_credit=False) == [0.0]


# --- the audit over every task ------------------------------------------------------------------------

#: Tasks whose audit does not pass, and why; every other task passes (tests/tasks/test_reasoning_gym.py checks both).
#: No gold answer: the task accepts any valid solution (a colouring, a move sequence), so there is no answer
#: to write into an ideal completion.
NO_GOLD = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}
#: The scorer gives a right score to a wrong answer (another row's answer).
SCORER_ACCEPTS_WRONG = {
    "game_of_life_halting": "scores bool(answer) == bool(gold): every non-empty answer, 'False' too, gets 1",
    "puzzle24": "checks four numbers in range and the value 24, not that they are the question's numbers",
}
#: The scorer gives a wrong answer partial credit (0.01 for a well-formed one, a share of the right cells or
#: characters, closeness of a number): a corrupted completion scores above 0 with the default
#: `partial_credit: true`, and 0 with `partial_credit: false`, where these tasks pass.
PARTIAL_CREDIT = {
    "advanced_geometry",
    "arc_agi",
    "codeio",
    "color_cube_rotation",
    "complex_arithmetic",
    "countdown",
    "course_schedule",
    "emoji_mystery",
    "fraction_simplification",
    "game_of_life",
    "group_anagrams",
    "gsm_symbolic",
    "jugs",
    "mini_sudoku",
    "palindrome_generation",
    "polynomial_equations",
    "power_function",
    "prime_factorization",
    "rearc",
    "rectangle_count",
    "sentence_reordering",
    "spell_backward",
    "sudoku",
    "syllogism",
    "time_intervals",
    "tsumego",
}


def audit_task(task: str, rows_per_task: int = 3, answer_format: str = "answer_tag") -> tuple[str, str]:
    """("pass" or the failure kind, detail) of the audit of a few rows of `task`."""
    recipe = recipe_for({"task": task}, answer_format)
    rows = GENERATOR.generate(rows_per_task, seed=0, task=task)
    report = audit(recipe, rows)
    label = report.evaluation
    if report.no_gold_answer:
        return "no gold", f"{report.no_gold_answer}/{report.rows} rows have no gold answer"
    if report.unscorable:
        return "unscorable", "the reward returned None"
    if report.ideal_full_marks < report.rows:
        bad = next(r for r in report.failures if not r.ideal_ok)
        return "ideal", f"gold {bad.answer!r} scored {bad.ideal[label]}"
    if report.corrupted_zero < report.rows:
        bad = next(r for r in report.failures if not r.corrupted_ok)
        kind = "accepts wrong" if bad.corrupted[label] >= 1.0 else "partial"
        return kind, f"wrong answer {bad.wrong!r} for gold {bad.answer!r} scored {bad.corrupted[label]:.3g}"
    return "pass", ""


def all_tasks() -> list[str]:
    return sorted(name for name in reasoning_gym.factory.DATASETS if name != "composite")


def test_audit_of_every_task_passes_except_the_recorded_ones():
    """A few rows of every task through the reward audit, `<answer>` format: ideal completions get 1,
    corrupted ones 0, except the tasks recorded above, each for its recorded reason."""
    verdicts = {task: audit_task(task) for task in all_tasks()}
    expected = {task: "pass" for task in all_tasks()}
    expected |= {task: "no gold" for task in NO_GOLD} | {task: "partial" for task in PARTIAL_CREDIT}
    expected |= {task: "accepts wrong" for task in SCORER_ACCEPTS_WRONG}
    wrong = {task: verdicts[task] for task in verdicts if verdicts[task][0] != expected[task]}
    assert not wrong, wrong
    assert sum(kind == "pass" for kind, _ in verdicts.values()) == len(all_tasks()) - 33


@pytest.mark.parametrize("name", ["reasoning-gym", "basic-arithmetic-cpu"])
def test_shipped_recipes_pass_the_audit_on_their_generated_rows(name):
    recipe = load_recipe(REPO / "recipes" / f"{name}.yaml", check_trainer=False)
    generator = recipe.dataset.generator
    rows = GENERATOR.generate(40, seed=generator.seed, **generator.params)
    report = audit(recipe, rows)
    assert report.ideal_full_marks == report.corrupted_zero == report.rows == 40, format_report(report)


def test_without_reasoning_gym_the_reward_is_a_setup_error_not_a_zero(tmp_path, monkeypatch):
    import rewards.reasoning_gym as module

    broken = tmp_path / "worker.py"
    broken.write_text('print(\'{"error": "cannot import reasoning_gym: No module named reasoning_gym"}\')\n')
    WORKER.shutdown()
    monkeypatch.setattr(module, "WORKER_SCRIPT", broken)
    with pytest.raises(rewards.RewardSetupError, match="No module named reasoning_gym"):
        score(["<answer>1</answer>"], row_of("leg_counting"))
    monkeypatch.undo()
    WORKER.shutdown()
    assert score(["<answer>1</answer>"], row_of("leg_counting")) == [0.0]


def test_the_worker_is_stopped_at_exit_not_left_running():
    """An interpreter that scored with the reward stops its worker at exit: no process is left, and no
    "subprocess is still running" warning comes from a worker left to the garbage collector."""
    row = row_of("leg_counting")
    program = textwrap.dedent(
        f"""
        import rewards
        from rewards.reasoning_gym import WORKER
        row = {row!r}
        columns = {{key: [value] for key, value in row.items() if key != "answer"}}
        print(rewards.get_reward("reasoning_gym")([f"<answer>{{row['answer']}}</answer>"], solution=[row["answer"]], **columns))
        print(WORKER._worker.process.pid)
        """
    )
    out = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    scores, pid = out.stdout.split("\n")[:2]
    assert scores == "[1.0]"
    assert "ResourceWarning" not in out.stderr, out.stderr[-3000:]
    deadline = time.monotonic() + 5
    while alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(int(pid)), f"worker {pid} outlived the interpreter"
