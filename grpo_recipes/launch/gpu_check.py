"""`make gpu-check`: one command that proves the CUDA paths on a GPU machine with nothing to download.

Two halves, on two machines:

- `make gpu-wheels`, on a machine with the package index: fills `gpu-pack/` (`prepare_pack`) with the wheels
  this project needs beyond what a GPU base image has (torch, numpy, pyarrow, tensorboard and pytest are
  taken as they are there), pinned to the versions installed here, for Python 3.12 on x86-64 Linux;
  DeepSpeed's source distribution (its ops are built just in time, if ever); the SmolLM2 tokenizer the tiny
  models are built with. The folder stays under `PACK_LIMIT_MIB`, checked.
- `make gpu-check`, on the GPU machine (`run_check`): installs the pack into `.gpu-venv` (which sees the
  image's own packages), then runs each step below, bounded in time and reported on one line with its
  figures, and writes `outputs/gpu-check/summary.json`; exit status 1 if any step that should work failed.
  Without a CUDA device it says so in one line and exits 0.

The steps: the environment; the default recipe's code path on a tiny model built from a config (warm-up,
evaluation before, 5 GRPO steps, evaluation after, report), with its LoRA adapter and with all weights
trained; the calculator tool recipe (multi-turn rollouts); one process under DeepSpeed ZeRO-2; peak CUDA
memory of Qwen2.5-1.5B's shapes (random weights) under LoRA and full fine-tuning against
`memory.estimate`. Each training step asserts, from the files the run wrote, that the policy, the warm-up
and both evaluations ran on CUDA in bfloat16 (`placement_problems`).

Example (the check's summary as the docs' table):
    >>> step = StepResult("environment", "ok", 0.4, {"gpu": "NVIDIA H100 80GB HBM3", "bf16": True})
    >>> print(summary_table({"date": "2026-12-05", "commit": "abc1234", "steps": [step.to_dict()]}))
    | step | result | seconds | figures |
    |---|---|---:|---|
    | environment | ok | 0.4 | gpu NVIDIA H100 80GB HBM3, bf16 True |
    <BLANKLINE>
    Checked on a GPU on 2026-12-05 at `abc1234`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PACK = REPO / "gpu-pack"
PACK_LIMIT_MIB = 60
#: The GPU base image's Python; the wheels are downloaded for it, not for the Python that prepares them.
TARGET_PYTHON = "3.12"
TARGET_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: Packages the GPU base image has, used as they are: torch and its CUDA libraries (the project's torch range
#: admits the image's 2.11), and the large compiled ones whose versions our dependencies accept loosely.
#: Everything else is carried at the version tested here, even where the image has an older one.
IMAGE_PROVIDED = {
    "torch", "triton", "numpy", "pyarrow", "sympy", "mpmath", "networkx", "setuptools",
    "tensorboard", "tensorboard-data-server", "grpcio", "protobuf", "absl-py", "markdown", "werkzeug",
    "pytest", "pluggy", "iniconfig", "pygments",
}  # fmt: skip
IMAGE_PROVIDED_PREFIXES = ("nvidia-", "cuda-")
#: Left out for the size limit: matplotlib and what it alone needs are 24 MiB of wheels; without it a run writes
#: report.md and no plots.
LEFT_OUT = {"matplotlib": "the run report's plots (24 MiB with its dependencies): report.md is still written"}
#: Roots of the closure: the project's own dependencies, DeepSpeed (ZeRO) and the report's plots.
PACK_EXTRAS = ("deepspeed",)
VENV = REPO / ".gpu-venv"
OUT = REPO / "outputs" / "gpu-check"
#: The model whose memory is measured, against the estimate in gsm8k-lora's header.
MEMORY_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"


# --------------------------------------------------------------------------------------------------------
# The pack: wheels pinned to this environment, for the GPU image's Python.
# --------------------------------------------------------------------------------------------------------


def _not_carried(name: str) -> bool:
    return name in IMAGE_PROVIDED or name.startswith(IMAGE_PROVIDED_PREFIXES) or name in LEFT_OUT


def dependency_closure(
    roots: list[str], python_version: str = TARGET_PYTHON, skip=_not_carried
) -> dict[str, str]:
    """Every distribution `roots` need, transitively, with the version installed in this environment, for
    Linux x86-64 under `python_version`; names for which `skip(name)` is true are left out with what they
    alone need.

    >>> closure = dependency_closure(["trl"])
    >>> "transformers" in closure and "accelerate" in closure and "torch" not in closure
    True
    """
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    environment = {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    found: dict[str, str] = {}
    queue = [(Requirement(root), "") for root in roots]
    while queue:
        requirement, extra = queue.pop()
        if requirement.marker is not None and not requirement.marker.evaluate(
            {**environment, "extra": extra}
        ):
            continue
        name = canonicalize_name(requirement.name)
        if skip(name):
            continue
        try:
            dist = distribution(requirement.name)
        except PackageNotFoundError:
            raise RuntimeError(
                f"{requirement.name} is needed but not installed here (make setup-cpu-dist)"
            ) from None
        extras = sorted(requirement.extras)
        if name in found and not extras:
            continue
        found[name] = dist.version
        for line in dist.requires or []:
            needed = Requirement(line)
            for which in ["", *extras]:
                if needed.marker is None or needed.marker.evaluate({**environment, "extra": which}):
                    queue.append((needed, which))
                    break
    return dict(sorted(found.items()))


def project_roots() -> list[str]:
    """The project's dependencies (and `PACK_EXTRAS`' ones) as installed here: `grpo-recipes[deepspeed]`'s."""
    return [f"grpo-recipes[{','.join(PACK_EXTRAS)}]"]


