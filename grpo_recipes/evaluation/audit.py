"""The reward audit: do a recipe's rewards give full marks to the gold solution, and nothing to a wrong answer?

For every dataset row, two completions are written in the recipe's output format (`audit.completion_template`,
else the format the prompt asks for: see `completion_template`): the *ideal* one from the row's gold
solution, and a *corrupted* one,
the same with the final answer changed so that it is certainly wrong. Both are scored by the recipe's
reward stack exactly as TRL's GRPOTrainer calls it: the prompt from `build_prompt` as `prompts`, the gold
under `solution`, the row's other columns as keyword arguments, chat-shaped completions for a
conversational recipe. A reward bug (an answer format the reward does not read, a gold it misparses, a
format reward that never fires) shows up as rows whose ideal completion misses full marks.

A corrupted completion should score 0 with the evaluation reward, or, for a reward that pays partial
credit to a well-formed wrong answer by design (countdown's `format_score`, as in TinyZero), no more
than that credit: see `wrong_answer_score`.

Example:
    >>> from grpo_recipes.recipe import load_recipe
    >>> recipe = load_recipe("recipes/gsm8k.yaml", check_trainer=False)
    >>> report = audit(recipe, [{"question": "1 + 1?", "answer": "One and one.\\n#### 2"}])
    >>> report.ideal_full_marks, report.corrupted_zero, report.unscorable
    (1, 1, 0)
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rewards
from rewards.extract import find_boxed
from rewards.math_rewards import fast_verdict, prepare_answer
from rewards.number_parsing import format_number

from ..data import DataFileError, build_prompt, data_sources, generated_rows, read_data_file
from ..recipe import Recipe, RecipeError, check_columns
from ..reward_stack import RewardStack

#: Keyword arguments TRL builds itself rather than taking from the dataset row.
_NOT_COLUMNS = ("prompt", "completion", "completion_ids")
#: Scores within this of a reward's maximum count as the maximum.
TOLERANCE = 1e-9


class AuditInputError(ValueError):
    """The data to audit cannot be used (missing file, unsupported format, no rows)."""


def check_auditable(recipe: Recipe) -> None:
    """An environment's reward comes from the state of a rollout, not from a completion's text: there is no
    ideal completion to write from a gold answer, so such a recipe is refused with that reason."""
    names = [spec.name for spec in recipe.rewards] + [recipe.evaluation_reward.name]
    if "environment_reward" in names:
        raise AuditInputError(
            f"{recipe.source}: environment_reward scores the state a rollout leaves in its environment, not a "
            "text: the audit cannot write an ideal completion for it (tests/agents check the environments' rewards)"
        )


def load_rows(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of a local .jsonl/.json/.parquet/.csv file, read as training reads a local dataset."""
    try:
        return read_data_file(path, limit).to_list()
    except DataFileError as err:
        raise AuditInputError(str(err)) from None


