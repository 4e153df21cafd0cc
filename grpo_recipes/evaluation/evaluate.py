"""Evaluation: generate for held-out problems, score with the recipe's own rewards, report pass@k and maj@k.

The steps, top to bottom:
  1. `eval_rows`: the recipe's held-out split, or a data file, with the recipe's prompts (`data.py`).
  2. generation (`generate.py`): k samples per problem, from vLLM when installed, else transformers.
  3. `score_samples`: each sample's score from every recipe reward, the evaluation reward's verdict
     (`correct`: full marks), the answer it reads, and the vote of majority voting (answers the reward
     counts as one answer share a vote).
  4. `summarize` (`metrics.py`): pass@1, pass@k, maj@k, lengths, truncation, well-formed answers.
  5. `write_evaluation`: samples.jsonl, metrics.json and report.md in one folder.

Training's before/after evaluation (`greedy_accuracy`) and `make compare` run the same scoring and metrics.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..recipe import Recipe, RecipeError
from .generate import Generation, SamplingSettings
from .metrics import group_by_problem, summarize, wilson_interval
from .report import format_change, markdown_table

SAMPLES_FILE, METRICS_FILE, REPORT_FILE = "samples.jsonl", "metrics.json", "report.md"
#: Completions scored per reward call: bounds memory on long evaluations.
SCORE_CHUNK = 512

#: Pure functions that lived here and now live in `metrics`; importing them from here still works, with a
#: DeprecationWarning.
MOVED_TO_METRICS = ("compare", "group_by_problem", "per_problem", "summarize")


def __getattr__(name: str):
    if name in MOVED_TO_METRICS:
        import warnings

        from . import metrics

        warnings.warn(
            f"{name} moved to grpo_recipes.evaluation.metrics; import it from there.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(metrics, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EvalResult", "greedy_accuracy", "score_samples", "summarize", "wilson_interval"]


# --------------------------------------------------------------------------------------------------------
# 1. Problems.
# --------------------------------------------------------------------------------------------------------


def eval_rows(recipe: Recipe, data_path: str | None = None, limit: int | None = None):
    """The problems to evaluate, with `prompt` and `solution` columns: a data file's rows or the held-out split.

    A data file gets the recipe's prompt and its columns are checked as a held-out file's are.
    """
    from ..data import DataFileError, load_splits, read_data_file, with_prompts
    from ..recipe import check_columns

    if data_path is not None:
        try:
            rows = read_data_file(data_path)
        except DataFileError as err:
            raise RecipeError(recipe.source, "--data", str(err)) from None
        check_columns(recipe, rows.column_names, held_out=True)
        rows = with_prompts(rows, recipe.prompt)
    else:
        rows = load_splits(recipe).eval
        if rows is None:
            raise RecipeError(
                recipe.source, "evaluation.enabled", "the recipe has no held-out split; pass a data file"
            )
    return rows.select(range(min(limit, len(rows)))) if limit is not None else rows


# --------------------------------------------------------------------------------------------------------
# 3. Scoring.
# --------------------------------------------------------------------------------------------------------


def score_samples(
    recipe: Recipe,
    rows: Sequence[dict[str, Any]],
    generations: Sequence[Sequence[Generation]],
    problems: Sequence[int],
) -> list[dict[str, Any]]:
    """One record per sample (the lines of samples.jsonl), scored as GRPOTrainer scores completions.

    `rows[i]` (with `prompt`, `solution` and the dataset's other columns) is problem `problems[i]` and
    `generations[i]` its samples. `correct` is 1 when the evaluation reward gives full marks.
    """
    judge = recipe.evaluation_function
    functions = dict(zip([spec.name for spec in recipe.rewards], recipe.reward_functions, strict=True))
    flat = [(i, s, g) for i, samples in enumerate(generations) for s, g in enumerate(samples)]
    records: list[dict[str, Any]] = []
    for begin in range(0, len(flat), SCORE_CHUNK):
        chunk = flat[begin : begin + SCORE_CHUNK]
        chunk_rows = [rows[i] for i, _, _ in chunk]
        chat = not isinstance(chunk_rows[0]["prompt"], str)
        # A tool rollout is scored on its messages (the rewards read the last assistant turn), as in training.
        completions = [
            g.messages
            if g.messages is not None
            else [{"role": "assistant", "content": g.text}]
            if chat
            else g.text
            for _, _, g in chunk
        ]
        columns = {key: [row[key] for row in chunk_rows] for key in chunk_rows[0] if key != "prompt"}
        if any(g.environment is not None for _, _, g in chunk):
            columns["environments"] = [g.environment for _, _, g in chunk]
        prompts = [row["prompt"] for row in chunk_rows]
        scores = {name: fn(completions, prompts=prompts, **columns) for name, fn in functions.items()}
        # The evaluation reward is usually one of the recipe's rewards (the same instance): score once.
        judged = [name for name, fn in functions.items() if fn is judge]
        verdicts = scores[judged[0]] if judged else judge(completions, prompts=prompts, **columns)
        for index, ((i, s, generation), row, verdict) in enumerate(
            zip(chunk, chunk_rows, verdicts, strict=True)
        ):
            records.append(
                {
                    "problem": problems[i],
                    "sample": s,
                    "prompt": row["prompt"],
                    "completion": generation.text,
                    "answer": judge.final_answer(_answer_text(generation)),
                    "gold": row["solution"]
                    if isinstance(row["solution"], (str, int, float))
                    else str(row["solution"]),
                    "correct": int(verdict is not None and verdict >= 1.0),
                    "rewards": {name: values[index] for name, values in scores.items()},
                    "tokens": generation.tokens,
                    "truncated": generation.truncated,
                    **(
                        {
                            "messages": generation.messages,
                            "tool_calls": generation.tool_calls,
                            "tool_failures": generation.tool_failures,
                        }
                        if generation.messages is not None
                        else {}
                    ),
                }
            )
    _add_votes(records, judge)
    return records


def _answer_text(generation: Generation) -> str:
    """The text a final answer is read from: a tool rollout's last assistant turn, else the completion."""
    if generation.messages is None:
        return generation.text
    from rewards.base import completion_text

    return completion_text(generation.messages)


def _add_votes(records: list[dict[str, Any]], judge) -> None:
    """Set each record's `vote`: the first-seen answer of its problem that the reward counts as the same answer."""
    by_problem: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        by_problem.setdefault(record["problem"], []).append(record)
    for samples in by_problem.values():
        leaders: list[str] = []
        chosen: dict[str, str] = {}
        for answer in dict.fromkeys(r["answer"] for r in samples if r["answer"] is not None):
            same = judge.same_answers([(answer, leader) for leader in leaders]) if leaders else []
            chosen[answer] = next((leader for leader, hit in zip(leaders, same, strict=True) if hit), answer)
            if chosen[answer] == answer:
                leaders.append(answer)
        for record in samples:
            record["vote"] = chosen.get(record["answer"]) if record["answer"] is not None else None


# --------------------------------------------------------------------------------------------------------
# 5. Files.
# --------------------------------------------------------------------------------------------------------


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """The records of a samples file (samples.jsonl's format)."""
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_samples(path: str | Path, samples: Sequence[dict[str, Any]]) -> None:
    """`samples` as JSON lines, by problem then sample; written to a side file then renamed, so a reader
    (another process, or a person after a crash) sees the whole file or none."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    ordered = sorted(samples, key=lambda r: (r["problem"], r.get("sample", 0)))
    partial.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in ordered))
    partial.replace(path)


def write_evaluation(
    out: Path, samples: list[dict[str, Any]], metrics: dict[str, Any], about: dict[str, Any]
) -> None:
    """samples.jsonl, metrics.json (with `about`: model, data, settings) and report.md in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    write_samples(out / SAMPLES_FILE, samples)
    (out / METRICS_FILE).write_text(json.dumps({**metrics, **about}, indent=2) + "\n")
    (out / REPORT_FILE).write_text(evaluation_report(samples, metrics, about))


def metric_names(metrics: dict[str, Any]) -> list[str]:
    """The pass@k and maj@k keys of a metrics dict, in reading order (pass@1, pass@2, ..., maj@1, ...)."""
    keys = [key for key in metrics if "@" in key and not key.endswith("_interval")]
    return sorted(keys, key=lambda key: (key.split("@")[0] != "pass", int(key.split("@")[1])))


def evaluation_report(samples: list[dict[str, Any]], metrics: dict[str, Any], about: dict[str, Any]) -> str:
    """report.md: what was evaluated, the metrics table, and the first problems' samples."""
    low, high = metrics.get("pass@1_interval", (0.0, 1.0))
    lines = [
        f"# Evaluation of `{about.get('model')}`",
        "",
        f"- recipe: `{about.get('recipe')}`; problems: {about.get('data')} ({metrics['problems']})",
        f"- sampling: {about.get('sampling')}, at most {about.get('max_new_tokens')} new tokens; "
        f"generated with {about.get('backend')} in {about.get('seconds', 0):.0f} s",
        f"- evaluation reward: `{about.get('reward')}` (correct = full marks)",
        "",
    ]
    rows = [
        [
            key,
            f"{100 * metrics[key]:.1f} %"
            + (f" [{100 * low:.1f}, {100 * high:.1f}]" if key == "pass@1" else ""),
        ]
        for key in metric_names(metrics)
    ]
    rows += [
        ["mean completion length", f"{metrics['mean_completion_tokens']:.1f} tokens"],
        ["truncated", f"{100 * metrics['truncated']:.1f} %"],
        ["well-formed answer", f"{100 * metrics['well_formed']:.1f} %"],
    ]
    rows += tool_rows(metrics)
    lines += markdown_table(["metric", "value"], rows)
    lines += [
        "",
        f"Every sample is in `{SAMPLES_FILE}`; these figures are in `{METRICS_FILE}`.",
        "",
        "## First problems",
    ]
    for group in group_by_problem(samples)[:3]:
        first = group[0]
        lines += ["", f"### Problem {first['problem']} (gold: `{str(first['gold'])[-80:]}`)", ""]
        for record in group[:2]:
            verdict = "correct" if record["correct"] else "wrong"
            calls = (
                f", {record['tool_calls']} tool call{'s' * (record['tool_calls'] != 1)}"
                f" ({record['tool_failures']} failed)"
                if "tool_calls" in record
                else ""
            )
            text = record["completion"].strip().replace("\n", " ")[:300]
            lines.append(
                f"- sample {record['sample']}, {verdict}, answer `{record['answer']}`{calls}: {text}"
            )
    return "\n".join(lines) + "\n"


def tool_rows(metrics: dict[str, Any]) -> list[list[str]]:
    """The tool figures of a metrics dict as report rows; none for a recipe without tools.

    >>> tool_rows({"tool_calls": 5, "tool_failures": 1, "mean_tool_calls": 1.25, "tool_call_rate": 0.75,
    ...            "tool_failure_rate": 0.2})
    [['tool calls per completion', '1.25'], ['tool-call rate', '75.0 % (completions with a call)'], ['failed tool calls', '20.0 % (1 of 5)']]
    >>> tool_rows({"pass@1": 0.5})
    []
    """
    if "tool_calls" not in metrics:
        return []
    calls, failures, rate = metrics["tool_calls"], metrics["tool_failures"], metrics["tool_failure_rate"]
    return [
        ["tool calls per completion", f"{metrics['mean_tool_calls']:.2f}"],
        ["tool-call rate", f"{100 * metrics['tool_call_rate']:.1f} % (completions with a call)"],
        ["failed tool calls", f"{100 * rate:.1f} % ({failures} of {calls})" if calls else "no calls"],
    ]


# --------------------------------------------------------------------------------------------------------
# The whole evaluation of a saved model (scripts/evaluate.py), split across launched processes.
# --------------------------------------------------------------------------------------------------------


@dataclass
class Launch:
    """This process's place in a multi-process launch (`accelerate launch`, torchrun): read from the environment."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    run_id: str = "single"

    @classmethod
    def from_environment(cls) -> Launch:
        env = os.environ
        world = int(env.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        run = f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
        return cls(int(env.get("RANK", "0")), world, int(env.get("LOCAL_RANK", "0")), run)


def evaluate_model(
    recipe: Recipe,
    model: str,
    settings: SamplingSettings,
    out: Path,
    data_path: str | None = None,
    limit: int | None = None,
    backend: str = "auto",
    log: Callable[[str], None] = print,
    launch: Launch | None = None,
) -> dict[str, Any] | None:
    """Evaluate `model` and write its folder; returns metrics.json's content (None on processes other than 0).

    Under a launch of several processes each generates for every world-th problem on its own device; the
    shards meet in `out/.shards/` and process 0 writes the folder (no collective communication, so that each
    process may run its own vLLM engine).
    """
    from ..models import load_tokenizer
    from .generate import (
        generate_transformers,
        generate_vllm,
        load_eval_model,
        model_folder,
        prompt_token_ids,
        vllm_available,
    )

    launch = launch or Launch.from_environment()
    if recipe.uses_tools and backend != "transformers":
        log("tool recipe: evaluated with transformers (multi-turn rollouts do not run on vLLM here)")
        backend = "transformers"
    if backend == "auto":
        backend = "vllm" if vllm_available() else "transformers"
    rows = eval_rows(recipe, data_path, limit)
    problems = list(range(launch.rank, len(rows), launch.world))
    mine = rows.select(problems)
    device = _device(launch)
    log(
        f"evaluating {model} on {len(problems)} of {len(rows)} problems "
        f"({settings.describe()}, {backend}, process {launch.rank} of {launch.world})"
    )
    start = time.time()
    chat_kwargs = recipe.trainer.get("chat_template_kwargs") or {}
    if recipe.uses_tools:
        tokenizer, policy = load_eval_model(model, recipe.model, device)
        policy.eval()
        generations = tool_generations(policy, tokenizer, mine.to_list(), recipe, settings)
    elif backend == "vllm":
        with model_folder(model, recipe.model) as folder:
            tokenizer = load_tokenizer(replace(recipe.model, name_or_path=folder))
            ids = prompt_token_ids(mine["prompt"], tokenizer, chat_kwargs)
            generations = (
                generate_vllm(folder, recipe.model, ids, settings, device=_engine_gpu(launch)) if ids else []
            )
    else:
        tokenizer, policy = load_eval_model(model, recipe.model, device)
        policy.eval()
        ids = prompt_token_ids(mine["prompt"], tokenizer, chat_kwargs)
        generations = generate_transformers(policy, tokenizer, ids, settings, recipe.evaluation.batch_size)
    seconds = time.time() - start
    samples = score_samples(recipe, mine.to_list(), generations, problems)
    if launch.world > 1:
        samples = gather_samples_through_files(out, launch, samples)
        if samples is None:
            return None
    judge = recipe.evaluation_function
    metrics = summarize(samples, votes=judge.reads_answers)
    about = {
        "model": model,
        "recipe": recipe.source,
        "data": data_path or "held-out split",
        "reward": judge.name,
        "sampling": settings.describe(),
        "settings": asdict(settings),
        "max_new_tokens": settings.max_new_tokens,
        "backend": backend,
        "processes": launch.world,
        "seconds": round(seconds, 1),
    }
    write_evaluation(out, samples, metrics, about)
    return {**metrics, **about}


def _device(launch: Launch) -> str:
    import torch

    return f"cuda:{launch.local_rank}" if torch.cuda.is_available() else "cpu"


def _engine_gpu(launch: Launch) -> str | None:
    """The one GPU a launched process's vLLM engine may see (its local rank's), or None when not launched."""
    if launch.world == 1:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(launch.local_rank)]
    return devices[launch.local_rank % len(devices)]


def gather_samples_through_files(
    out: Path, launch: Launch, samples: list[dict[str, Any]], poll: float = 1.0
) -> list[dict[str, Any]] | None:
    """Write this process's samples; on process 0, wait for every shard and return them all."""
    folder = out / ".shards" / launch.run_id
    folder.mkdir(parents=True, exist_ok=True)
    write_samples(folder / f"rank{launch.rank}.jsonl", samples)  # complete or absent: never half-written
    if launch.rank != 0:
        return None
    shards = [folder / f"rank{rank}.jsonl" for rank in range(launch.world)]
    while not all(path.is_file() for path in shards):
        time.sleep(poll)
    gathered = [record for path in shards for record in read_samples(path)]
    for path in shards:
        path.unlink()
    folder.rmdir()
    return gathered


