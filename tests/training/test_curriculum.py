"""The difficulty curriculum: the controller on hand-made pass rates, the recipe section's checks, the level pools
of the generators, and real runs (one process, a resumed run, two processes)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import MINIMAL, REPO, tiny_recipe, two_process_launcher, write_recipe

from grpo_recipes.data import generated_rows, load_splits
from grpo_recipes.recipe import RecipeError, load_recipe, parse_recipe
from grpo_recipes.tasks.countdown import problem_key
from grpo_recipes.training.curriculum import CurriculumController, group_pass_rates

PROBE = Path(__file__).with_name("curriculum_probe.py")

# --- the controller ----------------------------------------------------------------------------------------


def test_rises_while_most_groups_are_all_right_and_clamps_at_the_top():
    controller = CurriculumController(levels=3, start=0, window=4)
    moves = [controller.observe([1.0, 1.0, 0.5, 0.25]) for _ in range(4)]
    assert moves == [1, 1, 0, 0] and controller.level == 2 and controller.moves == 2


def test_falls_while_most_groups_are_all_wrong_and_clamps_at_the_bottom():
    controller = CurriculumController(levels=3, start=2, window=2)
    moves = [controller.observe([0.0, 0.0]) for _ in range(3)]
    assert moves == [-1, -1, 0] and controller.level == 0


def test_stays_while_groups_are_informative_and_raising_wins_a_tie():
    controller = CurriculumController(levels=3, start=1, window=4)
    assert controller.observe([0.5, 0.25, 0.75, 1.0]) == 0 and controller.level == 1
    assert controller.observe([1.0, 1.0, 0.0, 0.0]) == 1  # half all right, half all wrong


def test_a_window_is_judged_only_when_full_and_starts_again_after_a_move():
    controller = CurriculumController(levels=4, start=1, window=3)
    assert controller.observe([1.0, 1.0]) == 0  # 2 of 3 groups seen: no judgement yet
    # The third fills the window (up); the rest of this batch was measured at the old level and is dropped.
    assert controller.observe([1.0, 0.0, 0.0, 0.0]) == 1 and controller.state_dict()["pending"] == []
    assert controller.observe([0.0, 0.0]) == 0 and controller.level == 2
    assert controller.observe([0.0]) == -1 and controller.level == 1


def test_thresholds_zero_and_one_force_moves():
    up = CurriculumController(levels=3, window=1, raise_at=0.0)
    assert [up.observe([0.0]) for _ in range(3)] == [1, 1, 0]
    down = CurriculumController(levels=3, start=2, window=1, raise_at=1.0, lower_at=0.0)
    assert [down.observe([0.5]) for _ in range(3)] == [-1, -1, 0]


def test_state_round_trips_and_a_stale_level_is_clamped():
    controller = CurriculumController(levels=5, start=1, window=4)
    controller.observe([1.0, 1.0, 1.0, 1.0, 0.5])
    again = CurriculumController(levels=5, window=4)
    again.load_state_dict(json.loads(json.dumps(controller.state_dict())))
    assert again.state_dict() == controller.state_dict() == {"level": 2, "moves": 1, "pending": []}
    smaller = CurriculumController(levels=2)
    smaller.load_state_dict({"level": 4})
    assert smaller.level == 1


def test_group_pass_rates():
    assert group_pass_rates([True, False, True, True, False, False], 2) == [0.5, 1.0, 0.0]


# --- the recipe section ------------------------------------------------------------------------------------

LEVELS = [{"max_operand": 5}, {"max_operand": 9}, {"max_operand": 20}]


def curriculum_recipe(**curriculum) -> dict:
    data = copy.deepcopy(MINIMAL)
    data["dataset"]["generator"].update(train_size=50, eval_size=20, params={"max_ops": 1})
    data["curriculum"] = {"levels": copy.deepcopy(LEVELS), **curriculum}
    return data


def test_defaults_are_filled_in_and_the_resolved_recipe_round_trips(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", curriculum_recipe()), check_trainer=False)
    spec = recipe.curriculum
    assert spec.start == 1  # the level equal to the base params (max_operand 9 is arithmetic's default)
    assert (spec.window, spec.raise_at, spec.lower_at, spec.reward, spec.solved_at) == (
        8,
        0.5,
        0.5,
        "numeric_accuracy",
        1.0,
    )
    resolved = yaml.safe_load(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    assert parse_recipe(resolved, "resolved", check_trainer=False).curriculum == spec
    no_base_level = load_recipe(
        write_recipe(tmp_path / "s.yaml", curriculum_recipe(levels=[{"max_operand": 5}, {"max_operand": 7}])),
        check_trainer=False,
    )
    assert no_base_level.curriculum.start == 0


@pytest.mark.parametrize(
    "change, key, problem",
    [
        (
            lambda d: d["dataset"].update(generator=None, path="data.jsonl"),
            "curriculum",
            "it needs dataset.generator",
        ),
        (lambda d: d["curriculum"].update(levels=[{}]), "curriculum.levels", "at least 2 levels"),
        (
            lambda d: d["curriculum"]["levels"][2].update(max_operand="many"),
            "curriculum.levels.2.max_operand",
            "expected an integer",
        ),
        (
            lambda d: d["curriculum"]["levels"][1].update(max_operant=3),
            "curriculum.levels.1",
            "unknown key 'max_operant'. Allowed: min_ops, max_ops, min_operand, max_operand, operators, "
            "times_symbol. Did you mean 'max_operand'?",
        ),
        (
            lambda d: d["curriculum"]["levels"][0].update(max_operand=2),
            "curriculum.levels.0",
            "allow 12 distinct problems, fewer than dataset.generator.train_size (50)",
        ),
        (lambda d: d["curriculum"].update(start=3), "curriculum.start", "0 to 2; got 3"),
        (lambda d: d["curriculum"].update(window=0), "curriculum.window", "at least 1 group"),
        (lambda d: d["curriculum"].update(raise_at=1.5), "curriculum.raise_at", "0 to 1; got 1.5"),
        (lambda d: d["curriculum"].update(lower_at=-0.1), "curriculum.lower_at", "0 to 1"),
        (
            lambda d: d["curriculum"].update(reward="numeric_acuracy"),
            "curriculum.reward",
            "not one of the recipe's rewards (numeric_accuracy). Did you mean 'numeric_accuracy'?",
        ),
        (lambda d: d["curriculum"].update(levls=[]), "curriculum", "unknown key 'levls'"),
        (lambda d: d.update(window=4), "", "Did you mean curriculum.window?"),
    ],
)
def test_curriculum_mistakes_are_one_line_naming_the_key(tmp_path, change, key, problem):
    data = curriculum_recipe()
    change(data)
    path = write_recipe(tmp_path / "r.yaml", data)
    (tmp_path / "data.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
    with pytest.raises(RecipeError) as info:
        load_recipe(path, check_trainer=False)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: " if key else f"{path}: "), message
    assert problem in message and "\n" not in message


def test_an_exhausted_level_names_the_level_when_the_data_is_generated(tmp_path):
    # 1..4 with one of + - * allows 48 problems: more than train_size 40, but the held-out split takes some.
    data = curriculum_recipe(levels=[{"max_operand": 4}, {}])
    data["dataset"]["generator"].update(train_size=40, eval_size=40, params={"max_ops": 1, "max_operand": 6})
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data), check_trainer=False)
    with pytest.raises(
        RecipeError, match=r"curriculum\.levels\.0: arithmetic: asked for 40 distinct problems"
    ):
        load_splits(recipe)


# --- the pools ---------------------------------------------------------------------------------------------


def _pools(data: dict, tmp_path: Path):
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data), check_trainer=False)
    splits = load_splits(recipe)
    without = copy.deepcopy(data)
    del without["curriculum"]
    _, plain_held_out = generated_rows(load_recipe(write_recipe(tmp_path / "p.yaml", without)).dataset)
    assert [row["question"] for row in splits.eval] == [row["question"] for row in plain_held_out]
    size = data["dataset"]["generator"]["train_size"]
    assert splits.level_bounds == [
        (i * size, (i + 1) * size) for i in range(len(data["curriculum"]["levels"]))
    ]
    pools = [list(splits.level_rows(level)) for level in range(len(splits.level_bounds))]
    for level, pool in enumerate(pools):
        assert [row["curriculum_level"] for row in pool] == [level] * size
        assert [row["curriculum_row"] for row in pool] == list(range(size))
        assert len({row["question"] for row in pool}) == size
    return recipe, pools, list(splits.eval)


def test_arithmetic_pools_have_their_level_params_and_no_held_out_question(tmp_path):
    data = curriculum_recipe(
        levels=[{"max_operand": 5}, {"min_operand": 10, "max_operand": 20}, {"max_ops": 2}]
    )
    data["dataset"]["generator"]["params"] = {"max_ops": 1, "max_operand": 12}
    recipe, pools, held_out = _pools(data, tmp_path)
    assert recipe.curriculum.start == 0
    held = {row["question"] for row in held_out}
    for pool in pools:
        assert not held & {row["question"] for row in pool}
    operands = [[int(x) for x in row["question"].split(" ")[::2]] for pool in pools for row in pool]
    assert all(1 <= x <= 5 for o in operands[:50] for x in o)
    assert all(10 <= x <= 20 for o in operands[50:100] for x in o)
    assert {len(o) for o in operands[100:]} == {2, 3} and all(x <= 12 for o in operands[100:] for x in o)


def test_countdown_pools_have_their_level_params_and_no_held_out_problem(tmp_path):
    data = {
        **copy.deepcopy(MINIMAL),
        "dataset": {
            "generator": {
                "name": "countdown",
                "train_size": 30,
                "eval_size": 20,
                "params": {"min_count": 3, "max_count": 4, "max_number": 50, "max_target": 60},
            }
        },
        "prompt": {"user": "{question}", "solution_column": "solution"},
        "rewards": [{"name": "countdown"}],
        "curriculum": {"levels": [{"max_count": 3}, {"min_count": 4}]},
    }
    _, pools, held_out = _pools(data, tmp_path)
    held = {problem_key(row["question"]) for row in held_out}
    for count, pool in zip((3, 4), pools, strict=True):
        assert not held & {problem_key(row["question"]) for row in pool}
        assert {len(row["numbers"]) for row in pool} == {count}
        assert all(1 <= n <= 50 for row in pool for n in row["numbers"]) and all(
            row["target"] <= 60 for row in pool
        )


def test_reasoning_gym_pools_have_their_level_settings_and_no_held_out_question(tmp_path):
    pytest.importorskip("reasoning_gym")
    data = {
        **copy.deepcopy(MINIMAL),
        "dataset": {
            "generator": {
                "name": "reasoning_gym",
                "train_size": 12,
                "eval_size": 6,
                "params": {"task": "basic_arithmetic", "max_terms": 2, "max_digits": 1},
            }
        },
        "prompt": {"user": "{question}", "solution_column": "answer"},
        "rewards": [{"name": "reasoning_gym"}],
        "curriculum": {"levels": [{}, {"max_terms": 3, "max_digits": 2}]},
    }
    recipe, pools, held_out = _pools(data, tmp_path)
    assert recipe.curriculum.start == 0
    held = {row["question"] for row in held_out}
    for (terms, digits), pool in zip(((2, 1), (3, 2)), pools, strict=True):
        assert not held & {row["question"] for row in pool}
        configs = {row["task_config"] for row in pool}
        assert [json.loads(c) for c in configs] == [{"max_digits": digits, "max_terms": terms}]


# --- real runs ---------------------------------------------------------------------------------------------

#: Four levels whose operands tell them apart; raising at 0.0 after every group moves one level a step.
RUN_LEVELS = [
    {"min_operand": 1, "max_operand": 9},
    {"min_operand": 10, "max_operand": 19},
    {"min_operand": 20, "max_operand": 29},
    {"min_operand": 30, "max_operand": 39},
]


def _probe_recipe(tiny_model: Path, tmp_path: Path, **trainer) -> Path:
    data = tiny_recipe(tiny_model, tmp_path / "run", **trainer)
    data["evaluation"]["enabled"] = False
    data["curriculum"] = {"levels": RUN_LEVELS, "window": 1, "raise_at": 0.0}
    return write_recipe(tmp_path / "curriculum.yaml", data)


def _probe(recipe: Path, *overrides: str, launcher: list[str] | None = None) -> str:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [*(launcher or [sys.executable]), str(PROBE), str(recipe), *overrides]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout + result.stderr


def _operand_level(question: str) -> int:
    return int(question.split(" ")[0]) // 10


def _history(out: Path) -> list[dict]:
    return [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]


@pytest.mark.slow
def test_a_real_run_moves_the_level_logs_it_and_resumes_it(tiny_model, tmp_path):
    out = tmp_path / "run"
    recipe = _probe_recipe(tiny_model, tmp_path)
    log = _probe(recipe)
    assert "curriculum: level 0 of 0-3" in log and "level 1  " in log  # the step line shows it
    assert [h["curriculum/level"] for h in _history(out)] == [0, 1]
    records = json.loads((out / "rank0.json").read_text())
    assert [(r["step"], r["levels"], r["level_after"]) for r in records] == [(1, [0], 1), (2, [1], 2)]
    for record in records:  # every prompt from the level's pool (its operands say which)
        assert {_operand_level(q) for q in record["questions"]} == set(record["levels"])
    assert json.loads((out / "checkpoint-2" / "curriculum.json").read_text())["level"] == 2
    assert json.loads((out / "summary.json").read_text())["curriculum"] == {
        "level": 2,
        "levels": 4,
        "moves": 2,
    }

    # Resumed for two more steps: it goes on at level 2 (a fresh start would be at 0), then clamps at the top.
    log = _probe(recipe, "trainer.max_steps=4", "trainer.save_steps=4")
    assert "curriculum: level 2 of 0-3 (restored from the checkpoint)" in log
    assert [h["curriculum/level"] for h in _history(out)] == [0, 1, 2, 3]
    records = json.loads((out / "rank0.json").read_text())
    assert [(r["step"], r["levels"], r["level_after"]) for r in records] == [(3, [2], 3), (4, [3], 3)]
    assert all(_operand_level(q) == r["levels"][0] for r in records for q in r["questions"])


# Long: make test covers the ground otherwise: dynamic sampling by test_dynamic_sampling.py, the levels by the run above.
@pytest.mark.long
def test_dynamic_sampling_draws_replacements_from_the_level_of_the_batch(tiny_model, tmp_path):
    out = tmp_path / "run"
    recipe = _probe_recipe(tiny_model, tmp_path)
    # The tiny random model gets every answer wrong: every group is all wrong, so each step spends its extra round.
    _probe(recipe, "sampling.dynamic=true", "sampling.max_rounds=1")
    records = json.loads((out / "rank0.json").read_text())
    assert [(r["step"], r["levels"]) for r in records] == [(1, [0]), (1, [0]), (2, [1]), (2, [1])]
    assert all(_operand_level(q) == r["levels"][0] for r in records for q in r["questions"])
    assert [h["curriculum/level"] for h in _history(out)] == [0, 1]
    assert [h["extra_rounds"] for h in _history(out)] == [1, 1]


@pytest.mark.smoke
def test_two_processes_agree_on_the_level_of_every_step(tiny_model, tmp_path):
    out = tmp_path / "run"
    recipe = _probe_recipe(tiny_model, tmp_path, per_device_train_batch_size=2, max_steps=3, save_steps=3)
    _probe(recipe, launcher=two_process_launcher())
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["step"], r["levels"], r["level_after"]) for r in ranks[0]] == [
        (1, [0], 1),
        (2, [1], 2),
        (3, [2], 3),
    ]
    # The same records on both: the group of 4 is split 2 + 2, so each step's prompt is the same on both.
    assert ranks[0] == ranks[1] and all(len(set(r["questions"])) == 1 for r in ranks[0])
    assert [h["curriculum/level"] for h in _history(out)] == [0, 1, 2]
