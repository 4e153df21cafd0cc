"""Benchmark dynamic sampling: the same recipe, seed and wall-clock budget, with and without it.

Runs ``scripts/train.py`` twice in subprocesses (``outputs/bench-sampling-off/`` and ``-on/``), each
stopped by ``--time-limit`` after ``--minutes`` of training (or at the recipe's ``max_steps``), then
prints side by side: optimizer steps done, the share of steps whose gradient was exactly zero, the
completions generated, held-out greedy accuracy after training with its 95 % interval, and the paired
difference on the same held-out problems (95 % interval, normal approximation). The table is also
written as JSON to ``--output``.

Usage: ``python scripts/bench_sampling.py [--config default] [--minutes 8] [--max-rounds 4]
[--eval-samples 200] [--report-only] [key.path=value ...]``. The recipe's ``max_steps`` still applies: raise
it (``trainer.max_steps=1000``) so that both runs are bound by the time limit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from grpo_recipes.evaluation.metrics import paired_difference

REPO = Path(__file__).resolve().parents[1]


def run(name: str, args: argparse.Namespace, overrides: list[str]) -> Path:
    out = args.output_dir / f"bench-sampling-{name}"
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "--config",
        args.config,
        "--no-resume",
        "--time-limit",
        str(args.minutes),
        f"trainer.output_dir={out}",
        f"evaluation.max_samples={args.eval_samples}",
        *args.overrides,
        *overrides,
    ]
    print(f"\n=== dynamic sampling {name}: {' '.join(command[2:])}", flush=True)
    subprocess.run(command, cwd=REPO, check=True)
    return out


def measure(out: Path) -> dict:
    history = json.loads((out / "log_history.json").read_text())
    steps = [h for h in history if "grad_norm" in h]
    trainer = yaml.safe_load((out / "resolved_recipe.yaml").read_text())["trainer"]
    if any("groups_generated" in h for h in steps):
        generated = round(sum(h["groups_generated"] for h in steps)) * trainer.get("num_generations", 8)
    else:  # one process: a step generates its whole batch
        generated = (
            len(steps)
            * trainer.get("per_device_train_batch_size", 8)
            * trainer.get("gradient_accumulation_steps", 1)
        )
    after = json.loads((out / "eval_after.json").read_text())
    return {
        "steps": len(steps),
        "zero_gradient_steps": sum(h["grad_norm"] == 0 for h in steps) / max(1, len(steps)),
        "completions_generated": generated,
        "accuracy_after": after["accuracy"],
        "ci_after": [after["ci_low"], after["ci_high"]],
        "accuracy_before": json.loads((out / "eval_before.json").read_text())["accuracy"],
        "correct": after["correct_by_problem"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--minutes", type=float, default=8.0, help="training wall-clock budget per run")
    parser.add_argument("--max-rounds", type=int, default=4)
    parser.add_argument("--eval-samples", type=int, default=200)
    parser.add_argument("--output", default=str(REPO / "outputs" / "bench_sampling.json"))
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=REPO / "outputs",
        help="where the two runs' folders go (default: outputs/)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="print the table of the last two runs again"
    )
    parser.add_argument("overrides", nargs="*", help="recipe overrides for both runs, key.path=value")
    args = parser.parse_args()

    settings = {
        "off": ["sampling.dynamic=false"],
        "on": ["sampling.dynamic=true", f"sampling.max_rounds={args.max_rounds}"],
    }
    results = {
        name: measure(
            args.output_dir / f"bench-sampling-{name}" if args.report_only else run(name, args, overrides)
        )
        for name, overrides in settings.items()
    }
    paired = paired_difference(results["on"]["correct"], results["off"]["correct"])
    difference = (paired["difference"], paired["low"], paired["high"])
    print(f"\ndynamic sampling, {args.config}, {args.minutes:g} min of training each, same seed")
    print(f"{'':34}{'off':>16}{'on':>16}")
    rows = [
        ("optimizer steps", "steps", "{:d}"),
        ("steps with zero gradient", "zero_gradient_steps", "{:.0%}"),
        ("completions generated", "completions_generated", "{:d}"),
        ("held-out accuracy before", "accuracy_before", "{:.1%}"),
        ("held-out accuracy after", "accuracy_after", "{:.1%}"),
    ]
    for label, key, form in rows:
        print(f"{label:34}{form.format(results['off'][key]):>16}{form.format(results['on'][key]):>16}")
    low_high = [f"[{results[k]['ci_after'][0]:.1%}, {results[k]['ci_after'][1]:.1%}]" for k in ("off", "on")]
    print(f"{'  95 % interval':34}{low_high[0]:>16}{low_high[1]:>16}")
    print(f"paired difference on - off: {difference[0]:+.1%} [{difference[1]:+.1%}, {difference[2]:+.1%}]")
    for run_results in results.values():
        run_results.pop("correct")
    Path(args.output).write_text(json.dumps({**results, "paired_difference": difference}, indent=2) + "\n")


if __name__ == "__main__":
    main()