def pack_size_mib(pack: Path) -> float:
    return sum(p.stat().st_size for p in pack.rglob("*") if p.is_file()) / 2**20


def prepare_pack(pack: Path = PACK, log=print) -> dict[str, Any]:
    """Fill `pack` (see the module docstring); returns its manifest, also written to `pack/manifest.json`.
    Raises RuntimeError when a download fails or the folder passes `PACK_LIMIT_MIB`."""
    from .smoke import LOCAL_TOKENIZER

    closure = dependency_closure(project_roots())
    closure.pop("grpo-recipes")  # the check runs from the source tree
    sdists = {name: closure.pop(name) for name in ("deepspeed",) if name in closure}
    partial = pack.with_name(pack.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    wheels = partial / "wheels"
    wheels.mkdir(parents=True)
    pins = [f"{name}=={version}" for name, version in closure.items()]
    log(f"gpu-wheels: {len(pins)} wheels for Python {TARGET_PYTHON} on x86-64 Linux, {len(sdists)} sdist(s)")
    platforms = [arg for platform in TARGET_PLATFORMS for arg in ("--platform", platform)]
    _pip(["download", "--no-deps", "--only-binary=:all:", "--python-version", TARGET_PYTHON,
          "--implementation", "cp", "--abi", f"cp{TARGET_PYTHON.replace('.', '')}", *platforms,
          "--dest", str(wheels), *pins])  # fmt: skip
    if sdists:
        _pip(["download", "--no-deps", "--no-binary=:all:", "--no-build-isolation", "--dest", str(wheels),
              *(f"{name}=={version}" for name, version in sdists.items())])  # fmt: skip
    # Installed in two rounds: the wheels with pip's resolver, then the sdists without build isolation
    # (DeepSpeed's setup imports the image's torch).
    (partial / "requirements.txt").write_text(
        "".join(f"{name}=={version}\n" for name, version in closure.items())
    )
    (partial / "sdists.txt").write_text("".join(f"{name}=={version}\n" for name, version in sdists.items()))
    from transformers import AutoTokenizer

    if not (LOCAL_TOKENIZER / "tokenizer.json").is_file():
        raise RuntimeError(f"no tokenizer at {LOCAL_TOKENIZER}: run `make model` first")
    AutoTokenizer.from_pretrained(LOCAL_TOKENIZER).save_pretrained(partial / "tokenizer")
    size = pack_size_mib(partial)
    manifest = {
        "python": TARGET_PYTHON,
        "packages": {**closure, **sdists},
        "provided_by_image": sorted(IMAGE_PROVIDED) + [f"{p}*" for p in IMAGE_PROVIDED_PREFIXES],
        "left_out": LEFT_OUT,
        "size_mib": round(size, 1),
        "files": sorted(p.name for p in wheels.iterdir()),
    }
    (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if size > PACK_LIMIT_MIB:
        raise RuntimeError(
            f"{partial} is {size:.1f} MiB, over the {PACK_LIMIT_MIB} MiB a GPU machine takes with the working "
            f"tree; the largest: {_largest(partial)}"
        )
    shutil.rmtree(pack, ignore_errors=True)
    partial.rename(pack)
    log(f"gpu-wheels: {pack} holds {len(manifest['files'])} files, {size:.1f} MiB of {PACK_LIMIT_MIB}")
    return manifest


def _largest(folder: Path, count: int = 5) -> str:
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)[:count]
    return ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in files)


