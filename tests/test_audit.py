"""The reward audit on real data: gold solutions get full marks, corrupted answers 0, and a wrong setup fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import REPO, SHARED_DATA, run_script

import rewards
from grpo_recipes.audit import AuditReport, audit, format_report, load_rows
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


def test_script_exits_1_below_a_threshold():
    args = ["--config", "gsm8k", "--data", str(data(GSM8K)), "--limit", "20", "--min-ideal", "1.01"]
    result = run_script("audit_rewards.py", *args)
    assert result.returncode == 1, result.stderr
    assert "FAILED: ideal full marks 20/20 (100.0 %) < --min-ideal 1.01" in result.stdout
    assert "--min-corrupted" not in result.stdout


def test_script_exits_1_when_the_gold_is_read_the_wrong_way():
    # GSM8K golds end in '#### N': read as \boxed{}, no row has an answer, so no row gets full marks.
    args = ["--config", "gsm8k", "--data", str(data(GSM8K)), "--limit", "20", "audit.gold_answer=boxed"]
    result = run_script("audit_rewards.py", *args)
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
    from grpo_recipes.audit import AuditInputError

    with pytest.raises(AuditInputError) as error:
        load_rows(path)
    return str(error.value)
