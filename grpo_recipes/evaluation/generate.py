"""Generation for evaluation: k completions per prompt, from vLLM when it is installed, else transformers.

Both back-ends take the same `SamplingSettings` and the same token ids (the prompt rendered by the
tokenizer's chat template, as GRPOTrainer renders it), and return the same `Generation`s, so a metric does
not depend on which one ran. A model to evaluate is a Hub id, a local folder, a training output or
checkpoint, or a LoRA adapter folder (its base is read from `adapter_config.json` and the adapter merged).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..ports import free_port
from ..recipe import ModelSpec

#: What torchrun/accelerate launch set for their processes, kept from a vLLM child that is a group of its own.
LAUNCHER_VARIABLES = ("TORCHELASTIC_", "GROUP_", "ROLE_", "LOCAL_WORLD_SIZE")

#: vLLM's memory share when it evaluates alone: a CPU backend reserves that share of host memory.
CPU_VLLM_MEMORY = 0.2
GPU_VLLM_MEMORY = 0.85


@dataclass(frozen=True)
class SamplingSettings:
    """How completions are drawn. Greedy: one sample at temperature 0."""

    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def describe(self) -> str:
        """`greedy` or `8 samples at temperature 0.7` (top_p when it is not 1).

        >>> SamplingSettings().describe(), SamplingSettings(samples=8, temperature=0.7).describe()
        ('greedy', '8 samples at temperature 0.7')
        """
        if self.greedy:
            return "greedy"
        top_p = f", top_p {self.top_p:g}" if self.top_p < 1.0 else ""
        return f"{self.samples} sample{'s' * (self.samples > 1)} at temperature {self.temperature:g}{top_p}"


@dataclass(frozen=True)
class Generation:
    """One completion: its text, how many tokens it took, and whether it hit the token limit. A rollout with
    tools also has its messages (assistant turns and tool results), its tool-call counts and its environment;
    `text` is then the conversation as a transcript."""

    text: str
    tokens: int
    truncated: bool
    messages: list[dict[str, Any]] | None = None
    tool_calls: int = 0
    tool_failures: int = 0
    environment: Any = field(default=None, compare=False, repr=False)


def render_prompt(prompt: Any, tokenizer, chat_template_kwargs: dict[str, Any] | None = None) -> str:
    """A prompt as text: plain text as is, a conversation through the chat template (generation prompt added)."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )


def prompt_token_ids(prompts: Sequence[Any], tokenizer, chat_template_kwargs=None) -> list[list[int]]:
    """Token ids of each rendered prompt; the template already holds the special tokens it wants."""
    texts = [render_prompt(p, tokenizer, chat_template_kwargs) for p in prompts]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


# --------------------------------------------------------------------------------------------------------
# Which weights: a model folder or Hub id, or a LoRA adapter on its base.
# --------------------------------------------------------------------------------------------------------


def adapter_base(path: str) -> str | None:
    """The base model of a LoRA adapter folder (from its adapter_config.json); None for a full model."""
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("base_model_name_or_path")


def tokenizer_source(path: str) -> str:
    """Where the tokenizer of `path` is: the folder itself (or a Hub id), else the base model an adapter names."""
    if (Path(path) / "tokenizer_config.json").is_file() or not Path(path).exists():
        return path
    return adapter_base(path) or path


def load_eval_model(path: str, spec: ModelSpec, device: str = "cpu"):
    """(tokenizer, model) for `path`: a full model, or an adapter merged into its base, in the recipe's dtype."""
    from dataclasses import replace

    from ..models import load_model, load_tokenizer

    base = adapter_base(path)
    tokenizer = load_tokenizer(replace(spec, name_or_path=tokenizer_source(path)))
    if base is None:
        model = load_model(replace(spec, name_or_path=path))
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(load_model(replace(spec, name_or_path=base)), path)
        model = model.merge_and_unload()
    return tokenizer, model.to(device)