def _pip(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"])
    if done.returncode != 0:
        raise RuntimeError(f"pip {args[0]} failed (exit status {done.returncode}; output above)")


# --------------------------------------------------------------------------------------------------------
# The check, on the GPU machine.
# --------------------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    """One step of the check: `status` is ok, failed or skipped; `figures` are what it measured."""

    name: str
    status: str
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)
    detail: str = ""

    def line(self) -> str:
        figures = ", ".join(f"{key} {value}" for key, value in self.figures.items())
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.status:<7} {self.name} [{self.seconds:.0f} s]: {figures}{detail}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cuda_environment() -> dict[str, Any] | None:
    """The GPU, its memory, torch and CUDA versions and bf16 support; None where no CUDA device is present."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    properties = torch.cuda.get_device_properties(0)
    return {
        "gpu": properties.name,
        "gpus": torch.cuda.device_count(),
        "memory_gb": round(properties.total_memory / 1e9, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "bf16": torch.cuda.is_bf16_supported(),
    }


def placement_problems(run: Path, device_type: str = "cuda", dtype: str = "bfloat16") -> list[str]:
    """What in the run folder `run` did not run on `device_type` in `dtype`: the trained policy (run_info.json),
    the warm-up (where the recipe has one), each held-out evaluation (eval_*.json), and, on a GPU, a peak
    memory above zero. Read from the files the run wrote, so it holds for any launcher. Empty: all in place.
    """
    info_path = run / "run_info.json"
    if not info_path.is_file():
        return [f"{info_path} is missing: the run did not start"]
    info = json.loads(info_path.read_text())
    policy = info.get("policy")
    if policy is None:
        return [f"{info_path} has no policy placement: the run did not finish"]
    problems = []
    if not policy["device"].startswith(device_type):
        problems.append(f"the policy trained on {policy['device']}, not {device_type}")
    if policy["dtype"] != dtype:
        problems.append(f"the policy's weights are {policy['dtype']}, not {dtype}")
    if device_type == "cuda" and not policy.get("peak_gpu_memory_gb"):
        problems.append("no GPU memory was used (peak 0)")
    if "warmup" in info and not info["warmup"]["device"].startswith(device_type):
        problems.append(f"the warm-up ran on {info['warmup']['device']}, not {device_type}")
    evaluations = sorted(run.glob("eval_*.json"))
    if not evaluations:
        problems.append("no held-out evaluation was written")
    for path in evaluations:
        device = json.loads(path.read_text()).get("device", "")
        if not device.startswith(device_type):
            problems.append(
                f"the {path.stem.removeprefix('eval_')} evaluation ran on {device or '?'}, not {device_type}"
            )
    return problems


def tiny_run_overrides(
    model: Path, out: Path, dtype: str = "auto", warmup: bool = True, bf16: bool = True
) -> list[str]:
    """A recipe's run cut to seconds on a tiny model: 5 GRPO steps, a 2-step warm-up, 16 held-out problems;
    `bf16`: mixed precision (autocast) over weights of `dtype`."""
    overrides = [
        f"model.name_or_path={model}",
        f"model.dtype={dtype}",
        "model.attn_implementation=null",
        "dataset.max_train_samples=80",
        "dataset.max_eval_samples=16",
        "evaluation.max_samples=16",
        "evaluation.batch_size=16",
        "evaluation.max_new_tokens=16",
        f"trainer.output_dir={out}",
        "trainer.max_steps=5",
        "trainer.save_steps=5",
        "trainer.save_total_limit=1",
        "trainer.logging_steps=1",
        "trainer.max_completion_length=16",
        "trainer.log_completions=false",
        "trainer.use_vllm=false",
        f"trainer.bf16={str(bf16).lower()}",
    ]
    if warmup:
        overrides += ["warmup.examples=8", "warmup.max_steps=2"]
    return overrides


def tiny_model(dest: Path, tokenizer: Path) -> Path:
    """A 2-layer random Llama built from its config, with `tokenizer` (the pack's SmolLM2 tokenizer)."""
    from ..local_model import make_tiny_model

    if not (dest / "config.json").is_file():
        make_tiny_model(dest, tokenizer)
    return dest


def recipe_step(
    name: str,
    recipe: str,
    model: Path,
    out: Path,
    timeout: float,
    extra: list[str] | None = None,
    accelerate_config: str | None = None,
    device_type: str = "cuda",
    dtype: str = "auto",
) -> StepResult:
    """Train `recipe` (a file of recipes/) for a few steps on the tiny `model` in a process of its own (under
    `accelerate launch` with `accelerate_config`, one process, where given), then check where it ran."""
    from ..recipe import read_recipe_data

    run = out / name
    shutil.rmtree(run, ignore_errors=True)
    path = REPO / "recipes" / recipe
    warmup = read_recipe_data(path, []).get("warmup") is not None
    overrides = [*tiny_run_overrides(model, run, dtype, warmup, bf16=device_type == "cuda"), *(extra or [])]
    script = [str(REPO / "scripts" / "train.py"), "--config", str(path), "--no-resume", *overrides]
    if accelerate_config is not None:
        from ..ports import free_port

        launch = [
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(REPO / "configs" / accelerate_config),
        ]
        launch += ["--num_processes", "1", "--main_process_port", str(free_port())]
        command = [sys.executable, *launch, *script]
    else:
        command = [sys.executable, *script]
    status, seconds, log = _run_logged(command, out / f"{name}.log", timeout)
    if status != 0:
        return StepResult(
            name, "failed", seconds, detail=f"exit status {status}; last lines of {log}: {_tail(log)}"
        )
    info = json.loads((run / "run_info.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    policy = info["policy"]
    figures = {
        "steps": summary["global_step"],
        "policy": f"{policy['device']} {policy['dtype']}",
        "warm-up": info["warmup"]["device"] if "warmup" in info else "none",
        "held-out before/after": " / ".join(
            f"{summary[when]['correct']}/{summary[when]['total']}"
            for when in ("before", "after")
            if summary.get(when)
        ),
        "peak GPU memory GB": policy.get("peak_gpu_memory_gb"),
        "train s": summary["train_seconds"],
        "report": ", ".join(p.name for p in sorted(run.glob("report*")) + sorted(run.glob("reward_curve*"))),
    }
    # `dtype: auto` is bfloat16 on a GPU that supports it (models.resolve_dtype), float32 elsewhere.
    expected = ("bfloat16" if device_type == "cuda" else "float32") if dtype == "auto" else dtype
    problems = placement_problems(run, device_type, expected)
    return StepResult(name, "failed" if problems else "ok", seconds, figures, "; ".join(problems))


def measure_memory(
    model: str = MEMORY_MODEL,
    lora_rank: int | None = 16,
    steps: int = 2,
    batch: int = 4,
    tokens: int = 760,
    device: str = "cuda",
    shape: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Peak memory of `steps` optimizer steps of `model`'s shapes with random weights in bfloat16 (no
    download) on `device`, with gradient checkpointing: LoRA of `lora_rank` on every linear layer, or all
    weights (torch AdamW, whose moments are bfloat16 like the weights: no float32 master copy as under
    DeepSpeed). Each step: one micro-batch of `batch` x `tokens` random tokens, the shape gsm8k-lora's header
    reckons with. Beside it, `memory.estimate`'s floor for one GPU (weights, gradients, optimizer)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .memory import GB, estimate, model_shape

    shape = shape or model_shape(model)
    config = AutoConfig.for_model(
        "qwen2", **{key: value for key, value in shape.items() if key != "attention_bias"}, use_cache=False
    )
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    with torch.device(device):
        policy = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    loaded = torch.cuda.memory_allocated() / GB if cuda else None
    policy.train()  # checkpointing applies in training mode only
    policy.activation_checkpointing_enable({"use_reentrant": False})  # gradient checkpointing
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        policy = get_peft_model(
            policy,
            LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0, target_modules="all-linear"),
        )
    trained = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-5)
    started = time.time()
    for _ in range(steps):
        ids = torch.randint(0, shape["vocab_size"], (batch, tokens), device=device)
        policy(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.time() - started
    floor = estimate(shape, gpus=1, gpu_gb=80, zero_stage=0, lora_rank=lora_rank)
    return {
        "model": model,
        "trained": f"LoRA r={lora_rank}" if lora_rank else "all weights",
        "trained_parameters": sum(p.numel() for p in trained),
        "weights_gb": round(loaded, 2) if cuda else None,
        "peak_gb": round(torch.cuda.max_memory_allocated() / GB, 2) if cuda else None,
        "estimate_without_activations_gb": round(floor.weights + floor.gradients + floor.optimizer, 2),
        "s_per_step": round(seconds / steps, 2),
    }


def memory_step(name: str, lora_rank: int | None, out: Path, timeout: float) -> StepResult:
    """`measure_memory` in a process of its own (a clean CUDA context, bounded in time)."""
    flag = ["--lora", str(lora_rank)] if lora_rank else ["--lora", "0"]
    command = [
        sys.executable,
        str(REPO / "scripts" / "gpu_check.py"),
        "memory",
        *flag,
        "--json",
        str(out / f"{name}.json"),
    ]
    status, seconds, log = _run_logged(command, out / f"{name}.log", timeout)
    if status != 0:
        return StepResult(
            name, "failed", seconds, detail=f"exit status {status}; last lines of {log}: {_tail(log)}"
        )
    figures = json.loads((out / f"{name}.json").read_text())
    return StepResult(name, "ok", seconds, {k: v for k, v in figures.items() if k != "model"})


def _run_logged(command: list[str], log: Path, timeout: float) -> tuple[int, float, Path]:
    """Run `command` with its output in `log`, killed (status 124) after `timeout` seconds."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.update(PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    started = time.time()
    with log.open("w") as handle:
        process = subprocess.Popen(
            command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True
        )
        try:
            status = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
            status = 124
            handle.write(f"\ngpu-check: stopped after {timeout:.0f} s\n")
    return status, time.time() - started, log


def _tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return " | ".join(line.strip()[:200] for line in text[-lines:])


def summary_table(summary: dict[str, Any]) -> str:
    """The check's summary.json as the "Checked on a GPU" table that docs/distributed.md includes."""
    rows = ["| step | result | seconds | figures |", "|---|---|---:|---|"]
    for step in summary["steps"]:
        figures = ", ".join(f"{key} {value}" for key, value in step["figures"].items())
        detail = f" ({step['detail']})" if step.get("detail") else ""
        rows.append(f"| {step['name']} | {step['status']} | {step['seconds']:.1f} | {figures}{detail} |")
    rows += ["", f"Checked on a GPU on {summary['date']} at `{summary['commit']}`."]
    return "\n".join(rows)


def install_pack(pack: Path = PACK, venv: Path = VENV, log=print) -> Path:
    """Install the pack into `venv`, made to see the image's own packages (torch); returns its Python. Skipped
    when the same pack is installed already. The venv has no pip of its own (an image may lack ensurepip):
    this Python's pip installs into it (`pip --python`). An sdist that fails to build (DeepSpeed without a
    compiler) is reported and left out: the step that needs it says so."""
    python = venv / "bin" / "python"
    manifest = (pack / "manifest.json").read_text()
    stamp = venv / ".pack-installed"
    if python.is_file() and stamp.is_file() and stamp.read_text() == manifest:
        return python
    if not python.is_file():
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True
        )
    log(f"gpu-check: installing {pack}/ into {venv}/ (no network)")
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-index",
        "--find-links",
        str(pack / "wheels"),
    ]
    pip += ["--disable-pip-version-check", "--quiet"]
    done = subprocess.run([*pip, "-r", str(pack / "requirements.txt")])
    if done.returncode != 0:
        raise RuntimeError(
            f"installing {pack}/requirements.txt failed (exit status {done.returncode}; output above)"
        )
    sdists = pack / "sdists.txt"
    for line in sdists.read_text().split() if sdists.is_file() else []:
        # DeepSpeed's setup imports the image's torch (no build isolation); its ops are built just in time.
        built = subprocess.run(
            [*pip, "--no-build-isolation", "--no-deps", line], env={**os.environ, "DS_BUILD_OPS": "0"}
        )
        if built.returncode != 0:
            log(
                f"gpu-check: {line} did not install from its source (exit status {built.returncode}): left out"
            )
    stamp.write_text(manifest)
    return python


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


