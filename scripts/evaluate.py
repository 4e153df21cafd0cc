"""Evaluate a model on a recipe's problems: pass@1, pass@k, maj@k, lengths; samples.jsonl, metrics.json, report.md.

    python scripts/evaluate.py --config default --model outputs/default
    python scripts/evaluate.py --config default --model outputs/default --samples 8 --temperature 0.5
    python scripts/evaluate.py --config gsm8k --model outputs/gsm8k --data ../shared/data/gsm8k/test.jsonl
    python scripts/evaluate.py --config default --model outputs/default --base models/SmolLM2-135M-Instruct
    accelerate launch --num_processes 8 scripts/evaluate.py --config gsm8k --model outputs/gsm8k --samples 16

`--model` is a Hub id, a local folder, a training output or checkpoint, or a LoRA adapter (merged into its
base); without it, the recipe's own model. `--base` also evaluates a second model on the same problems and
prints the paired comparison (make compare).
"""

import argparse
import json
import re
import sys
from pathlib import Path

from grpo_recipes.cli import EXIT_BAD_INPUT, integer_at_least, number_in, recipe_parser, run_with_recipe


def slug(model: str) -> str:
    """A folder name for a model: its last two path parts (`default-checkpoint-75`, `Qwen-Qwen2.5-1.5B`)."""
    parts = [p for p in Path(model).parts if p not in (".", "..", "/")][-2:]
    return re.sub(r"[^\w.-]+", "-", "-".join(parts)) or "model"


def main(argv: list[str] | None = None) -> int:
    parser = recipe_parser(__doc__.strip().splitlines()[0])
    parser.add_argument("--model", help="the model to evaluate (default: the recipe's model.name_or_path)")
    parser.add_argument("--base", help="also evaluate this model on the same problems and compare (paired)")
    parser.add_argument(
        "--samples", type=integer_at_least(1), default=1, help="samples per problem (default 1)"
    )
    parser.add_argument(
        "--temperature",
        type=number_in(0),
        help="sampling temperature (default: 0, greedy, for one sample; the recipe's trainer.temperature "
        "or 1.0 for several)",
    )
    parser.add_argument(
        "--top-p",
        type=number_in(0, 1, above_low=True),
        default=1.0,
        help="nucleus sampling (default 1.0: off)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=integer_at_least(1),
        help="default: evaluation.max_new_tokens, else trainer.max_completion_length",
    )
    parser.add_argument("--limit", type=integer_at_least(1), help="evaluate only the first N problems")
    parser.add_argument("--data", help="a .jsonl/.json/.parquet/.csv file instead of the held-out split")
    parser.add_argument(
        "--output-dir", help="where the files go (default outputs/eval/<recipe>/<model>-<sampling>)"
    )
    parser.add_argument("--backend", choices=("auto", "vllm", "transformers"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help=argparse.SUPPRESS)  # kept for old commands: metrics.json's copy
    args = parser.parse_args(argv)
    status = 0

    def body(recipe):
        nonlocal status
        from grpo_recipes.evaluation.evaluate import comparison_table, evaluate_model, read_samples
        from grpo_recipes.evaluation.generate import SamplingSettings
        from grpo_recipes.evaluation.metrics import compare

        temperature = args.temperature
        if temperature is None:
            temperature = 0.0 if args.samples == 1 else float(recipe.trainer.get("temperature", 1.0))
        if args.samples > 1 and temperature == 0:
            print(
                "error: --samples > 1 needs --temperature > 0 (greedy samples are all the same)",
                file=sys.stderr,
            )
            status = EXIT_BAD_INPUT
            return
        settings = SamplingSettings(
            samples=args.samples,
            temperature=temperature,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens
            or recipe.evaluation.max_new_tokens
            or int(recipe.trainer.get("max_completion_length", 256)),
            seed=args.seed,
        )
        kind = "greedy" if settings.greedy else f"k{settings.samples}-t{settings.temperature:g}"
        # Both models are found before either is evaluated: a mistyped folder is one line here, not a Hub
        # error after the other model's whole evaluation.
        from grpo_recipes.recipe import model_location

        for flag in ("--model", "--base"):
            if getattr(args, flag[2:]):
                setattr(args, flag[2:], model_location(getattr(args, flag[2:]), recipe.source, flag, None))
        model = args.model or recipe.model.name_or_path
        root = Path(args.output_dir) if args.output_dir else Path("outputs") / "eval" / recipe.name
        models = {"model": model} if not args.base else {"base": args.base, "model": model}
        results = {}
        for role, name in models.items():
            out = root / role if args.output_dir and args.base else root
            if not args.output_dir:
                out = root / f"{slug(name)}-{kind}"
            metrics = evaluate_model(recipe, name, settings, out, args.data, args.limit, args.backend)
            if metrics is None:  # another process of a launch: process 0 reports
                return
            results[role] = out
            print(summary_line(name, metrics))
            print(f"  files: {out}/samples.jsonl, metrics.json, report.md")
            if args.output:
                Path(args.output).write_text(json.dumps(metrics, indent=2) + "\n")
        if args.base:
            samples = {role: read_samples(out / "samples.jsonl") for role, out in results.items()}
            result = compare(
                samples["base"], samples["model"], votes=recipe.evaluation_function.reads_answers
            )
            print(comparison_table(result, "base", "model"))
            target = results["model"] / "comparison.json"
            target.write_text(json.dumps({"base": args.base, "model": model, **result}, indent=2) + "\n")
            print(f"  comparison: {target}")

    return run_with_recipe(args, body) or status


def summary_line(model: str, metrics: dict) -> str:
    keys = [k for k in metrics if k.startswith(("pass@", "maj@")) and not k.endswith("_interval")]
    low, high = metrics["pass@1_interval"]
    figures = ", ".join(
        f"{key} {100 * metrics[key]:.1f} %"
        + (f" [{100 * low:.1f}, {100 * high:.1f}]" if key == "pass@1" else "")
        for key in keys
    )
    tools = (
        f"; tool-call rate {100 * metrics['tool_call_rate']:.0f} %, {metrics['mean_tool_calls']:.2f} calls "
        f"per completion, {metrics['tool_failures']} of {metrics['tool_calls']} calls failed"
        if "tool_calls" in metrics
        else ""
    )
    return (
        f"{model}: {figures} on {metrics['problems']} problems ({metrics['sampling']}); "
        f"well-formed {100 * metrics['well_formed']:.0f} %, truncated {100 * metrics['truncated']:.0f} %, "
        f"mean length {metrics['mean_completion_tokens']:.1f} tokens{tools}"
    )


if __name__ == "__main__":
    sys.exit(main())
