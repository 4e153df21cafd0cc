"""vLLM generation when the policy trains on a CPU: the names it builds on, and real weight syncs into vLLM."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from support import run_probe

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


@needs_vllm
def test_trl_and_vllm_still_offer_what_the_cpu_sync_builds_on():
    """Fails when an upgrade moves a name grpo_recipes.launch.vllm_cpu, trainer or serve relies on."""
    from trl.generation import vllm_generation
    from trl.scripts import vllm_serve
    from trl.trainer import grpo_trainer
    from vllm.entrypoints.serve.dev.rpc import api_router
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    # The trainer builds its back-end through this module-level name, which RecipeGRPOTrainer rebinds.
    assert grpo_trainer.VLLMGeneration is vllm_generation.VLLMGeneration
    assert "VLLMGeneration(" in inspect.getsource(grpo_trainer.GRPOTrainer.__init__)
    for method in ("_init_vllm", "sync_weights", "_iter_named_params"):
        assert callable(getattr(vllm_generation.VLLMGeneration, method)), method
    assert "LLM(" in inspect.getsource(vllm_generation.VLLMGeneration._init_vllm)
    assert vllm_generation.LLM.__name__ == "LLM"
    # The colocate sync calls reload_weights(weights_iterator=...), the server sync reload_weights(weights_path=...).
    parameters = inspect.signature(GPUModelRunner.reload_weights).parameters
    assert {"weights_iterator", "weights_path"} <= set(parameters)
    assert any(getattr(route, "path", None) == "/collective_rpc" for route in api_router.router.routes)
    # `make serve` reuses TRL's own command line.
    command = vllm_serve.build_command(vllm_serve.ScriptArguments(model="m"))
    assert command[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "m"]


def test_serve_command_is_trls_with_the_cpu_build_adjustments():
    from grpo_recipes.launch.serve import serve_command

    gpu, env = serve_command("some/model", port=8123, cpu=False, vllm_metadata=True)
    assert gpu[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "some/model"]
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--enforce-eager" not in gpu and '{"backend": "nccl"}' in gpu
    assert gpu[gpu.index("--host") + 1] == "127.0.0.1" and gpu[gpu.index("--port") + 1] == "8123"

    cpu, _ = serve_command("some/model", port=8123, cpu=True, vllm_metadata=False)
    assert cpu[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "some/model"]
    assert "--enforce-eager" in cpu and cpu[cpu.index("--max-model-len") + 1] == "2048"
    assert float(cpu[cpu.index("--gpu-memory-utilization") + 1]) < 0.5
    # Everything else is TRL's: the same flags in the same order.
    assert [a for a in cpu if a.startswith("--")][-4:] == [a for a in gpu if a.startswith("--")][-4:]


def test_recipe_serve_command_takes_the_recipes_port_and_model(tmp_path):
    from support import MINIMAL

    from grpo_recipes.launch.serve import recipe_serve_command
    from grpo_recipes.recipe import parse_recipe

    data = {**MINIMAL, "trainer": {"vllm_server_port": 8765, "vllm_max_model_length": 512}}
    command, _ = recipe_serve_command(parse_recipe(data, "r.yaml"), host="0.0.0.0")
    assert "some/model" in command
    assert (
        command[command.index("--port") + 1] == "8765" and command[command.index("--host") + 1] == "0.0.0.0"
    )
    assert command[command.index("--max-model-len") + 1] == "512"


def test_colocated_kv_cache_holds_the_steps_sequences_and_no_more_than_the_share(monkeypatch):
    """On a CPU the engine is given the cache its sequences can fill, in whole blocks, capped by what the memory
    share leaves; vLLM sizes it itself where its own setting is set, no length is, or the share is too small."""
    from types import SimpleNamespace

    from transformers import LlamaConfig

    from grpo_recipes.launch import vllm_cpu

    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64)
    # A block's bytes: its tokens, keys and values, layers, KV heads, head size 64 / 4, float32.
    block = vllm_cpu.KV_BLOCK_TOKENS * 2 * 2 * 2 * 16 * 4
    # 3 sequences of 100 tokens: one block each, and the one vLLM keeps apart.
    assert vllm_cpu.kv_cache_bytes(config, sequences=3, tokens=100) == 4 * block
    assert vllm_cpu.kv_cache_bytes(config, sequences=2, tokens=129) == 5 * block  # 129 tokens take two blocks
    config.head_dim = 32  # a head size of its own wins over hidden_size / heads
    block *= 2
    assert vllm_cpu.kv_cache_bytes(config, sequences=1, tokens=1) == 2 * block

    seen = {}
    # A host of 100 blocks' memory, of which the process holds 10.
    fake_psutil = SimpleNamespace(
        virtual_memory=lambda: SimpleNamespace(total=100 * block),
        Process=lambda: SimpleNamespace(memory_info=lambda: SimpleNamespace(rss=10 * block)),
    )
    monkeypatch.setattr(vllm_cpu, "psutil", fake_psutil)
    monkeypatch.setattr(vllm_cpu.vllm_generation, "LLM", lambda **settings: None, raising=False)
    monkeypatch.setattr(
        vllm_cpu.RecipeVLLMGeneration,
        "_init_vllm",
        lambda self: seen.update(vllm_cpu.vllm_generation.LLM.keywords),
    )
    monkeypatch.setattr(vllm_cpu.vllm_cpu_lora, "install", lambda: None)
    monkeypatch.delenv(vllm_cpu.KV_CACHE_ENV, raising=False)
    generation = object.__new__(vllm_cpu.CPUVLLMGeneration)
    generation.mode, generation.model = "colocate", type("Model", (), {"config": config})()
    generation.max_num_seqs, generation.max_model_length, generation.gpu_memory_utilization = 3, 100, 0.5

    def built() -> dict:
        seen.clear()
        generation._init_vllm()
        return dict(seen)

    # The share leaves 40 blocks: the 3 sequences' 4 blocks are all the cache gets.
    assert built() == {"enforce_eager": True, "kv_cache_memory_bytes": 4 * block}
    # The share leaves 3 blocks: the cache is what is left, fewer sequences at once (at least one fits).
    generation.gpu_memory_utilization = 0.13
    assert built()["kv_cache_memory_bytes"] == 3 * block
    # Less than one sequence and vLLM's block apart: vLLM sizes it from the share, and says it is too small.
    generation.gpu_memory_utilization = 0.11
    assert built() == {"enforce_eager": True}
    generation.gpu_memory_utilization = 0.5
    generation.max_model_length = None  # vLLM derives the model's length (rope scaling included) itself
    assert built() == {"enforce_eager": True}
    generation.max_model_length = 100
    monkeypatch.setenv(vllm_cpu.KV_CACHE_ENV, "2")
    assert built() == {"enforce_eager": True}  # vLLM reads its own setting


@needs_vllm
@pytest.mark.smoke
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_colocate_sync_reaches_vllm_and_restores(tiny_model, tmp_path, lora):
    # One vLLM engine per process, as in training: the probe runs in a process of its own.
    import os

    env = {key: value for key, value in os.environ.items() if key != "VLLM_CPU_KVCACHE_SPACE"}
    probe = run_probe(
        Path(__file__).with_name("vllm_sync_probe.py"),
        str(tiny_model),
        str(tmp_path),
        *(["--lora"] if lora else []),
        env=env,
    )
    # The merged sync (no adapter sync asked for), measured: TRL's back-end with the CPU build's sync.
    assert probe["generation"] == "MeasuredSyncCPUVLLMGeneration" and probe["backend"] == "vllm-colocate"
    assert probe["perturbed"] != probe["original"]
    # The cache is what the step's sequences can use, not a share of the host's memory (gigabytes here), and
    # vLLM made blocks enough for every sequence at full length and the one it keeps apart (twice as many where
    # it keeps the cache in bfloat16: the size counts float32).
    assert probe["kv_cache_bytes"] == probe["kv_cache_needed"] < 2**30
    needed = probe["max_num_seqs"] * probe["kv_cache_sequence_blocks"] + 1
    assert probe["kv_cache_blocks"] in (needed, 2 * needed)
    if lora:
        # PEFT merges the adapter into the base weights for the sync and subtracts it again: float rounding
        # leaves the base a few ulps off. On CPUs with AMX/AVX512-BF16 vLLM's CPU kernels compute in bfloat16,
        # where such an ulp can round to the next bfloat16 value: about 2e-3 in these log-probabilities
        # (measured), two orders of magnitude below what the perturbation moves them.
        assert probe["restored"] == pytest.approx(probe["original"], abs=1e-2)
        assert max(abs(a - b) for a, b in zip(probe["perturbed"], probe["original"], strict=True)) > 0.2
    else:
        assert probe["restored"] == probe["original"]


@needs_vllm
@pytest.mark.smoke
def test_make_serve_serves_the_recipes_model_until_stopped_by_its_process_id(tiny_model, tmp_path):
    import os

    from support import REPO, tiny_recipe, write_recipe

    from grpo_recipes.launch.serve import Server, served_logprobs
    from grpo_recipes.ports import free_port

    port = free_port()
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model, tmp_path / "out"))
    command = [
        sys.executable,
        str(REPO / "scripts" / "serve.py"),
        "--config",
        str(recipe),
        "--port",
        str(port),
    ]
    url = f"http://127.0.0.1:{port}"
    with Server(command, {**os.environ, "CUDA_VISIBLE_DEVICES": ""}, url, tmp_path / "server.log") as server:
        # The script hands its process over to vLLM's server: the id we started is the server's.
        assert len(served_logprobs(url)) == 4
        group = os.getpgid(server.process.pid)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # no process of the server's group is left
    log = (tmp_path / "server.log").read_text()
    assert f"--model {tiny_model}" in log and "--host 127.0.0.1" in log and "--enforce-eager" in log


@needs_vllm
def test_make_serve_refuses_a_tensor_parallel_size_the_model_cannot_split(tmp_path):
    """Qwen2.5-0.5B's shape (14 heads): 4 GPUs would crash vLLM at start; the script refuses before it."""
    from support import REPO, tiny_recipe, write_recipe
    from transformers import AutoConfig

    model = tmp_path / "heads14"
    AutoConfig.for_model(
        "qwen2", num_attention_heads=14, num_key_value_heads=2, hidden_size=896, intermediate_size=4864
    ).save_pretrained(model)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(model, tmp_path / "out"))
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "serve.py"),
            "--config",
            str(recipe),
            "--tensor-parallel-size",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "model.name_or_path: --tensor-parallel-size: " in result.stderr
    assert "has 14 attention heads (2 key/value) and an MLP of 4864" in result.stderr
    assert "choose one of 1, 2." in result.stderr
    assert "VLLM_SERVER_DEV_MODE" not in result.stdout  # nothing was started


def test_the_tensor_parallel_check_reads_configs_that_name_the_heads_otherwise(tmp_path):
    """GPT-2's config stores its heads as n_head (num_attention_heads is an alias): still checked."""
    from types import SimpleNamespace

    from transformers import GPT2Config

    from grpo_recipes.launch.serve import tensor_parallel_problem

    GPT2Config(n_head=12, n_embd=96, n_layer=1).save_pretrained(tmp_path)
    spec = SimpleNamespace(name_or_path=str(tmp_path), revision=None, trust_remote_code=False)
    problem = tensor_parallel_problem(spec, 8)
    assert problem is not None and "has 12 attention heads" in problem
    assert tensor_parallel_problem(spec, 4) is None