@contextlib.contextmanager
def model_folder(path: str, spec: ModelSpec) -> Iterator[str]:
    """A folder (or Hub id) vLLM can load: `path` itself, or a temporary merge of an adapter into its base."""
    if adapter_base(path) is None:
        yield path
        return
    tokenizer, model = load_eval_model(path, spec)
    folder = tempfile.mkdtemp(prefix="grpo-eval-merged-")
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        del model
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------------------------------------
# The two back-ends.
# --------------------------------------------------------------------------------------------------------


def _eos_ids(model, tokenizer) -> set[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = ids if isinstance(ids, list) else [ids]
    return {i for i in ids + [tokenizer.eos_token_id] if i is not None}


def generate_transformers(
    model,
    tokenizer,
    prompt_ids: Sequence[Sequence[int]],
    settings: SamplingSettings,
    batch_size: int = 32,
    progress: bool = True,
    synced_gpus: bool = False,
) -> list[list[Generation]]:
    """`settings.samples` completions for each prompt with `model.generate`, batched, left-padded."""
    import torch
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    sampling = (
        {"do_sample": False}
        if settings.greedy
        else {"do_sample": True, "temperature": settings.temperature, "top_p": settings.top_p, "top_k": 0}
    )
    torch.manual_seed(settings.seed)
    results: list[list[Generation]] = []
    batches = range(0, len(prompt_ids), batch_size)
    for begin in tqdm(batches, desc="generating", unit="batch", disable=not progress or len(batches) < 2):
        batch = prompt_ids[begin : begin + batch_size]
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in batch], device=device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=device)
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=settings.max_new_tokens,
                num_return_sequences=settings.samples,
                pad_token_id=pad,
                synced_gpus=synced_gpus,
                **sampling,
            )
        rows = out[:, width:].tolist()
        for i in range(len(batch)):
            generations = []
            for ids in rows[i * settings.samples : (i + 1) * settings.samples]:
                end = next((j for j, token in enumerate(ids) if token in eos), None)
                kept = ids if end is None else ids[:end]
                text = tokenizer.decode(kept, skip_special_tokens=True)
                generations.append(
                    Generation(text, len(kept), end is None and len(ids) >= settings.max_new_tokens)
                )
            results.append(generations)
    return results


def generate_vllm(
    model_path: str,
    spec: ModelSpec,
    prompt_ids: Sequence[Sequence[int]],
    settings: SamplingSettings,
    memory: float | None = None,
    device: str | None = None,
) -> list[list[Generation]]:
    """`settings.samples` completions for each prompt with vLLM (its own progress bar), in a child process.

    A child process per call: vLLM sizes its cache from the memory its process already holds (on a CPU) and
    does not give it back when the engine is dropped, so a second model evaluated by the same process (make
    compare) would find no room. `device`: the GPU index the engine may see (one per launched process).
    """
    import subprocess
    import sys

    request = {
        "model": model_path,
        "revision": None if Path(model_path).exists() else spec.revision,
        "trust_remote_code": spec.trust_remote_code,
        "dtype": spec.dtype,
        "prompt_ids": [list(ids) for ids in prompt_ids],
        "settings": asdict(settings),
        "memory": memory,
    }
    # The engine runs as a one-process group of its own (`external_launcher`, as TRL's colocate mode). The
    # launcher's own variables must not reach it: with TORCHELASTIC_USE_AGENT_STORE set, torch waits for the
    # launcher's rendezvous store at MASTER_PORT, which the engine's fresh port never has (a silent hang).
    env = {key: value for key, value in os.environ.items() if not key.startswith(LAUNCHER_VARIABLES)}
    env.update(
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    with tempfile.TemporaryDirectory(prefix="grpo-eval-vllm-") as folder:
        request_file, response_file = Path(folder) / "request.json", Path(folder) / "response.json"
        request_file.write_text(json.dumps(request))
        command = [
            sys.executable,
            "-m",
            "grpo_recipes.evaluation.generate",
            str(request_file),
            str(response_file),
        ]
        status = subprocess.run(command, env=env).returncode
        if status != 0 or not response_file.is_file():
            raise RuntimeError(f"vLLM generation failed (exit status {status}); its error is printed above")
        response = json.loads(response_file.read_text())
    return [[Generation(*sample) for sample in samples] for samples in response]


def _vllm_worker(request_file: str, response_file: str) -> None:
    """The child process of `generate_vllm`: one engine, one generate call, the results as JSON."""
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from ..models import resolve_dtype

    request = json.loads(Path(request_file).read_text())
    settings = SamplingSettings(**request["settings"])
    prompt_ids = request["prompt_ids"]
    cpu = not torch.cuda.is_available()
    longest = max(len(ids) for ids in prompt_ids) + settings.max_new_tokens
    llm = LLM(
        model=request["model"],
        revision=request["revision"],
        trust_remote_code=request["trust_remote_code"],
        dtype=str(resolve_dtype(request["dtype"])).removeprefix("torch."),
        seed=settings.seed,
        enforce_eager=cpu,  # compiling the model costs minutes on a CPU
        gpu_memory_utilization=request["memory"] or (CPU_VLLM_MEMORY if cpu else GPU_VLLM_MEMORY),
        max_model_len=longest,
        max_num_batched_tokens=max(4096, longest),
        distributed_executor_backend="external_launcher",
    )
    params = SamplingParams(
        n=settings.samples,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_new_tokens,
        # No per-request seed: the engine's (LLM(seed=...)) makes a run repeatable, and vLLM's CPU build
        # fails on seeded requests in large batches ("CPU Generator does not use offset").
    )
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], params)
    response = [
        [(sample.text, len(sample.token_ids), sample.finish_reason == "length") for sample in output.outputs]
        for output in outputs
    ]
    partial = Path(response_file).with_suffix(".partial")
    partial.write_text(json.dumps(response))
    partial.replace(response_file)