def recipe_data(recipe: Recipe, limit: int | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
    """The recipe's own rows, by source, as (what they are, rows): what the audit reads without `--data`.

    A generator's training and held-out rows together; else `dataset.path`'s training split, then the
    held-out data when the recipe names some (`dataset.eval_path`, or a Hub dataset's `eval_split`).

    >>> from grpo_recipes.recipe import load_recipe
    >>> [(what, len(rows)) for what, rows in recipe_data(load_recipe("recipes/default.yaml", check_trainer=False))]
    [('rows of dataset.generator arithmetic (131 training + 200 held-out)', 331)]
    """
    spec = recipe.dataset
    if spec.generator is not None:
        train, held_out = generated_rows(spec)
        what = f"rows of dataset.generator {spec.generator.name} ({len(train)} training + {len(held_out)} held-out)"
        return [(what, (train + held_out)[:limit])]
    found = []
    for source in (s for s in data_sources(spec) if s is not None):
        if source.local:
            found.append((source.describe(), load_rows(source.path, limit)))
            continue
        try:
            dataset = source.load()
        except Exception as err:  # offline, or no such dataset: the user can point --data at a file
            raise AuditInputError(
                f"{recipe.source}: {source.key}: the Hub dataset {source.path} (split {source.split}) cannot be "
                f"loaded ({type(err).__name__}); audit a local copy with --data FILE (make audit DATA=FILE)."
            ) from None
        rows = dataset.select(range(min(limit, len(dataset)))) if limit else dataset
        found.append((source.describe(), rows.to_list()))
    return found


# --------------------------------------------------------------------------------------------------------
# Ideal and corrupted completions from the gold.
# --------------------------------------------------------------------------------------------------------

#: The answer formats a prompt can ask for: how the request reads in the prompt, and how the ideal
#: completion states the answer. The order is the one they are listed in when none or several are found.
ANSWER_FORMATS: dict[str, tuple[re.Pattern[str], str]] = {
    "\\boxed{}": (re.compile(r"\\boxed"), "The final answer is \\boxed{{{answer}}}."),
    "<answer>": (re.compile(r"<answer>", re.IGNORECASE), "<answer>{answer}</answer>"),
    "'Answer: N'": (re.compile(r"\banswer\s*:", re.IGNORECASE), "Answer: {answer}"),
    "'The answer is N'": (
        re.compile(r"\bthe (?:final )?answer is\b", re.IGNORECASE),
        "The answer is {answer}.",
    ),
    "'#### N'": (re.compile(r"####"), "#### {answer}"),
}
#: An accuracy reward's `answer_format` param -> the format above it reads.
_REWARD_FORMATS = {"boxed": "\\boxed{}", "answer_tag": "<answer>"}
_THINK_REWARDS = ("think_format", "tag_count")


def completion_template(recipe: Recipe) -> tuple[str, str]:
    r"""The ideal completion's template and where it comes from (for the report).

    `audit.completion_template` when the recipe sets one. Otherwise the answer format the prompt asks
    for (`\boxed{}`, `<answer>`, 'Answer: N', 'The answer is N', '#### N'), else the one the evaluation
    reward's `answer_format` param reads. The reasoning goes in a `<think>` block when the prompt asks
    for one or a think_format/tag_count reward scores it. No format, or several: a RecipeError telling
    which `audit.completion_template` to set, as a default format would test what the model is never
    asked to write.

    >>> from grpo_recipes.recipe import load_recipe
    >>> completion_template(load_recipe("recipes/default.yaml", check_trainer=False))
    ('{reasoning}\n\nAnswer: {answer}', "the prompt, which asks for 'Answer: N'")
    """
    if recipe.audit.completion_template is not None:
        return recipe.audit.completion_template, "audit.completion_template"
    prompt = recipe.prompt
    asked = [
        name
        for name, (pattern, _) in ANSWER_FORMATS.items()
        if any(pattern.search(text or "") for text in (prompt.system, prompt.user))
    ]
    reward_format = getattr(recipe.evaluation_function, "answer_format", None)
    # Written as in a YAML double-quoted value, so the error stays on one line.
    example = 'e.g. "{reasoning}\\n\\nAnswer: {answer}" (literal braces doubled: \\\\boxed{{{answer}}})'
    if len(asked) > 1:
        raise RecipeError(
            recipe.source,
            "audit.completion_template",
            f"the prompt names several answer formats ({', '.join(asked)}), so the audit cannot tell which "
            f"one an ideal completion uses; set audit.completion_template to what the model should write, "
            f"{example}.",
        )
    if asked:
        chosen, why = asked[0], f"the prompt, which asks for {asked[0]}"
    elif reward_format in _REWARD_FORMATS:
        index = next((i for i, spec in enumerate(recipe.rewards) if spec is recipe.evaluation_reward), None)
        key = "evaluation.reward" if index is None else f"rewards[{index}]"
        chosen = _REWARD_FORMATS[reward_format]
        why = f"{key}.params.answer_format={reward_format} (the prompt names no answer format)"
    else:
        raise RecipeError(
            recipe.source,
            "audit.completion_template",
            f"the prompt names no answer format ({', '.join(ANSWER_FORMATS)}) and the evaluation reward "
            f"{recipe.evaluation_reward.name} has no answer_format param, so the audit cannot tell what an "
            f"ideal completion looks like; say in the prompt how to answer, or set "
            f"audit.completion_template, {example}.",
        )
    ending = ANSWER_FORMATS[chosen][1]
    thinks = [spec for spec in recipe.rewards if spec.name in _THINK_REWARDS]
    if thinks or any("<think>" in (text or "") for text in (prompt.system, prompt.user)):
        # A chat template that opens <think> itself: the completion starts inside the block.
        opening = "" if any(spec.params.get("think_prefilled") for spec in thinks) else "<think>\n"
        return f"{opening}{{reasoning}}\n</think>\n{ending}", why
    return f"{{reasoning}}\n\n{ending}", why


def split_gold(gold: str, style: str) -> tuple[str, str | None]:
    r"""(reasoning, answer) of a gold solution: its text without the final-answer marker, and the answer.

    The answer is None when the gold has none in that style.

    >>> split_gold("She sells 9 eggs.\n#### 9", "gsm8k")
    ('She sells 9 eggs.', '9')
    >>> split_gold(r"So the area is $\boxed{12}$ square units.", "boxed")
    ('So the area is $12$ square units.', '12')
    >>> split_gold(" 14 ", "raw")
    ('', '14')
    """
    if style == "raw":
        return "", gold.strip() or None
    answer = rewards.extract_answer(gold, style)
    if not answer:
        return gold, None
    if style == "gsm8k":
        return gold[: gold.rfind("####")].rstrip(), answer
    return _unbox_last(gold), answer


def _unbox_last(text: str) -> str:
    r"""``text`` with its last ``\boxed{X}`` (or ``\fbox{X}``, ``\boxed X``) replaced by ``X``.

    >>> _unbox_last(r"\boxed{d} then \fbox {\frac{1}{2}}.")
    '\\boxed{d} then \\frac{1}{2}.'
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    boxes = find_boxed(text[start:]) if start >= 0 else []
    if not boxes:
        return text
    content = boxes[0]
    begin = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    while begin < len(text) and text[begin] in " \t":
        begin += 1
    braced = text.startswith("{", begin)
    begin += braced
    if not text.startswith(content, begin):
        return text
    end = begin + len(content) + braced
    return text[:start] + content + text[end:]


def _equivalent(answer: str, other: str) -> bool:
    """Whether two answers are certainly equivalent without sympy (equal canonical forms or numbers)."""
    return fast_verdict(prepare_answer(answer), prepare_answer(other)) is True


def wrong_answer(answer: str, others: Sequence[str | None], index: int) -> str:
    r"""An answer certainly different from ``answer``: the number plus one, else another row's answer.

    Another row's answer is taken only when it is not certainly equivalent (math_accuracy's fast path
    says so); one that is not a plain number is preferred, as the gold is not one either.

    >>> wrong_answer("18", [], 0), wrong_answer(r"\frac{1}{2}", [], 0)
    ('19', '1.5')
    >>> wrong_answer(r"(3, \frac{\pi}{2})", [r"(3, \frac{\pi}{2})", r"\left( 3, \dfrac{\pi}{2} \right)", "x^2"], 0)
    'x^2'
    """
    value = rewards.parse_number(answer)
    if value is not None:
        return format_number(value + 1)
    count = len(others)
    for offset in range(1, count):
        other = others[(index + offset) % count]
        if other and not _equivalent(other, answer) and rewards.parse_number(other) is None:
            return other
    for offset in range(1, count):  # no other non-numeric answer: any other one that differs
        other = others[(index + offset) % count]
        if other and not _equivalent(other, answer):
            return other
    return f"{answer}+1"


def wrong_answer_score(reward: rewards.Reward) -> float:
    """What `reward` gives a well-formed wrong answer: its `format_score` parameter where it has one
    (partial credit paid by design), else 0.

    >>> wrong_answer_score(rewards.get_reward("countdown", format_score=0.2))
    0.2
    >>> wrong_answer_score(rewards.get_reward("gsm8k_accuracy"))
    0.0
    """
    return float(reward.params.get("format_score", 0.0))


# --------------------------------------------------------------------------------------------------------
# The audit.
# --------------------------------------------------------------------------------------------------------


class _Logged(dict):
    """TRL's `log_extra(column, values)`, keeping what the rewards log: `{"math_accuracy/answer": [...]}`."""

    def __call__(self, column: str, values: list) -> None:
        self[column] = list(values)


