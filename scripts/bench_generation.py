"""Benchmark generation: transformers ``generate`` against vLLM on the same prompts; optionally training.

Part 1 (unless ``--no-generation``): the recipe's model (``--config``, default ``recipes/default.yaml``)
generates for the recipe's first ``--prompts`` held-out prompts, built by the project's own prompt builder
and rendered with the tokenizer's chat template as ``grpo_recipes.evaluation.evaluate`` does. Every back-end gets the
same prompt tokens and sampling settings (``--temperature``, top-p 1, no top-k) and generates exactly
``--max-new-tokens`` tokens per prompt (end-of-sequence ignored), all prompts in one batch, ``--repeats``
timed runs after one untimed warm-up:

* transformers ``generate`` in the recipe model's dtype (``min_new_tokens=max_new_tokens``);
* ``vllm.LLM`` in each dtype of ``--vllm-dtypes`` (``SamplingParams(min_tokens=..., ignore_eos=True)``),
  built as TRL's colocate mode builds it (``external_launcher``, one process); on a CPU with
  ``enforce_eager=True`` and ``--vllm-memory`` 0.2 (vLLM's CPU backend reserves that share of host memory);
  ``--max-model-len`` 1024.

Each measurement runs in a process of its own (this script with the hidden ``--worker`` option), so one
vLLM engine's memory is freed before the next starts. The script prints a table (tokens, seconds, tokens/s,
ratio to transformers) and writes it as JSON to ``--output``.

Part 2 (``--train-steps N``): the recipe end to end, with transformers generation and with vLLM in colocate
mode (``--colocate-memory``, default 0.3, on a CPU only the cap of a KV cache sized to the run's sequences;
``trainer.vllm_max_model_length=512``), for a LoRA recipe once with
each weight sync (``vllm-merged``: every weight, each step; ``vllm-adapter``: the adapter alone,
``grpo_recipes.launch.vllm_adapter``),
same seed and steps, each through ``scripts/train.py`` in a subprocess
writing ``bench-train-<backend>-round<R>/`` beside ``--output`` (``outputs/`` by default). It prints seconds per step (steps 2..N, the first step's
one-off costs apart), seconds and megabytes per sync, the
mean reward and held-out accuracy before and after, side by side (``--eval-samples N`` sets
``evaluation.max_samples``). ``--train-rounds R`` runs the back-ends R times, round-robin, and prints each
one's median seconds a step and its ratio to transformers generation's in the same round. Then the bytes a sync would move for the GPU recipes' models, from their shapes.

Usage: ``python scripts/bench_generation.py [--config RECIPE] [--prompts 8] [--max-new-tokens 128]
[--repeats 2] [--vllm-dtypes float32,bfloat16] [--train-steps N [--train-rounds R] [--eval-samples M]]
[--no-generation]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from grpo_recipes.evaluation.report import reward_series
from grpo_recipes.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]

CPU_VLLM_MEMORY = 0.2  # on a CPU: the share of host memory vLLM's CPU backend reserves
GPU_VLLM_MEMORY = 0.3
# Training (colocate): on a CPU vLLM subtracts the process's own memory use (policy included) from its share,
# so it takes more than generation alone; 0.3 works for the default recipe (as on a GPU, where it leaves room).
COLOCATE_MEMORY = 0.3


def log(message: str) -> None:
    print(message, flush=True)


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# --------------------------------------------------------------------------------------------------------
# Part 1: generation throughput. The worker side runs in its own process.
# --------------------------------------------------------------------------------------------------------


def build_prompts(recipe, tokenizer, count: int) -> list[list[int]]:
    """Token ids of the first `count` held-out prompts (training rows if the recipe holds none out)."""
    from grpo_recipes.data import load_splits
    from grpo_recipes.evaluation.generate import prompt_token_ids

    splits = load_splits(recipe)
    rows = splits.eval if splits.eval is not None else splits.train
    if count > len(rows):
        raise SystemExit(f"error: --prompts {count} but the recipe has only {len(rows)} prompts")
    chat_kwargs = recipe.trainer.get("chat_template_kwargs")
    return prompt_token_ids(rows.select(range(count))["prompt"], tokenizer, chat_kwargs)


def timed_runs(generate, repeats: int, label: str) -> dict[str, Any]:
    """One untimed warm-up, then `repeats` timed calls of `generate()` (which returns the tokens it made)."""
    start = time.perf_counter()
    generate()
    warmup = time.perf_counter() - start
    log(f"  {label}: warm-up done in {warmup:.1f} s")
    tokens, seconds = [], []
    for repeat in range(repeats):
        start = time.perf_counter()
        made = generate()
        seconds.append(time.perf_counter() - start)
        tokens.append(made)
        log(
            f"  {label}: run {repeat + 1}/{repeats}: {made} tokens in {seconds[-1]:.2f} s "
            f"({made / seconds[-1]:.1f} tokens/s)"
        )
    return {
        "tokens": sum(tokens),
        "seconds": sum(seconds),
        "per_run_seconds": seconds,
        "warmup_seconds": warmup,
    }


def measure_transformers(recipe, args) -> dict[str, Any]:
    import torch

    from grpo_recipes.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(recipe.model)
    prompts = build_prompts(recipe, tokenizer, args.prompts)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(recipe.model).to(device).eval()
    tokenizer.padding_side = "left"  # decoder-only generation continues from the right edge
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt").to(device)
    dtype = str(model.dtype).removeprefix("torch.")
    log(
        f"  transformers: {recipe.model.name_or_path} in {dtype} on {device}, {torch.get_num_threads()} threads"
    )

    def generate() -> int:
        with torch.no_grad():
            out = model.generate(
                **batch,
                do_sample=True,
                temperature=args.temperature,
                top_p=1.0,
                top_k=0,
                max_new_tokens=args.max_new_tokens,
                min_new_tokens=args.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        if device == "cuda":
            torch.cuda.synchronize()
        return int(out[:, batch["input_ids"].shape[1] :].numel())

    torch.manual_seed(args.seed)
    runs = timed_runs(generate, args.repeats, "transformers")
    return {"backend": "transformers", "dtype": dtype, "threads": torch.get_num_threads(), **runs}


def measure_vllm(recipe, args, dtype: str) -> dict[str, Any]:
    # As TRL's colocate mode: one process of a "distributed" run that vLLM joins (external_launcher).
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from grpo_recipes.models import load_tokenizer

    cpu = not has_cuda()
    memory = args.vllm_memory or (CPU_VLLM_MEMORY if cpu else GPU_VLLM_MEMORY)
    prompts = build_prompts(recipe, load_tokenizer(recipe.model), args.prompts)
    log(
        f"  vllm: {recipe.model.name_or_path} in {dtype} on {'cpu' if cpu else 'cuda'}, memory share {memory}"
    )
    llm = LLM(
        model=recipe.model.name_or_path,
        revision=recipe.model.revision,
        trust_remote_code=recipe.model.trust_remote_code,
        dtype=dtype,
        seed=args.seed,
        enforce_eager=cpu,  # compiling the model costs minutes on a CPU
        gpu_memory_utilization=memory,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=max(4096, args.max_model_len),
        distributed_executor_backend="external_launcher",
    )
    params = SamplingParams(
        n=1,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        max_tokens=args.max_new_tokens,
        min_tokens=args.max_new_tokens,
        ignore_eos=True,
        seed=args.seed,
    )
    inputs = [TokensPrompt(prompt_token_ids=ids) for ids in prompts]

    def generate() -> int:
        outputs = llm.generate(inputs, params, use_tqdm=False)
        return sum(len(output.outputs[0].token_ids) for output in outputs)

    import torch

    threads = torch.get_num_threads()  # the engine runs in this process (external_launcher)
    log(f"  vllm {dtype}: engine ready, {threads} threads")
    runs = timed_runs(generate, args.repeats, f"vllm {dtype}")
    return {"backend": "vllm", "dtype": dtype, "threads": threads, **runs}


def run_worker(args) -> int:
    """The hidden `--worker` mode: one measurement, its result written as JSON to `--worker-output`."""
    from grpo_recipes.recipe import load_recipe

    recipe = load_recipe(args.config)
    if args.worker == "transformers":
        result = measure_transformers(recipe, args)
    else:
        result = measure_vllm(recipe, args, args.worker_dtype)
    Path(args.worker_output).write_text(json.dumps(result))
    if args.worker == "vllm":  # skip interpreter teardown: the engine's libraries spam leak reports at exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def spawn_worker(args, backend: str, dtype: str | None = None) -> dict[str, Any]:
    """One measurement in a fresh process (its progress goes to our terminal): its result, or the error."""
    with tempfile.TemporaryDirectory(prefix="bench-generation-") as scratch:
        result_path = Path(scratch) / "result.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--config",
            str(args.config),
            "--prompts",
            str(args.prompts),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--temperature",
            str(args.temperature),
            "--repeats",
            str(args.repeats),
            "--seed",
            str(args.seed),
            "--max-model-len",
            str(args.max_model_len),
            "--worker",
            backend,
            "--worker-output",
            str(result_path),
        ]
        if dtype:
            command += ["--worker-dtype", dtype]
        if args.vllm_memory:
            command += ["--vllm-memory", str(args.vllm_memory)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        started = time.time()
        status = subprocess.run(command, cwd=REPO_ROOT, env=env).returncode
        wall = time.time() - started
        if status != 0 or not result_path.is_file():
            log(f"  {backend} {dtype or ''}: the worker failed with exit status {status} (output above)")
            return {"backend": backend, "dtype": dtype, "error": f"exit status {status}"}
        return {**json.loads(result_path.read_text()), "process_seconds": round(wall, 1)}


def generation_table(rows: list[dict[str, Any]]) -> str:
    baseline = next((r for r in rows if r["backend"] == "transformers" and "error" not in r), None)
    base_rate = baseline["tokens"] / baseline["seconds"] if baseline else None
    header = (
        f"{'back-end':13} {'dtype':9} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'x transformers':>15}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['backend']:13} {row['dtype'] or '-':9} failed: {row['error']}")
            continue
        rate = row["tokens"] / row["seconds"]
        row["tokens_per_second"] = round(rate, 2)
        row["ratio_to_transformers"] = round(rate / base_rate, 2) if base_rate else None
        ratio = f"{rate / base_rate:15.2f}" if base_rate else f"{'-':>15}"
        lines.append(
            f"{row['backend']:13} {row['dtype']:9} {row['tokens']:7d} {row['seconds']:8.2f} {rate:9.1f} {ratio}"
        )
    return "\n".join(lines)


def bench_generation(args) -> dict[str, Any]:
    dtypes = [d.strip() for d in args.vllm_dtypes.split(",") if d.strip()]
    log(
        f"generation: {args.prompts} prompts x {args.max_new_tokens} new tokens, temperature {args.temperature}, "
        f"{args.repeats} timed run(s) after a warm-up, each back-end in a process of its own"
    )
    rows = []
    log("[1] transformers generate")
    rows.append(spawn_worker(args, "transformers"))
    for index, dtype in enumerate(dtypes, start=2):
        log(f"[{index}] vLLM in {dtype}")
        rows.append(spawn_worker(args, "vllm", dtype))
    table = generation_table(rows)
    log("\n" + table)
    return {
        "settings": {
            "config": str(args.config),
            "prompts": args.prompts,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "repeats": args.repeats,
            "seed": args.seed,
            "device": "cuda" if has_cuda() else "cpu",
        },
        "results": rows,
    }


# --------------------------------------------------------------------------------------------------------
# Part 2: the recipe end to end with each back-end.
# --------------------------------------------------------------------------------------------------------


def logged_mean(history: list[dict[str, Any]], key: str, skip_first: bool = False) -> float | None:
    """A metric's mean over the logged steps (read as run reports read it), or None where no step logged it.

    `skip_first` leaves out the first step, for timings: it pays one-off costs (vLLM's first generation builds
    its kernels) that a run of hundreds of steps spreads thin; `first_step_seconds` reports it. With one step
    logged, that step is the mean."""
    _, values = reward_series(history, key)
    if skip_first and len(values) > 1:
        values = values[1:]
    return statistics.fmean(values) if values else None


#: Part 2's vLLM back-ends (colocate mode, each after transformers generation), with their own overrides:
#: "vllm" for a recipe without LoRA, the other two for a LoRA recipe.
VLLM_BACKENDS: dict[str, list[str]] = {
    "vllm": [],
    "vllm-merged": ["model.lora.vllm_sync=merged"],
    "vllm-adapter": ["model.lora.vllm_sync=adapter"],
}


def train_run(args, backend: str, round_: int = 1) -> dict[str, Any]:
    out = args.output.resolve().parent / f"bench-train-{backend}-round{round_}"  # beside the tables' JSON
    shutil.rmtree(out, ignore_errors=True)  # a scratch run: stale results must not be read back
    overrides = [
        f"trainer.max_steps={args.train_steps}",
        f"trainer.output_dir={out}",
        "trainer.logging_steps=1",  # a time for every step, the first apart from the rest
    ]
    if args.eval_samples is not None:
        overrides.append(f"evaluation.max_samples={args.eval_samples}")
    if backend.startswith("vllm"):
        memory = args.colocate_memory or COLOCATE_MEMORY
        overrides += [
            "trainer.use_vllm=true",
            "trainer.vllm_mode=colocate",
            f"trainer.vllm_gpu_memory_utilization={memory}",
            "trainer.vllm_max_model_length=512",
        ]
        overrides += VLLM_BACKENDS[backend]
    command = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "train.py"),
        "--config",
        str(args.config),
        "--no-resume",
        *overrides,
    ]
    log(f"  $ {' '.join(command[1:])}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    started = time.time()
    status = subprocess.run(command, cwd=REPO_ROOT, env=env).returncode
    row: dict[str, Any] = {
        "backend": backend,
        "output_dir": str(out),
        "process_seconds": time.time() - started,
    }
    if status != 0:
        log(f"  {backend}: training failed with exit status {status} (output above)")
        return {**row, "error": f"exit status {status}"}
    history = json.loads((out / "log_history.json").read_text())
    final = next((entry for entry in reversed(history) if "train_runtime" in entry), {})
    steps = final.get("global_step") or max((e.get("step", 0) for e in history), default=0)
    before = (
        json.loads((out / "eval_before.json").read_text()) if (out / "eval_before.json").is_file() else {}
    )
    after = json.loads((out / "eval_after.json").read_text()) if (out / "eval_after.json").is_file() else {}
    _, step_times = reward_series(history, "step_time")
    if not step_times:
        return {**row, "error": f"no step times in {out / 'log_history.json'}"}
    return {
        **row,
        "steps": steps,
        # Steps 2..N: what each step costs once the run is under way.
        "seconds_per_step": logged_mean(history, "step_time", skip_first=True),
        "first_step_seconds": step_times[0],
        "train_runtime": final.get("train_runtime"),
        "mean_reward": logged_mean(history, "reward"),
        "sync_seconds": logged_mean(history, "vllm/sync_seconds", skip_first=True),
        "sync_mb": logged_mean(history, "vllm/sync_mb"),
        # Generating a step's completions, the weight sync included; the rest of a step is scoring,
        # log-probabilities and the optimizer step.
        "generation_seconds": logged_mean(history, "time/generation_seconds", skip_first=True),
        # Whether the run corrected for vLLM's sampling (the correction's metrics are logged only then).
        "sampling_correction": any("sampling/importance_sampling_ratio/mean" in entry for entry in history),
        "accuracy_before": before.get("accuracy"),
        "accuracy_after": after.get("accuracy"),
        "eval_total": after.get("total"),
    }


def percent(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def training_table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'round':>5} {'back-end':18} {'steps':>5} {'s/step':>7} {'step 1':>6} {'gen s':>6} {'rest s':>6} {'sync s':>7} {'sync MB':>8} {'train s':>8} "
        f"{'process s':>9} {'reward':>7} {'acc before':>10} {'acc after':>10} {'eval n':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row.get('round', 1):5d} {row['backend']:18} failed: {row['error']}")
            continue
        reward = f"{row['mean_reward']:7.3f}" if row["mean_reward"] is not None else f"{'-':>7}"
        sync_s = f"{row['sync_seconds']:7.2f}" if row.get("sync_seconds") is not None else f"{'-':>7}"
        sync_mb = f"{row['sync_mb']:8.1f}" if row.get("sync_mb") is not None else f"{'-':>8}"
        generation = row.get("generation_seconds")
        split = (
            f"{generation:6.2f} {row['seconds_per_step'] - generation:6.2f}"
            if generation is not None
            else f"{'-':>6} {'-':>6}"
        )
        lines.append(
            f"{row.get('round', 1):5d} {row['backend']:18} {row['steps']:5d} {row['seconds_per_step']:7.2f} {row['first_step_seconds']:6.1f} {split} {sync_s} {sync_mb} "
            f"{row['train_runtime'] or float('nan'):8.1f} {row['process_seconds']:9.1f} {reward} "
            f"{percent(row['accuracy_before']):>10} {percent(row['accuracy_after']):>10} {row['eval_total'] or '-':>6}"
        )
    return "\n".join(lines)


def against_transformers(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each back-end's seconds a step over the rounds, and its ratio to transformers generation's in the same
    round (the runs nearest in time, so that the machine's drift between rounds cancels): one entry per round
    in `rounds`, None where either run of that round failed, and the median of the others."""
    done = [row for row in rows if "error" not in row]
    baseline = {row["round"]: row["seconds_per_step"] for row in done if row["backend"] == "transformers"}
    rounds = sorted({row["round"] for row in rows})
    summary: dict[str, dict[str, Any]] = {}
    for backend in dict.fromkeys(row["backend"] for row in rows):
        seconds = {row["round"]: row["seconds_per_step"] for row in done if row["backend"] == backend}
        ratios = [seconds[r] / baseline[r] if r in seconds and r in baseline else None for r in rounds]
        measured = [ratio for ratio in ratios if ratio is not None]
        summary[backend] = {
            "rounds": rounds,
            "seconds_per_step": [seconds.get(r) for r in rounds],
            "median_seconds_per_step": statistics.median(seconds.values()) if seconds else None,
            "ratios": ratios,
            "median_ratio": statistics.median(measured) if measured else None,
        }
    return summary