#: The whole check's budget, installation included, and each step's own limit (seconds).
BUDGET_SECONDS = 8 * 60
STEP_SECONDS = {"recipe": 110, "zero2": 150, "memory": 100}


def run_check(
    out: Path = OUT, log=print, budget: float = BUDGET_SECONDS, started: float | None = None
) -> int:
    """Every step of the check on this machine's GPU (see the module docstring); writes `out/summary.json`
    and `out/summary.md`. Returns the exit status: 1 if a step that should work failed."""
    import importlib.util

    started = time.time() if started is None else started
    out.mkdir(parents=True, exist_ok=True)
    environment = cuda_environment()
    steps = [
        StepResult(
            "environment",
            "ok" if environment else "failed",
            0.0,
            environment or {},
            "" if environment else "no CUDA device",
        )
    ]
    log(steps[0].line())
    tokenizer = PACK / "tokenizer" if (PACK / "tokenizer").is_dir() else None
    if tokenizer is None:
        from .smoke import LOCAL_TOKENIZER

        tokenizer = LOCAL_TOKENIZER
    model = tiny_model(out / "tiny-llama", tokenizer)
    deepspeed = importlib.util.find_spec("deepspeed") is not None
    plan = [
        ("default, LoRA", lambda: recipe_step("default-lora", "default.yaml", model, out, STEP_SECONDS["recipe"])),
        # All weights in one process: float32 master weights under bf16 autocast (pre-flight refuses bf16 ones).
        ("default, all weights", lambda: recipe_step("default-full", "default.yaml", model, out, STEP_SECONDS["recipe"], ["model.lora=null"], dtype="float32")),
        ("calculator tools", lambda: recipe_step("calculator-tools", "calculator-cpu.yaml", model, out, STEP_SECONDS["recipe"], ["trainer.max_completion_length=48"], dtype="float32")),
        # All weights in bfloat16: DeepSpeed keeps the float32 master copy.
        ("zero2, one process", (lambda: recipe_step("zero2", "default.yaml", model, out, STEP_SECONDS["zero2"], ["model.lora=null"], accelerate_config="zero2.yaml")) if deepspeed else "deepspeed is not installed (its source did not build here: see the installation's lines)"),
        ("memory, LoRA", lambda: memory_step("memory-lora", 16, out, STEP_SECONDS["memory"])),
        ("memory, all weights", lambda: memory_step("memory-full", None, out, STEP_SECONDS["memory"])),
    ]  # fmt: skip
    for name, step in plan:
        if isinstance(step, str):
            result = StepResult(name, "skipped", 0.0, detail=step)
        elif time.time() - started > budget:
            result = StepResult(name, "skipped", 0.0, detail=f"the {budget / 60:g}-minute budget ran out")
        else:
            begun = time.time()
            try:
                result = step()
            except Exception as err:  # a step's own error fails that step; the others still run
                result = StepResult(
                    name, "failed", time.time() - begun, detail=f"{type(err).__name__}: {err}"
                )
            result.name = name
        steps.append(result)
        log(result.line())
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "environment": environment,
        "seconds": round(time.time() - started, 1),
        "steps": [step.to_dict() for step in steps],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_table(summary) + "\n")
    failed = [step.name for step in steps if step.status == "failed"]
    log(f"gpu-check: {len(steps) - len(failed)} of {len(steps)} steps ok or skipped in {summary['seconds']:.0f} s; "
        f"{out / 'summary.json'}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0
