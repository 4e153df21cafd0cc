"""`make smoke`: run a recipe distributed for 2 optimizer steps on this CPU, before renting GPUs for it.

The recipe runs as it is, launched with the shipped accelerate config (`configs/<dist>.yaml`) and one override
for a CPU (`--num_processes 2 --mixed_precision no`, no GPU visible: gloo), with these changes:
- the model is a tiny random one of the recipe's architecture (built once into `outputs/smoke-models/`), with
  the recipe model's tokenizer where it can be read, else the local SmolLM2 tokenizer (`make model`);
- a small sample of its data, short completions, 2 steps, evaluation on 4 held-out prompts; a Hub dataset is
  replaced by a local sample with the same columns (`recipes/data/smoke/<owner>--<name>.jsonl`, made-up
  rows in the dataset's format), so that every recipe runs offline; a Hub dataset without one is an error
  naming the override to use;
- a recipe's supervised warm-up cut to 2 steps on 4 demonstrations (the warm-up itself, and a tool recipe's
  tools and tool loop, still run);
- generation by transformers, vLLM in each training process (colocate) or a vLLM server started here.

Everything else (prompt, rewards, loss, LoRA or not) is the recipe's, so a broken config, reward or launcher
fails here in minutes. The run writes `outputs/smoke-<recipe>/`, `run_info.json` included.

Example:
    >>> smoke_overrides("/tmp/tiny", "/tmp/out", "vllm-server", port=8123)[-2:]
    ['trainer.vllm_server_host=127.0.0.1', 'trainer.vllm_server_port=8123']
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..ports import free_port
from ..recipe import Recipe, RecipeError, is_local_data_file, load_recipe, read_recipe_data

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = {
    "ddp": "ddp.yaml",
    "zero2": "zero2.yaml",
    "zero3": "zero3.yaml",
    "zero3-offload": "zero3_offload.yaml",
}
# What accelerate reports for each on a CPU (FSDP is not offered: on a CPU accelerate runs it as plain DDP).
DISTRIBUTED_TYPES = {
    "ddp": "MULTI_CPU",
    "zero2": "DEEPSPEED",
    "zero3": "DEEPSPEED",
    "zero3-offload": "DEEPSPEED",
}
GENERATIONS = {"hf": "transformers", "vllm-colocate": "vllm-colocate", "vllm-server": "vllm-server"}
LORA_CHOICES = ("recipe", "on", "off")
LOCAL_TOKENIZER = REPO / "models" / "SmolLM2-135M-Instruct"
SMOKE_SAMPLES = REPO / "recipes" / "data" / "smoke"


def smoke_sample(dataset: str) -> Path:
    """Where the local stand-in for the Hub dataset `dataset` is (it may not exist).

    >>> smoke_sample("openai/gsm8k").name
    'openai--gsm8k.jsonl'
    """
    return SMOKE_SAMPLES / (dataset.replace("/", "--") + ".jsonl")


def is_hub_dataset(value: str | None) -> bool:
    """A dataset named by Hub id rather than a local file or folder."""
    return bool(value) and not is_local_data_file(value) and not Path(value).exists()


def offline_data(recipe: Recipe) -> tuple[list[str], str | None]:
    """Overrides that put a local sample in place of the recipe's Hub data, and a line saying so.

    The held-out rows then come from the same sample (`dataset.max_eval_samples` of them). Raises
    `RecipeError` naming the dataset and the overrides to use when there is no sample for it.
    """
    spec = recipe.dataset
    if spec.generator is not None or not (is_hub_dataset(spec.path) or is_hub_dataset(spec.eval_path)):
        return [], None
    overrides = ["dataset.eval_path=null", "dataset.eval_split=null"]
    if not is_hub_dataset(spec.path):  # local training rows: hold out from them instead of the Hub split
        return (
            overrides,
            f"smoke: held-out rows come from {spec.path} instead of the Hub dataset {spec.eval_path}",
        )
    sample = smoke_sample(spec.path)
    if not sample.is_file():
        raise RecipeError(
            recipe.source,
            "dataset.path",
            f"the smoke run works offline and the Hub dataset {spec.path} has no local sample "
            f'({sample.relative_to(REPO)}); pass a local file with the same columns: ARGS="dataset.path=rows.jsonl '
            'dataset.eval_path=null dataset.eval_split=null dataset.config=null"',
        )
    overrides = [f"dataset.path={sample}", "dataset.config=null", "dataset.train_split=train", *overrides]
    return (
        overrides,
        f"smoke: the Hub dataset {spec.path} is replaced by its local sample {sample.relative_to(REPO)}",
    )


def smoke_overrides(
    model: str | Path,
    out: str | Path,
    gen: str,
    port: int | None = None,
    lora: str = "recipe",
    processes: int = 2,
    warmup: bool = False,
    teacher: str | Path | None = None,
):
    """The recipe overrides of a smoke run (see the module docstring); `warmup`: the recipe has a warm-up;
    `teacher`: the tiny teacher of a distillation recipe (which has no GRPO group settings).

    >>> [o for o in smoke_overrides("/tmp/tiny", "/tmp/out", "hf", warmup=True) if o.startswith("warmup.")]
    ['warmup.examples=4', 'warmup.max_steps=2', 'warmup.per_device_train_batch_size=2']
    """
    overrides = [
        f"model.name_or_path={model}",
        "model.dtype=float32",
        "model.attn_implementation=null",
        "dataset.max_train_samples=32",
        "dataset.max_eval_samples=4",
        "evaluation.max_samples=4",
        "evaluation.batch_size=4",
        "evaluation.max_new_tokens=8",
        f"trainer.output_dir={out}",
        "trainer.max_steps=2",
        # One group of 4 per step; distillation: 4 prompts, one sample each.
        f"trainer.per_device_train_batch_size={max(1, 4 // processes)}",
        "trainer.gradient_accumulation_steps=1",
        *(
            [
                "trainer.num_generations=4",
                "trainer.generation_batch_size=null",
                "trainer.steps_per_generation=null",
            ]
            if teacher is None
            else [f"teacher.name_or_path={teacher}", "teacher.dtype=float32", "teacher.build=null"]
        ),
        "trainer.max_completion_length=16",
        "trainer.warmup_steps=0",
        "trainer.logging_steps=1",
        "trainer.save_steps=2",
        "trainer.save_total_limit=1",
        "trainer.log_completions=false",
        # The launch runs with --mixed_precision no: a GPU recipe's bf16/fp16 would stop it on a CPU.
        "trainer.bf16=false",
        "trainer.fp16=false",
        f"trainer.use_vllm={'false' if gen == 'hf' else 'true'}",
    ]
    if warmup:
        overrides += ["warmup.examples=4", "warmup.max_steps=2", "warmup.per_device_train_batch_size=2"]
    if lora == "on":
        overrides.append("model.lora={r: 8, alpha: 16, dropout: 0.0, target_modules: all-linear}")
    elif lora == "off":
        overrides.append("model.lora=null")
    if gen != "hf":
        mode = gen.removeprefix("vllm-")
        overrides += [f"trainer.vllm_mode={mode}", "trainer.vllm_max_model_length=1024"]
        if mode == "colocate":
            overrides.append("trainer.vllm_gpu_memory_utilization=0.15")  # of host memory, per process
        else:
            overrides += ["trainer.vllm_server_host=127.0.0.1", f"trainer.vllm_server_port={port}"]
    return overrides


#: What triton 3.9's nanobind bindings print at interpreter exit (vLLM imports triton): objects still alive at
#: shutdown, reported by nanobind's leak check; harmless, and gone in later triton releases.
NANOBIND_REPORT = ("nanobind: ", " - leaked ", " - ... skipped remainder")
NANOBIND_LINK = "See https://nanobind.readthedocs.io/en/latest/refleaks.html"


def run_without_exit_noise(command: list[str], env: dict[str, str], log=print) -> int:
    """Run `command`, passing its stderr through without nanobind's exit-time leak report; one line says how
    many processes printed one. Returns the exit status.
    """
    reports = 0
    with subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True) as process:
        for line in process.stderr:
            # The link ends the report without a newline: whatever follows it on the line is someone else's.
            if line.startswith(NANOBIND_LINK):
                line = line[len(NANOBIND_LINK) :]
                reports += 1
            if line.startswith(NANOBIND_REPORT):  # another process's report may start right after the link
                continue
            if line.strip():
                print(line, end="", file=sys.stderr, flush=True)
    if reports:
        log(
            f"smoke: {reports} process(es) printed nanobind's leak report at exit (triton's bindings, harmless: "
            "docs/troubleshooting.md)"
        )
    return process.returncode


def tiny_model_for(recipe: Recipe, models_dir: Path, log=print) -> Path:
    """A tiny random model of the recipe model's architecture, built once per architecture."""
    from transformers import AutoTokenizer

    from ..local_model import architecture_of, make_tiny_model

    model_type = architecture_of(recipe.model.name_or_path, recipe.model.revision)
    dest = models_dir / model_type
    if (dest / "config.json").is_file():
        return dest
    try:
        AutoTokenizer.from_pretrained(recipe.model.name_or_path, revision=recipe.model.revision)
        tokenizer = recipe.model.name_or_path
    except (OSError, ValueError):  # offline: the local SmolLM2 tokenizer stands in
        tokenizer = str(LOCAL_TOKENIZER)
    log(f"smoke: building a tiny random {model_type} model with the {tokenizer} tokenizer in {dest}")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    make_tiny_model(partial, tokenizer, model_type=model_type)
    partial.rename(dest)
    return dest