@dataclass
class RowResult:
    """One audited row: what was written and what each reward gave it."""

    index: int
    gold: str
    """The row's gold solution (the `prompt.solution_column` value)."""
    answer: str | None
    """The gold's final answer as read by `audit.gold_answer` (None: not found)."""
    wrong: str | None = None
    """The answer written into the corrupted completion."""
    ideal: dict[str, float | None] = field(default_factory=dict)
    """Score of the ideal completion, by reward."""
    corrupted: dict[str, float | None] = field(default_factory=dict)
    """Score of the corrupted completion, by reward."""
    logged: _Logged = field(default_factory=_Logged)
    """What the rewards logged for TRL's completions table (their reading of the gold and the answers)."""
    seconds: float = 0.0
    """Time to score the ideal and corrupted completions through every reward."""
    ideal_ok: bool = False
    corrupted_ok: bool = False

    @property
    def unscorable(self) -> bool:
        """Whether some reward returned None (cannot be scored) for either completion."""
        return any(s is None for s in (*self.ideal.values(), *self.corrupted.values()))


@dataclass
class AuditReport:
    recipe: str
    rewards: list[str]
    """The rewards scored, by label (the stack's, then the evaluation reward if it is not in the stack)."""
    evaluation: str
    """The label of the evaluation reward: 1.0 is correct."""
    max_scores: dict[str, float]
    gold_answer: str
    """How the answer was read from the gold (`audit.gold_answer`)."""
    wrong_score: float = 0.0
    """The most the evaluation reward may give a corrupted completion (`wrong_answer_score`): usually 0."""
    completion_template: str = ""
    """The template the completions were written with."""
    template_source: str = ""
    """Where the template comes from: `audit.completion_template`, the prompt, or the reward's params."""
    example: tuple[int, str, str] | None = None
    """(row, ideal completion, corrupted completion) of the first row with a gold answer."""
    rows: int = 0
    ideal_full_marks: int = 0
    corrupted_zero: int = 0
    """Rows whose corrupted completion the evaluation reward scores 0 (at most `wrong_score`)."""
    no_gold_answer: int = 0
    """Rows whose gold has no final answer in the `audit.gold_answer` style: nothing to write."""
    unscorable: int = 0
    """Rows where a reward returned None."""
    failures: list[RowResult] = field(default_factory=list)
    """Every row that missed full marks, scored above 0 when corrupted, or could not be audited."""
    slowest: RowResult | None = None
    seconds: float = 0.0

    @property
    def ideal_fraction(self) -> float:
        return self.ideal_full_marks / self.rows if self.rows else 0.0

    @property
    def corrupted_fraction(self) -> float:
        return self.corrupted_zero / self.rows if self.rows else 0.0

    @property
    def corrupted_label(self) -> str:
        """What a corrupted completion must score: `corrupted scoring 0`, or at most the format score."""
        return (
            "corrupted scoring 0" if self.wrong_score <= 0 else f"corrupted scoring <= {self.wrong_score:g}"
        )

    def failed_thresholds(self, min_ideal: float, min_corrupted: float) -> list[str]:
        """One line per threshold the audit falls below (empty: it passes)."""
        failed = []
        if self.ideal_fraction < min_ideal:
            failed.append(
                f"ideal full marks {self.ideal_full_marks}/{self.rows} ({_percent(self.ideal_fraction)}) "
                f"< --min-ideal {min_ideal:g}"
            )
        if self.corrupted_fraction < min_corrupted:
            failed.append(
                f"{self.corrupted_label} {self.corrupted_zero}/{self.rows} ({_percent(self.corrupted_fraction)}) "
                f"< --min-corrupted {min_corrupted:g}"
            )
        return failed