# --------------------------------------------------------------------------------------------------------
# Comparing two evaluations on the same problems.
# --------------------------------------------------------------------------------------------------------


def comparison_table(result: dict[str, Any], base_name: str = "base", model_name: str = "model") -> str:
    """The comparison as a text table, differences in points with their paired 95 % intervals."""
    width = max([9, *(len(row["metric"]) for row in result["metrics"])])
    lines = [
        f"{'metric':<{width}} {base_name:>12} {model_name:>12} {'difference (paired 95 % interval)':>36}",
    ]
    for row in result["metrics"]:
        lines.append(
            f"{row['metric']:<{width}} {100 * row['base']:>11.1f}% {100 * row['model']:>11.1f}% "
            f"{format_change(row['difference'], row['low'], row['high']):>36}"
        )
    lines.append(
        f"problems solved by {model_name} only: {result['solved_by_model_only']}, by {base_name} only: "
        f"{result['solved_by_base_only']}, by both: {result['solved_by_both']} (of {result['problems']})"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------
# Training's before/after: greedy, on the model in memory, every process taking its share.
# --------------------------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    correct: int
    total: int
    accuracy: float
    ci_low: float
    ci_high: float
    seconds: float
    examples: list[dict[str, Any]] = field(default_factory=list)
    correct_by_problem: list[bool] = field(default_factory=list)
    """Whether each held-out problem, in order, was answered right: for paired comparisons of two runs."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """`summarize`'s figures (the same as `make eval`'s metrics.json for a greedy evaluation)."""
    device: str = ""
    """Where the model generated (its first parameter's device, as `cuda:0`): the GPU check reads it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def greedy_accuracy(
    model, tokenizer, dataset, recipe: Recipe, log=print, accelerator=None, samples_path: Path | None = None
) -> EvalResult:
    """Generate greedily for every row of `dataset` (with `prompt` and `solution` columns) and score it.

    A row is correct when the recipe's evaluation reward gives it full marks (as in `make eval`). With an
    `accelerator` (several processes), each process generates for its share of the rows on its own device
    and every process returns the gathered result. Under ZeRO-3 the weights are gathered for generation;
    under FSDP every process steps through generation together (`synced_gpus`) on equal shares.
    `samples_path`: where the main process writes the samples (samples.jsonl's format).
    """
    from .generate import generate_transformers, prompt_token_ids

    settings = SamplingSettings(
        max_new_tokens=recipe.evaluation.max_new_tokens or recipe.trainer.get("max_completion_length", 256)
    )
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    fsdp = accelerator is not None and getattr(accelerator.state, "fsdp_plugin", None) is not None
    share = list(range(rank, len(dataset), world))
    if fsdp:  # lock-step generation needs the same number of batches everywhere: pad with a repeat
        share += share[-1:] * (math.ceil(len(dataset) / world) - len(share))
    start = time.time()
    rows = dataset.select(share).to_list()
    ids = prompt_token_ids(
        [row["prompt"] for row in rows], tokenizer, recipe.trainer.get("chat_template_kwargs")
    )
    with _generation_model(model, accelerator) as policy:
        device = str(next(policy.parameters()).device)
        if recipe.uses_tools:
            generations = tool_generations(
                policy, tokenizer, rows, recipe, settings, progress=rank == 0, synced_gpus=fsdp
            )
        else:
            generations = generate_transformers(
                policy,
                tokenizer,
                ids,
                settings,
                recipe.evaluation.batch_size,
                progress=rank == 0,
                synced_gpus=fsdp,
            )
    samples = score_samples(recipe, rows, generations, share)
    if world > 1:
        from accelerate.utils import gather_object

        samples = gather_object(samples)
    samples = list({r["problem"]: r for r in samples}.values())  # drops the FSDP pads
    metrics = summarize(samples, votes=recipe.evaluation_function.reads_answers)
    by_problem = [bool(g[0]["correct"]) for g in group_by_problem(samples)]
    correct, total = sum(by_problem), len(by_problem)
    log(f"  evaluated {total} problems ({len(set(share))} on this process): {correct} correct")
    if samples_path is not None and rank == 0:
        write_samples(samples_path, samples)
    examples = [
        {"completion": r["completion"], "solution": str(r["gold"]), "correct": bool(r["correct"])}
        for r in sorted(samples, key=lambda r: r["problem"])[:8]
    ]
    low, high = wilson_interval(correct, total)
    return EvalResult(
        correct,
        total,
        correct / max(total, 1),
        low,
        high,
        time.time() - start,
        examples,
        by_problem,
        metrics,
        device,
    )