if __name__ == "__main__":
    import sys

    _vllm_worker(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the interpreter's teardown: the engine's libraries report leaks at exit


def generate_with_tools(
    model,
    tokenizer,
    prompts: Sequence[Any],
    rows: Sequence[dict[str, Any]],
    toolset,
    settings: SamplingSettings,
    max_iterations: int,
    batch_size: int = 32,
    chat_template_kwargs: dict[str, Any] | None = None,
    synced_gpus: bool = False,
    progress: bool = True,
) -> list[list[Generation]]:
    """Greedy multi-turn rollouts (grpo_recipes.agents.rollout) with `model.generate`: one per prompt."""
    import torch
    from tqdm.auto import tqdm

    from ..agents.rollout import run_rollouts, transcript

    if not settings.greedy or settings.samples != 1:
        raise ValueError("tool rollouts are evaluated greedily, one per problem")
    device = next(model.parameters()).device
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)

    def generate(contexts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        out_ids: list[list[int]] = []
        for begin in range(0, len(contexts), batch_size):
            batch = contexts[begin : begin + batch_size]
            width = max(len(ids) for ids in batch)
            input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in batch], device=device)
            attention = torch.tensor(
                [[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=device
            )
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad,
                    synced_gpus=synced_gpus,
                )
            for ids in out[:, width:].tolist():
                end = next((j for j, token in enumerate(ids) if token in eos), None)
                out_ids.append(ids if end is None else ids[: end + 1])
        return out_ids

    results: list[list[Generation]] = []
    chunk = max(batch_size, 1)
    chunks = range(0, len(prompts), chunk)
    for begin in tqdm(chunks, desc="tool rollouts", unit="batch", disable=not progress or len(chunks) < 2):
        rollouts = run_rollouts(
            prompts[begin : begin + chunk],
            rows[begin : begin + chunk],
            tokenizer,
            generate,
            tools=toolset.tools,
            environment_factory=toolset.environment_factory,
            max_iterations=max_iterations,
            max_tokens=settings.max_new_tokens,
            chat_template_kwargs=chat_template_kwargs,
        )
        for rollout in rollouts:
            results.append(
                [
                    Generation(
                        transcript(rollout.messages),
                        rollout.tokens,
                        rollout.truncated,
                        messages=rollout.messages,
                        tool_calls=rollout.tool_calls,
                        tool_failures=rollout.tool_failures,
                        environment=rollout.environment,
                    )
                ]
            )
    return results