def audit(
    recipe: Recipe,
    rows: Sequence[dict[str, Any]],
    progress: Callable[[int, int, float], None] | None = None,
    progress_every: int = 200,
) -> AuditReport:
    """Score an ideal and a corrupted completion per row through the recipe's rewards (see the module).

    A row's ideal completion gets full marks when the evaluation reward gives 1.0 and every other reward
    its `max_score`; its corrupted completion passes when the evaluation reward gives 0 (or no more than
    its `wrong_answer_score`, below 1). Rows whose gold has no answer, or where a reward returns None,
    count against both. `progress(done, total, seconds)` is called every `progress_every` rows and at
    the end.
    """
    if rows:
        check_columns(recipe, list(rows[0]))
    template, template_source = completion_template(recipe)
    _check_template(recipe, template)
    started = time.perf_counter()
    stack = RewardStack.for_recipe(recipe)
    # (label, what is called, the reward behind it): the stack's functions, as training calls them.
    functions: list[tuple[str, Callable, rewards.Reward]] = []
    for spec, function in zip(recipe.rewards, stack.functions, strict=True):
        functions.append((_label(spec.name, functions), function, function.function))
    eval_spec = recipe.evaluation_reward
    if any(eval_spec is spec for spec in recipe.rewards):
        evaluation = functions[[spec is eval_spec for spec in recipe.rewards].index(True)][0]
    else:  # an evaluation reward outside the stack
        reward = recipe.evaluation_function
        evaluation = _label(eval_spec.name, functions)
        functions.append((evaluation, reward, reward))
    for _, _, reward in functions:
        reward.warmup()  # worker processes start now, not inside the first row's timing
    report = AuditReport(
        recipe=recipe.name or recipe.source,
        rewards=[label for label, _, _ in functions],
        evaluation=evaluation,
        max_scores={label: reward.max_score for label, _, reward in functions},
        gold_answer=recipe.audit.gold_answer,
        wrong_score=wrong_answer_score(next(r for label, _, r in functions if label == evaluation)),
        completion_template=template,
        template_source=template_source,
        rows=len(rows),
    )
    spec = recipe.prompt
    parts = [split_gold(str(row[spec.solution_column]), recipe.audit.gold_answer) for row in rows]
    answers = [answer for _, answer in parts]
    for index, (row, (reasoning, answer)) in enumerate(zip(rows, parts, strict=True)):
        result = RowResult(index=index, gold=str(row[spec.solution_column]), answer=answer)
        if answer is None:
            report.no_gold_answer += 1
        else:
            result.wrong = wrong_answer(answer, answers, index)
            # Stripped: with a bare gold (no reasoning) the template's leading blank lines are noise.
            texts = [template.format(reasoning=reasoning, answer=a).strip() for a in (answer, result.wrong)]
            if report.example is None:
                report.example = (index, texts[0], texts[1])
            completions = (
                [[{"role": "assistant", "content": t}] for t in texts] if spec.conversational else texts
            )
            prompt = build_prompt(row, spec)
            columns = {key: [value, value] for key, value in row.items() if key not in _NOT_COLUMNS}
            columns["solution"] = [row[spec.solution_column]] * 2

            began = time.perf_counter()
            for label, function, _ in functions:
                ideal, corrupted = function(
                    completions, prompts=[prompt, prompt], log_extra=result.logged, **columns
                )
                result.ideal[label], result.corrupted[label] = ideal, corrupted
            result.seconds = time.perf_counter() - began
            if result.unscorable:
                report.unscorable += 1
            else:
                result.ideal_ok = all(
                    score >= (1.0 if label == evaluation else report.max_scores[label]) - TOLERANCE
                    for label, score in result.ideal.items()
                )
                wrong = result.corrupted[evaluation]
                result.corrupted_ok = wrong <= report.wrong_score + TOLERANCE and wrong < 1.0
                report.ideal_full_marks += result.ideal_ok
                report.corrupted_zero += result.corrupted_ok
            if report.slowest is None or result.seconds > report.slowest.seconds:
                report.slowest = result
        if not (result.ideal_ok and result.corrupted_ok):
            report.failures.append(result)
        done = index + 1
        if progress is not None and (done % progress_every == 0 or done == len(rows)):
            progress(done, len(rows), time.perf_counter() - started)
    report.seconds = time.perf_counter() - started
    return report


