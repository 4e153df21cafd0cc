"""The reward audit on real data: gold solutions get full marks, corrupted answers 0, and a wrong setup fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import REPO, SHARED_DATA, run_script, run_script_in_process

import rewards
from grpo_recipes.evaluation.audit import AuditReport, audit, format_report, load_rows
from grpo_recipes.recipe import RecipeError, load_recipe

GSM8K = SHARED_DATA / "gsm8k" / "test.jsonl"
MATH500 = SHARED_DATA / "math500" / "test.jsonl"


@pytest.fixture(scope="module", autouse=True)
def _stop_sympy_workers():
    yield
    rewards.shutdown_workers()


def data(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(
            f"{path} not found: the real-data audit needs the shared data folder next to the repository"
        )
    return path


def recipe(name: str, *overrides: str):
    return load_recipe(REPO / "recipes" / f"{name}.yaml", list(overrides), check_trainer=False)


def check_counts(report: AuditReport) -> None:
    """Every row is counted once: full marks, scored without full marks, unscorable, or no gold answer."""
    scored = [r for r in report.failures if r.answer is not None and not r.unscorable]
    assert report.ideal_full_marks + sum(
        not r.ideal_ok for r in scored
    ) + report.unscorable + report.no_gold_answer == (report.rows)
    assert report.corrupted_zero + sum(
        not r.corrupted_ok for r in scored
    ) + report.unscorable + report.no_gold_answer == (report.rows)
    assert report.slowest is not None and report.slowest.seconds > 0


@pytest.mark.parametrize(
    ("name", "path", "rows"), [("gsm8k", GSM8K, 1319), ("math", MATH500, 500)], ids=["gsm8k", "math500"]
)
def test_full_test_split(name, path, rows):
    report = audit(recipe(name), load_rows(data(path)))
    assert report.rows == rows
    assert report.ideal_fraction >= 0.99, format_report(report)
    assert report.corrupted_fraction >= 0.99, format_report(report)
    assert report.unscorable == report.no_gold_answer == 0
    check_counts(report)
    # The accuracy reward itself never misses a gold answer; what full marks lose is length penalties.
    assert [r.index for r in report.failures if r.ideal[report.evaluation] != 1.0] == []
    assert report.failed_thresholds(0.99, 0.99) == []


def test_ideal_and_corrupted_completions_are_what_the_rewards_see():
    rows = load_rows(data(GSM8K), limit=3)
    report = audit(recipe("gsm8k", "audit.completion_template='{reasoning} The answer is {answer}.'"), rows)
    # No <think>/<answer> tags: the accuracy reward still reads "the answer is", think_format gives 0.
    assert report.ideal_full_marks == 0 and report.corrupted_zero == 3
    first = report.failures[0]
    assert first.ideal == {"gsm8k_accuracy": 1.0, "think_format": 0.0}
    assert first.wrong == str(int(first.answer) + 1)
    assert first.logged["gsm8k_accuracy/answer"] == [first.answer, first.wrong]
    text = format_report(report)
    assert first.index == 0 and "row 0: gold answer: 18\n" in text and "think_format=0" in text


def test_a_reward_that_cannot_read_the_answer_fails_the_audit():
    # math_accuracy told to read <answer> blocks while the completions box the answer: nothing is correct.
    rows = load_rows(data(MATH500), limit=20)
    report = audit(recipe("math", "rewards.0.params.answer_format=answer_tag"), rows)
    assert report.ideal_full_marks == 0 and report.corrupted_zero == 20
    assert report.failed_thresholds(0.99, 0.99) == ["ideal full marks 0/20 (0.0 %) < --min-ideal 0.99"]


def test_script_passes_on_gsm8k():
    result = run_script("audit_rewards.py", "--config", "gsm8k", "--data", str(data(GSM8K)), "--limit", "200")
    assert result.returncode == 0, result.stderr
    assert re.search(r"rows +200\n", result.stdout)
    assert re.search(r"ideal full marks +200 \(100\.0 %\)", result.stdout)
    assert re.search(r"corrupted scoring 0 +200 \(100\.0 %\)", result.stdout)
    assert re.search(r"slowest sample +[\d.]+ ms \(row \d+, answer: ", result.stdout)
    assert "audit: 200/200 rows" in result.stderr  # progress


# The audits below run in this process (no model loads in an audit); the others run it as a user does.


def test_script_exits_1_below_a_threshold():
    args = ["--config", "gsm8k", "--data", str(data(GSM8K)), "--limit", "20", "--min-ideal", "1.01"]
    result = run_script_in_process("audit_rewards.py", *args)
    assert result.returncode == 1, result.stderr
    assert "FAILED: ideal full marks 20/20 (100.0 %) < --min-ideal 1.01" in result.stdout
    assert "--min-corrupted" not in result.stdout


def test_script_exits_1_when_the_gold_is_read_the_wrong_way():
    # GSM8K golds end in '#### N': read as \boxed{}, no row has an answer, so no row gets full marks.
    args = ["--config", "gsm8k", "--data", str(data(GSM8K)), "--limit", "20", "audit.gold_answer=boxed"]
    result = run_script_in_process("audit_rewards.py", *args)
    assert result.returncode == 1, result.stderr
    assert re.search(r"ideal full marks +0 \(0\.0 %\)", result.stdout)
    assert re.search(r"no gold answer +20\n", result.stdout)
    assert "row 0: no answer in the gold with audit.gold_answer=boxed" in result.stdout
    assert (
        "FAILED: ideal full marks 0/20" in result.stdout
        and "FAILED: corrupted scoring 0 0/20" in result.stdout
    )


def test_script_exits_2_on_bad_input(tmp_path):
    result = run_script(
        "audit_rewards.py", "--config", "gsm8k", "--data", str(GSM8K), "audit.gold_anwser=gsm8k"
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    assert "Did you mean 'gold_answer'?" in errors[0]
    assert (
        load_rows_error(tmp_path / "rows.txt")
        == f"{tmp_path / 'rows.txt'}: unsupported data file; use one of .jsonl, .json, .parquet, .csv."
    )
    assert load_rows_error(tmp_path / "missing.jsonl").endswith("missing.jsonl: no such data file.")
    with pytest.raises(RecipeError, match=r"placeholder \{question\} has no matching dataset column"):
        audit(recipe("gsm8k"), [{"problem": "1 + 1?", "solution": "2"}])
    with pytest.raises(
        RecipeError, match=r"audit.completion_template: invalid template \(KeyError: 'answr'\)"
    ):
        audit(
            recipe("gsm8k", "audit.completion_template=<answer>{answr}</answer>"),
            [{"question": "?", "answer": "2"}],
        )


def load_rows_error(path: Path) -> str:
    from grpo_recipes.evaluation.audit import AuditInputError

    with pytest.raises(AuditInputError) as error:
        load_rows(path)
    return str(error.value)


# The completion template: from what the prompt asks, else the reward's answer_format, else a refusal.


def own_recipe(tmp_path: Path, user: str, reward: dict, **sections) -> Path:
    from support import MINIMAL, write_recipe

    data = {
        **MINIMAL,
        "prompt": {"user": user, "solution_column": "answer"},
        "rewards": [reward],
        **sections,
    }
    return write_recipe(tmp_path / "r.yaml", data)


ARITHMETIC_ROWS = [{"question": f"{i} + 1", "answer": str(i + 1)} for i in range(6)]


@pytest.mark.parametrize(
    "user, reward, template, source",
    [
        (
            "{question} End with 'Answer: <number>'.",
            {"name": "numeric_accuracy"},
            "{reasoning}\n\nAnswer: {answer}",
            "the prompt, which asks for 'Answer: N'",
        ),
        (
            "{question} Put the result in \\boxed{{}}.",
            {"name": "gsm8k_accuracy"},
            "{reasoning}\n\nThe final answer is \\boxed{{{answer}}}.",
            "the prompt, which asks for \\boxed{}",
        ),
        (
            "{question}",
            {"name": "math_accuracy", "params": {"answer_format": "answer_tag"}},
            "{reasoning}\n\n<answer>{answer}</answer>",
            "rewards[0].params.answer_format=answer_tag (the prompt names no answer format)",
        ),
        (
            "{question} Think in <think> </think>, then the number in <answer> </answer>.",
            {"name": "gsm8k_accuracy"},
            "<think>\n{reasoning}\n</think>\n<answer>{answer}</answer>",
            "the prompt, which asks for <answer>",
        ),
        (
            "{question} State it as: the answer is N.",
            {"name": "gsm8k_accuracy"},
            "{reasoning}\n\nThe answer is {answer}.",
            "the prompt, which asks for 'The answer is N'",
        ),
    ],
    ids=["answer-line", "boxed", "reward-param", "think-answer", "answer-is"],
)
def test_the_completion_template_follows_what_the_prompt_asks(tmp_path, user, reward, template, source):
    from grpo_recipes.evaluation.audit import completion_template

    loaded = load_recipe(own_recipe(tmp_path, user, reward), check_trainer=False)
    assert completion_template(loaded) == (template, source)
    report = audit(loaded, ARITHMETIC_ROWS)
    assert report.ideal_full_marks == report.corrupted_zero == 6, format_report(report)
    assert report.example[1] == template.format(reasoning="", answer="1").strip()


def test_a_reward_that_cannot_read_what_the_prompt_asks_for_fails_the_audit(tmp_path):
    # The prompt asks for 'Answer: N'; math_accuracy reads only \boxed{}. A \boxed{} ideal completion
    # (the old default) passed this audit while testing a format the model is never asked to write.
    path = own_recipe(tmp_path, "{question} End with 'Answer: <number>'.", {"name": "math_accuracy"})
    report = audit(load_recipe(path, check_trainer=False), ARITHMETIC_ROWS)
    assert report.ideal_full_marks == 0 and report.failed_thresholds(0.99, 0.99)
    text = format_report(report)
    assert (
        "completion template (from the prompt, which asks for 'Answer: N'): '{reasoning}\\n\\nAnswer: {answer}'"
        in text
    )
    assert "  example ideal completion (row 0):     'Answer: 1'\n" in text
    assert "  example corrupted completion (row 0): 'Answer: 2'\n" in text


def test_the_think_block_of_a_prefilled_chat_template_is_not_opened_twice(tmp_path):
    from grpo_recipes.evaluation.audit import completion_template

    path = own_recipe(
        tmp_path,
        "{question} Give the number in <answer> </answer>.",
        {"name": "gsm8k_accuracy"},
        rewards=[{"name": "gsm8k_accuracy"}, {"name": "think_format", "params": {"think_prefilled": True}}],
    )
    loaded = load_recipe(path, check_trainer=False)
    assert completion_template(loaded)[0] == "{reasoning}\n</think>\n<answer>{answer}</answer>"
    assert audit(loaded, ARITHMETIC_ROWS).ideal_full_marks == 6


def test_the_derived_template_of_the_gsm8k_prompt_is_the_one_gsm8k_yaml_spells_out():
    from grpo_recipes.evaluation.audit import completion_template

    explicit = recipe("gsm8k")
    derived = recipe("gsm8k", "audit.completion_template=null")
    assert completion_template(derived)[0] == explicit.audit.completion_template


@pytest.mark.parametrize(
    "user, expected",
    [
        (
            "{question}",
            "r.yaml: audit.completion_template: the prompt names no answer format (\\boxed{}, <answer>, "
            "'Answer: N', 'The answer is N', '#### N') and the evaluation reward numeric_accuracy has no "
            "answer_format param, so the audit cannot tell what an ideal completion looks like; say in the "
            "prompt how to answer, or set audit.completion_template, e.g. "
            '"{reasoning}\\n\\nAnswer: {answer}" (literal braces doubled: \\\\boxed{{{answer}}}).',
        ),
        (
            "{question} Box it: \\boxed{{}} inside <answer> </answer>.",
            "r.yaml: audit.completion_template: the prompt names several answer formats (\\boxed{}, "
            "<answer>), so the audit cannot tell which one an ideal completion uses; set "
            "audit.completion_template to what the model should write, e.g.",
        ),
    ],
    ids=["none", "several"],
)
def test_no_guess_when_the_prompt_names_no_format_or_several(tmp_path, user, expected):
    path = own_recipe(tmp_path, user, {"name": "numeric_accuracy"})
    with pytest.raises(RecipeError) as error:
        audit(load_recipe(path, check_trainer=False), ARITHMETIC_ROWS)
    assert str(error.value).startswith(f"{tmp_path}/{expected}") and "\n" not in str(error.value)
    # Setting the template is the way out.
    fixed = load_recipe(path, ["audit.completion_template='Answer: {answer}'"], check_trainer=False)
    assert audit(fixed, ARITHMETIC_ROWS).ideal_full_marks == 6


# Without --data the audit reads the recipe's own data, and says which.


def test_script_without_data_audits_the_generated_rows_of_the_default_recipe():
    result = run_script_in_process("audit_rewards.py", "--config", "default")
    assert result.returncode == 0, result.stderr
    assert (
        "reward audit of recipe default on rows of dataset.generator arithmetic (131 training + 200 held-out)"
        in result.stdout
    )
    assert re.search(r"ideal full marks +331 \(100\.0 %\)", result.stdout)
    assert "gsm8k" not in result.stdout


def test_script_without_data_audits_the_recipes_files_and_exits_2_offline_for_a_hub_dataset(tmp_path):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(f'{{"question": "{i} + 1", "answer": "{i + 1}"}}\n' for i in range(12)))
    test.write_text('{"question": "1 + 1", "answer": "2"}\n')
    path = own_recipe(
        tmp_path,
        "{question} End with 'Answer: <number>'.",
        {"name": "numeric_accuracy"},
        dataset={"path": "train.jsonl", "eval_path": "test.jsonl"},  # beside the recipe
    )
    result = run_script("audit_rewards.py", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert f"on dataset.path {train}\n" in result.stdout and f"on dataset.eval_path {test}\n" in result.stdout
    assert re.search(r"rows +12\n", result.stdout) and re.search(r"rows +1\n", result.stdout)

    offline = run_script("audit_rewards.py", "--config", "gsm8k", extra_env={"HF_DATASETS_OFFLINE": "1"})
    assert offline.returncode == 2
    assert (
        offline.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "dataset.path: the Hub dataset openai/gsm8k (split train) cannot be loaded (ConnectionError); "
            "audit a local copy with --data FILE (make audit DATA=FILE)."
        )
    ), offline.stderr


def test_make_audit_passes_data_only_when_given():
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def audit_command(*variables: str) -> str:
        dry = subprocess.run(
            ["make", "-n", "audit", "RECIPE=default", *variables], cwd=REPO, capture_output=True, text=True
        )
        return next(line for line in dry.stdout.splitlines() if "audit_rewards.py" in line)

    assert audit_command().split("audit_rewards.py", 1)[1].split() == ["--config", "recipes/default.yaml"]
    assert "--data rows.jsonl" in audit_command("DATA=rows.jsonl")


def test_an_environment_reward_is_refused_with_the_reason():
    """Its score is the state a rollout leaves, not a text: no ideal completion can be written for it."""
    result = run_script("audit_rewards.py", "--config", "recipes/guess-number.yaml", timeout=120)
    assert result.returncode == 2
    assert "environment_reward scores the state a rollout leaves in its environment" in result.stderr
    assert "FAILED" not in result.stdout
