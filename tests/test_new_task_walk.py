"""docs/new-task.md, "Your own task in fifteen minutes", walked as written: copy the template, point it at a
q/ans JSONL file by the page's own lines, then check, audit and train (two steps, on the tiny model)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from support import REPO, run_script, run_script_in_process

WALK_PAGE = REPO / "docs" / "new-task.md"
WALK_TITLE = "# Your own task in fifteen minutes"

# The user's data: unit conversions with the question in `q` and the answer in `ans`.
CONVERSIONS = [("metres", "kilometres", 1000), ("seconds", "minutes", 60), ("grams", "kilograms", 1000)]


def walk_section() -> str:
    """The walk-through: the whole page, from its title."""
    page = WALK_PAGE.read_text()
    assert page.startswith(WALK_TITLE + "\n"), f"{WALK_PAGE.name} does not open with {WALK_TITLE!r}"
    return page


def walk_edits() -> list[str]:
    """The recipe lines the page tells the user to write (its ```yaml block, the lines marked EDIT)."""
    block = re.search(r"```yaml\n(.*?)```", walk_section(), re.DOTALL)
    assert block, "the walk-through has no yaml block"
    return [line.strip() for line in block.group(1).splitlines() if "# EDIT" in line]


def apply_edits(template: str, edits: list[str]) -> str:
    """Replace each EDIT line of the template with the page's line for the same key (indent kept)."""
    lines = template.splitlines()
    marked = [i for i, line in enumerate(lines) if "# EDIT" in line]
    done = set()
    for edit in edits:
        key = edit.split(":", 1)[0]
        matches = [i for i in marked if lines[i].strip().startswith(f"{key}:")]
        assert len(matches) == 1, f"the template has {len(matches)} EDIT lines for {key!r}"
        indent = lines[matches[0]][: len(lines[matches[0]]) - len(lines[matches[0]].lstrip())]
        lines[matches[0]] = indent + edit
        done.add(matches[0])
    assert done == set(marked), "the walk-through leaves some of the template's EDIT lines out"
    return "\n".join(lines) + "\n"


@pytest.fixture
def units_recipe(tmp_path) -> Path:
    """Step 1 and 2: the template copied to units.yaml, the user's q/ans files beside it, the EDIT lines
    replaced by the page's. The data sits in the recipe's folder, not in the working directory (the
    scripts run from the repository root): relative paths resolve next to the recipe."""
    data = tmp_path / "recipes" / "data" / "mine"
    data.mkdir(parents=True)
    rows = [
        {"q": f"How many {small} are {n} {big}?", "ans": str(n * factor)}
        for small, big, factor in CONVERSIONS
        for n in range(2, 12)
    ]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:26]))
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[26:]))
    recipe = tmp_path / "recipes" / "units.yaml"
    recipe.write_text(apply_edits((REPO / "recipes" / "template.yaml").read_text(), walk_edits()))
    return recipe


def test_the_walk_names_the_commands_the_test_runs():
    section = walk_section()
    for command in ("cp recipes/template.yaml recipes/units.yaml", "make check RECIPE=units"):
        assert command in section
    assert "make audit RECIPE=units\n" in section and "make train RECIPE=units\n" in section
    assert {edit.split(":")[0] for edit in walk_edits()} == {"path", "eval_path", "user", "solution_column"}


def test_check_and_audit_pass_on_the_users_own_data(units_recipe):
    # In this process: neither loads a model (train.py's --check from a real process is tested below).
    check = run_script_in_process("train.py", "--config", str(units_recipe), "--check")
    assert check.returncode == 0, check.stderr[-2000:]
    assert "dataset: 26 training rows, 4 held-out rows\n" in check.stdout
    # The user's column `q` in the prompt, `ans` as the solution (rows are shuffled: any of them).
    assert re.search(
        r"first prompt: .*\"How many \w+ are \d+ \w+\? End with 'Answer: <number>'\.\"", check.stdout
    )
    assert re.search(r"its solution: '\d+'\n", check.stdout)

    audit = run_script_in_process("audit_rewards.py", "--config", str(units_recipe))
    assert audit.returncode == 0, audit.stdout + audit.stderr[-2000:]
    data = units_recipe.parent / "data" / "mine"
    assert f"on dataset.path {data / 'train.jsonl'}\n" in audit.stdout
    assert f"on dataset.eval_path {data / 'test.jsonl'}\n" in audit.stdout
    assert "completion template (from the prompt, which asks for 'Answer: N')" in audit.stdout
    assert "  example ideal completion (row 0):     'Answer: 2000'\n" in audit.stdout
    assert "  example corrupted completion (row 0): 'Answer: 2001'\n" in audit.stdout
    assert re.search(r"ideal full marks +26 \(100\.0 %\)", audit.stdout)
    assert re.search(r"corrupted scoring 0 +4 \(100\.0 %\)", audit.stdout)


def train_two_steps(recipe: Path, model: Path, out: Path):
    """`make train RECIPE=<recipe>` for two steps, the tiny random model standing in for SmolLM2."""
    result = run_script(
        "train.py",
        "--config",
        str(recipe),
        f"model.name_or_path={model}",
        f"trainer.output_dir={out}",
        "trainer.max_steps=2",
        "trainer.max_completion_length=8",
        "evaluation.max_new_tokens=8",
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result


@pytest.mark.long  # about 25 s: make test-long (CI runs it); make test trains the template below
def test_training_runs_on_the_users_own_data(units_recipe, tiny_model, tmp_path):
    out = tmp_path / "outputs" / "units"
    result = train_two_steps(units_recipe, tiny_model, out)
    assert "dataset: 26 training rows, 4 held-out rows\n" in result.stdout
    assert json.loads((out / "summary.json").read_text())["global_step"] == 2
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "rewards/numeric_accuracy/mean" in h] == [1, 2]
    assert json.loads((out / "eval_after.json").read_text())["total"] == 4


# --- "A task of your own, outside the repository" ------------------------------------------------------------

OUTSIDE_TITLE = "## A task of your own, outside the repository"


def outside_section() -> str:
    page = WALK_PAGE.read_text()
    assert OUTSIDE_TITLE in page, f"{WALK_PAGE.name} has no section {OUTSIDE_TITLE!r}"
    return page.split(OUTSIDE_TITLE, 1)[1].split("\n## ", 1)[0]


def outside_block(language: str) -> str:
    block = re.search(rf"```{language}\n(.*?)```", outside_section(), re.DOTALL)
    assert block, f"the section has no {language} block"
    return block.group(1)


def date_rows(count: int) -> list[dict]:
    import datetime

    start = datetime.date(2024, 1, 1)
    rows = []
    for n in range(count):
        day = start + datetime.timedelta(days=17 * n)
        later = day + datetime.timedelta(days=3 + n % 40)
        rows.append(
            {"question": f"What date is {(later - day).days} days after {day}?", "answer": str(later)}
        )
    return rows


@pytest.fixture
def dates_recipe(tmp_path) -> Path:
    """The section's folder: its reward file, the date rows, and the template with the section's lines,
    in a folder outside the repository (the scripts run from the repository root)."""
    folder = tmp_path / "dates"
    folder.mkdir()
    (folder / "date_reward.py").write_text(outside_block("python"))
    rows = date_rows(24)
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:20]))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[20:]))
    recipe = yaml.safe_load((REPO / "recipes" / "template.yaml").read_text())
    changes = yaml.safe_load(outside_block("yaml"))
    recipe["dataset"].update(changes["dataset"])
    recipe["prompt"].update(changes["prompt"])
    recipe["rewards"] = changes["rewards"]
    path = folder / "dates.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    assert not str(path).startswith(str(REPO))
    return path


def test_the_outside_section_names_the_commands_the_test_runs():
    section = outside_section()
    for command in ("make check RECIPE=~/dates/dates.yaml", "make audit RECIPE=~/dates/dates.yaml"):
        assert command in section
    assert "make train RECIPE=~/dates/dates.yaml" in section


def test_make_takes_a_recipe_path(dates_recipe):
    """`RECIPE=` a path anywhere reaches every target's --config (dry run: the commands make would run)."""
    import subprocess

    for target in ("check", "train", "audit", "eval"):
        dry = subprocess.run(
            ["make", "-n", target, f"RECIPE={dates_recipe}"], cwd=REPO, capture_output=True, text=True
        )
        assert f"--config {dates_recipe}" in dry.stdout, (target, dry.stdout[-500:], dry.stderr[-500:])
    dry = subprocess.run(
        ["make", "-n", "report", f"RECIPE={dates_recipe}"], cwd=REPO, capture_output=True, text=True
    )
    assert "outputs/dates" in dry.stdout


def test_check_and_audit_with_a_reward_of_ones_own(dates_recipe):
    check = run_script("train.py", "--config", str(dates_recipe), "--check")
    assert check.returncode == 0, check.stderr[-2000:]
    assert "dataset: 20 training rows, 4 held-out rows\n" in check.stdout
    assert re.search(r"its solution: '20\d\d-\d\d-\d\d'\n", check.stdout)  # a string, not a datetime
    assert "columns used: question (str), answer (str)\n" in check.stdout
    assert f"date_reward:date_match: from {dates_recipe.parent / 'date_reward.py'}\n" in check.stdout

    # The audit in this process: the user's module is imported from its file, then forgotten, as a new process
    # would forget it (another recipe's module of the same name is imported afresh).
    audit = run_script_in_process("audit_rewards.py", "--config", str(dates_recipe))
    assert audit.returncode == 0, audit.stdout + audit.stderr[-2000:]
    assert re.search(r"ideal full marks +20 \(100\.0 %\)", audit.stdout), audit.stdout
    assert re.search(r"corrupted scoring 0 +4 \(100\.0 %\)", audit.stdout), audit.stdout
    assert "date_reward" not in sys.modules and str(dates_recipe.parent) not in sys.path


@pytest.mark.slow
def test_training_with_a_reward_of_ones_own(dates_recipe, tiny_model, tmp_path):
    out = tmp_path / "outputs" / "dates"
    train_two_steps(dates_recipe, tiny_model, out)
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "rewards/date_match/mean" in h] == [1, 2]
    assert json.loads((out / "eval_after.json").read_text())["total"] == 4


@pytest.mark.long  # about 40 s: make test-long (CI runs it)
def test_eval_and_compare_with_a_reward_of_ones_own(dates_recipe, tiny_model, tmp_path):
    out = tmp_path / "eval"
    result = run_script(
        "evaluate.py", "--config", str(dates_recipe), "--model", str(tiny_model), "--base", str(tiny_model),
        "--limit", "3", "--max-new-tokens", "8", "--output-dir", str(out),
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    for side in ("base", "model"):  # `make compare`: both models scored by the user's reward
        samples = [json.loads(line) for line in (out / side / "samples.jsonl").read_text().splitlines()]
        assert len(samples) == 3 and all(
            set(record["rewards"]) == {"date_reward:date_match"} for record in samples
        )
    assert (out / "model" / "comparison.json").is_file()


@pytest.mark.smoke
def test_two_processes_with_a_reward_of_ones_own(dates_recipe, tmp_path):
    """`make smoke RECIPE=~/dates/dates.yaml`: two gloo processes, each loading the user's module itself."""
    result = run_script(
        "smoke.py", "--config", str(dates_recipe), "--dist", "ddp", "--gen", "hf", "--lora", "off",
        "--outputs", str(tmp_path), timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    out = tmp_path / "smoke-dates"
    assert json.loads((out / "run_info.json").read_text())["world_size"] == 2
    history = json.loads((out / "log_history.json").read_text())
    assert [h["step"] for h in history if "rewards/date_match/mean" in h] == [1, 2]