def _check_template(recipe: Recipe, template: str) -> None:
    """The completion template may use only {reasoning} and {answer} (literal braces doubled)."""
    try:
        template.format(reasoning="", answer="")
    except (KeyError, IndexError, ValueError) as err:
        raise RecipeError(
            recipe.source,
            "audit.completion_template",
            f"invalid template ({type(err).__name__}: {err}); it may use {{reasoning}} and {{answer}}, "
            "with literal braces doubled as in \\boxed{{{answer}}}.",
        ) from None


def _label(name: str, taken: list[tuple[str, Any, Any]]) -> str:
    """The reward's name, numbered when the same reward appears twice (`think_format#2`)."""
    labels = {label for label, _, _ in taken}
    label, count = name, 1
    while label in labels:
        count += 1
        label = f"{name}#{count}"
    return label


# --------------------------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------------------------


def _percent(fraction: float) -> str:
    """A measured fraction, rounded down: 1999/2000 shows as 99.9 %, never as 100.0 %."""
    return f"{math.floor(1000 * fraction + 1e-9) / 10:.1f} %"


def _scores(scores: dict[str, float | None]) -> str:
    return " ".join(f"{label}={'None' if s is None else f'{s:g}'}" for label, s in scores.items())


def one_line_head(text: str | None, width: int = 80) -> str:
    """The text on one line, cut to `width` characters with "..." at the end; "[none]" for None."""
    if text is None:
        return "[none]"
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def elide_middle(text: str, width: int = 160) -> str:
    """At most `width` characters, the middle elided: a worked solution's start and its answer both show."""
    return text if len(text) <= width else f"{text[: width // 2 - 3]} ... {text[-(width // 2 - 2) :]}"