def tool_generations(
    model, tokenizer, rows, recipe: Recipe, settings: SamplingSettings, **kwargs
) -> list[list[Generation]]:
    """Greedy multi-turn rollouts of a tool recipe, with its tools and environment, as training makes them."""
    from ..toolset import Toolset
    from .generate import generate_with_tools

    return generate_with_tools(
        model,
        tokenizer,
        [row["prompt"] for row in rows],
        rows,
        Toolset.for_recipe(recipe),
        settings,
        max_iterations=max_tool_iterations(recipe),
        batch_size=recipe.evaluation.batch_size,
        chat_template_kwargs=recipe.trainer.get("chat_template_kwargs"),
        **kwargs,
    )


def max_tool_iterations(recipe: Recipe) -> int:
    """Rounds of tool calls a rollout may make: the trainer's max_tool_calling_iterations (TRL: unbounded when
    unset; evaluation then stops after 8)."""
    value = recipe.trainer.get("max_tool_calling_iterations")
    return int(value) if value is not None else 8


@contextlib.contextmanager
def _generation_model(model, accelerator):
    """The model to call `generate` on, in eval mode: unwrapped, with ZeRO-3 weights gathered (TRL's helper)."""
    if accelerator is None:
        context = contextlib.nullcontext(model)
    else:
        from trl.models.utils import unwrap_model_for_generation

        context = unwrap_model_for_generation(model, accelerator)
    with context as policy:
        was_training = policy.training
        policy.eval()
        try:
            yield policy
        finally:
            policy.train(was_training)