def summary_table(summary: dict[str, dict[str, Any]]) -> str:
    header = f"{'back-end':18} {'runs':>4} {'median s/step':>13} {'median x transformers':>21}  per round"
    lines = [header, "-" * len(header)]

    def figure(value: float | None, width: int) -> str:
        return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}}"

    for backend, entry in summary.items():
        runs = sum(value is not None for value in entry["seconds_per_step"])
        each = ", ".join(figure(r, 0).strip() for r in entry["ratios"])
        lines.append(
            f"{backend:18} {runs:4d} {figure(entry['median_seconds_per_step'], 13)} "
            f"{figure(entry['median_ratio'], 21)}  {each}"
        )
    return "\n".join(lines)


def bench_training(args, lora: bool) -> dict[str, Any]:
    log(f"\ntraining: {args.config} for {args.train_steps} steps with each back-end (same seed)")
    rows = []
    vllm = [name for name in VLLM_BACKENDS if name != "vllm"] if lora else ["vllm"]
    backends = ("transformers", *vllm)
    # Round-robin: each round runs every back-end once, so a drift of the machine's speed over the minutes
    # of the benchmark falls on every back-end alike instead of on whichever ran last.
    runs = [(round_, backend) for round_ in range(1, args.train_rounds + 1) for backend in backends]
    for index, (round_, backend) in enumerate(runs, start=1):
        log(f"[train {index}/{len(runs)}] round {round_}: generation by {backend}")
        rows.append({**train_run(args, backend, round_), "round": round_})
    log("\n" + training_table(rows))
    summary = against_transformers(rows)
    log("\n" + summary_table(summary))
    paper = sync_on_paper()
    log("\n" + paper_table(paper))
    return {
        "steps": args.train_steps,
        "rounds": args.train_rounds,
        "eval_samples": args.eval_samples,
        "results": rows,
        "summary": summary,
        "on_paper": paper,
    }