def format_report(report: AuditReport, data: str = "", max_failures: int = 5) -> str:
    """The audit's figures, then the first failing rows with what each reward gave and read."""
    where = f" on {data}" if data else ""
    maxima = ", ".join(f"{label} (max {report.max_scores[label]:g})" for label in report.rewards)
    lines = [
        f"reward audit of recipe {report.recipe}{where}",
        f"rewards: {maxima}; evaluation reward: {report.evaluation}",
        f"completion template (from {report.template_source}): {report.completion_template!r}",
    ]
    if report.example is not None:
        row, ideal, corrupted = report.example
        lines.append(f"  example ideal completion (row {row}):     {elide_middle(repr(ideal))}")
        lines.append(f"  example corrupted completion (row {row}): {elide_middle(repr(corrupted))}")
    lines += [
        f"  rows                 {report.rows}",
        f"  ideal full marks     {report.ideal_full_marks} ({_percent(report.ideal_fraction)})",
        f"  {report.corrupted_label:<20} {report.corrupted_zero} ({_percent(report.corrupted_fraction)})",
        f"  unscorable (None)    {report.unscorable}",
        f"  no gold answer       {report.no_gold_answer}",
    ]
    if report.slowest is not None:
        slow = report.slowest
        lines.append(
            f"  slowest sample       {1000 * slow.seconds:.1f} ms (row {slow.index}, answer: {one_line_head(slow.answer)})"
        )
    lines.append(f"  total time           {report.seconds:.1f} s")
    if report.failures:
        shown = report.failures[:max_failures]
        lines.append(f"failing rows (first {len(shown)} of {len(report.failures)}):")
        for row in shown:
            if row.answer is None:
                lines.append(
                    f"  row {row.index}: no answer in the gold with audit.gold_answer={report.gold_answer}: "
                    f"{one_line_head(row.gold, 60)}"
                )
                continue
            lines.append(f"  row {row.index}: gold answer: {one_line_head(row.answer)}")
            lines.append(f"    ideal:                {_scores(row.ideal)}")
            lines.append(
                f"    corrupted:            {_scores(row.corrupted)} (answer written: {one_line_head(row.wrong, 40)})"
            )
            for column, values in row.logged.items():
                lines.append(f"    {column}: {' / '.join(one_line_head(str(v), 60) for v in values)}")
    return "\n".join(lines)