def tiny_teacher_for(student: Path, log=print) -> Path:
    """A tiny teacher for a tiny student: the same architecture and tokenizer, other random weights."""
    from ..local_model import make_tiny_model

    dest = student.with_name(student.name + "-teacher")
    if (dest / "config.json").is_file():
        return dest
    model_type = json.loads((student / "config.json").read_text())["model_type"]
    log(f"smoke: building a tiny random {model_type} teacher in {dest}")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    make_tiny_model(partial, student, seed=1, model_type=model_type)
    partial.rename(dest)
    return dest


def run_smoke(
    config: str,
    dist: str = "ddp",
    gen: str = "hf",
    overrides: list[str] | None = None,
    lora: str = "recipe",
    processes: int = 2,
    outputs: Path = REPO / "outputs",
    log=print,
    server_start: str = "first",
) -> dict:
    """Run the smoke test; returns the run's `run_info.json`. Raises RuntimeError when the run fails.

    `server_start` (generation `vllm-server`): `first`, the server answers before training starts; `together`,
    the trainers are launched the moment the server is (as docs/distributed.md's one-node commands do) and
    wait for it themselves (pre-flight, `trainer.vllm_server_timeout`)."""
    from ..recipe import resolve_recipe_path

    path = resolve_recipe_path(config, REPO / "recipes")
    # The user's own overrides are checked first; a distillation recipe's teacher (a run of this repository, or
    # a Hub model) is stood in for by the student until the tiny teacher exists.
    raw = read_recipe_data(path, list(overrides or []))
    stand_in = (
        [f"teacher.name_or_path={raw['model']['name_or_path']}", "teacher.build=null"]
        if isinstance(raw.get("teacher"), dict) and isinstance(raw.get("model"), dict)
        else []
    )
    recipe = load_recipe(path, [*(overrides or []), *stand_in])
    out = outputs / f"smoke-{recipe.name}"
    shutil.rmtree(out, ignore_errors=True)  # a scratch run: each smoke test starts clean
    data_overrides, data_note = offline_data(recipe)
    if data_note:
        log(data_note)
    tiny = tiny_model_for(recipe, outputs / "smoke-models", log=log)
    teacher = tiny_teacher_for(tiny, log=log) if recipe.teacher is not None else None
    port = free_port() if gen == "vllm-server" else None
    all_overrides = [
        *(overrides or []),
        *data_overrides,
        *smoke_overrides(
            tiny,
            out,
            gen,
            port=port,
            lora=lora,
            processes=processes,
            warmup=recipe.warmup is not None,
            teacher=teacher,
        ),
    ]
    smoke_recipe = load_recipe(path, all_overrides)

    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    launcher = [str(Path(sys.executable).with_name("accelerate")), "launch"]
    command = [
        *launcher,
        "--config_file",
        str(REPO / "configs" / DISTRIBUTIONS[dist]),
        "--num_processes",
        str(processes),
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(free_port()),
        str(REPO / "scripts" / "train.py"),
        "--config",
        str(path),
        "--no-resume",
        *all_overrides,
    ]
    log(f"smoke: {recipe.name} with {dist} x {processes} processes, generation {gen}, LoRA {lora}")
    if gen == "vllm-server":
        from .serve import Server, recipe_serve_command, served_logprobs

        serve, serve_env = recipe_serve_command(smoke_recipe, port=port)
        log(f"smoke: starting the vLLM server on 127.0.0.1:{port} (log: {out / 'vllm-server.log'})")
        url = f"http://127.0.0.1:{port}"
        together = server_start == "together"
        server_env = {**serve_env, "CUDA_VISIBLE_DEVICES": ""}
        with Server(serve, server_env, url, out / "vllm-server.log", wait=not together):
            before = None if together else served_logprobs(url)
            status = run_without_exit_noise(command, env, log)
            # Started together, there was no "before" to compare with: the weights' reaching it is not checked.
            served_weights_changed = None if together else status == 0 and served_logprobs(url) != before
    else:
        status = run_without_exit_noise(command, env, log)
    if status != 0:
        raise RuntimeError(f"the smoke run failed with exit status {status} (output above)")
    info = json.loads((out / "run_info.json").read_text())
    if gen == "vllm-server":
        # Did training's weight syncs reach the server? (Only if some step had a gradient: all-equal rewards
        # in every group leave the weights as they were.)
        info["served_weights_changed"] = served_weights_changed
        (out / "run_info.json").write_text(json.dumps(info, indent=2) + "\n")
    expected = {
        "world_size": processes,
        "distributed_type": DISTRIBUTED_TYPES[dist],
        "generation": GENERATIONS[gen],
        "global_step": 2,
    }
    wrong = {k: info.get(k) for k, v in expected.items() if info.get(k) != v}
    if wrong:
        raise RuntimeError(
            f"the smoke run did not run as asked: expected {expected}, run_info.json has {wrong}"
        )
    log(
        f"\nsmoke OK: {recipe.name}: {info['world_size']} processes, {info['distributed_type']}, ZeRO stage "
        f"{info['zero_stage']}, generation {info['generation']}, {info['global_step']} steps -> {out}"
    )
    return info