#: The link a server-mode sync crosses, for the on-paper seconds: NCCL over PCIe 5 x16, about 50 GB/s.
PAPER_BANDWIDTH_GB_S = 50.0


def sync_on_paper(rank: int = 16) -> list[dict[str, Any]]:
    """Bytes per sync for the GPU recipes' models, from their shapes: every weight in bfloat16 (the merged
    sync) against a rank-`rank` adapter on every linear layer in float32 (the adapter sync), and the seconds
    each takes at `PAPER_BANDWIDTH_GB_S`."""
    from grpo_recipes.launch.memory import lora_parameter_count, model_shape, parameter_count

    rows = []
    for name in ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"):
        shape = model_shape(name)
        merged, adapter = 2 * parameter_count(shape), 4 * lora_parameter_count(shape, rank)
        rows.append(
            {
                "model": name,
                "merged_gb": merged / 1e9,
                "adapter_gb": adapter / 1e9,
                "merged_s": merged / 1e9 / PAPER_BANDWIDTH_GB_S,
                "adapter_s": adapter / 1e9 / PAPER_BANDWIDTH_GB_S,
            }
        )
    return rows


def paper_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"on paper, a sync at {PAPER_BANDWIDTH_GB_S:g} GB/s (merged: bfloat16 weights; adapter: r=16 on every "
        "linear layer, float32)",
        f"{'model':28} {'merged GB':>9} {'adapter GB':>10} {'merged s':>8} {'adapter s':>9} {'ratio':>6}",
    ]
    for row in rows:
        lines.append(
            f"{row['model']:28} {row['merged_gb']:9.2f} {row['adapter_gb']:10.3f} {row['merged_s']:8.3f} "
            f"{row['adapter_s']:9.4f} {row['merged_gb'] / row['adapter_gb']:6.0f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        default=str(REPO_ROOT / "recipes" / "default.yaml"),
        help="a recipe file, or a name from recipes/ (e.g. gsm8k); default: the default recipe",
    )
    parser.add_argument("--prompts", type=int, default=8, help="held-out prompts, generated as one batch")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens generated per prompt")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per back-end (after a warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--vllm-dtypes", default="float32,bfloat16", help="comma-separated; empty: transformers only"
    )
    parser.add_argument(
        "--vllm-memory",
        type=float,
        default=None,
        help=f"vLLM's gpu_memory_utilization (default {CPU_VLLM_MEMORY} on a CPU, {GPU_VLLM_MEMORY} on a GPU)",
    )
    parser.add_argument("--max-model-len", type=int, default=1024, help="vLLM's max_model_len")
    parser.add_argument("--no-generation", action="store_true", help="skip part 1 (generation throughput)")
    parser.add_argument(
        "--train-steps", type=int, default=None, help="part 2: train this many steps with each back-end"
    )
    parser.add_argument(
        "--train-rounds",
        type=int,
        default=1,
        help="part 2: run every back-end this many times, round-robin; medians and per-round ratios are printed",
    )
    parser.add_argument(
        "--eval-samples", type=int, default=None, help="part 2: evaluation.max_samples (held-out prompts)"
    )
    parser.add_argument(
        "--colocate-memory",
        type=float,
        default=None,
        help=f"part 2: trainer.vllm_gpu_memory_utilization (default {COLOCATE_MEMORY})",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO_ROOT / "outputs" / "bench_generation.json",
        help="the tables as JSON (default: outputs/bench_generation.json); part 2's runs go beside it",
    )
    parser.add_argument("--worker", choices=("transformers", "vllm"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)
    args = parser.parse_args()

    from grpo_recipes.recipe import RecipeError, load_recipe, resolve_recipe_path

    args.config = resolve_recipe_path(args.config, REPO_ROOT / "recipes").resolve()
    if args.worker:
        return run_worker(args)
    if args.train_rounds < 1:
        print(f"error: --train-rounds must be at least 1, got {args.train_rounds}", file=sys.stderr)
        return 2
    try:
        recipe = load_recipe(args.config)  # a bad recipe fails here, before any process starts
    except (RecipeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    log(f"recipe {args.config}: model {recipe.model.name_or_path} ({recipe.model.dtype})")
    report: dict[str, Any] = {}
    if not args.no_generation:
        report["generation"] = bench_generation(args)
    if args.train_steps:
        report["training"] = bench_training(args, lora=recipe.model.lora is not None)
    if not report:
        print("nothing to do: --no-generation without --train-steps", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    log(f"\nwritten to {args.output}")
    failed = [
        row for part in report.values() for row in part["results"] if isinstance(row, dict) and "error" in row
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
