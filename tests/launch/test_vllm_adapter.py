"""vLLM serves the LoRA adapter: which recipes sync the adapter and why the others do not, and, on vLLM's CPU
build, the adapter served after each sync against the PEFT policy that trains."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support import run_probe, run_script, tiny_recipe, write_recipe

from grpo_recipes.launch.vllm_adapter import lora_config_problem, planned_sync, round_lora_rank
from grpo_recipes.recipe import load_recipe

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
REPO = Path(__file__).resolve().parents[2]


def assert_served_is_the_policy(probe: dict) -> None:
    """After each sync vLLM's log-probabilities equal the PEFT policy's within the error of vLLM's bfloat16
    forward pass, and after each sync that moved the adapter (by hand, then by the optimizer) they sit far
    nearer the new policy than the one before it: an adapter one sync stale fails here.

    bfloat16 keeps 8 bits of mantissa, so each rounding moves a value by up to 2**-8 of itself; through the
    layers a token's log-probability gathers a few such roundings (0.6 % of it has been seen on one CPU, 0.1 %
    on another). The bound allows four, 2**-6 (0.17 at a log-probability of -11), plus 1e-2. A stale adapter
    is caught by the second check, after each sync that moved the adapter, on the mean over the text's tokens,
    which one noisy token cannot sway."""
    for stage in ("original", "perturbed", "trained"):
        served, policy = probe[stage], probe[f"{stage}_policy"]
        for token, (a, b) in enumerate(zip(served, policy, strict=True)):
            assert abs(a - b) <= abs(b) * 2**-6 + 1e-2, (stage, token, a, b)

    def mean_gap(xs: list[float], ys: list[float]) -> float:
        return sum(abs(x - y) for x, y in zip(xs, ys, strict=True)) / len(xs)

    # Each sync against the one before it: the adapter moved by hand, then the optimizer's step.
    for stage, before in (("perturbed", "original"), ("trained", "perturbed")):
        error = mean_gap(probe[stage], probe[f"{stage}_policy"])
        moved = mean_gap(probe[f"{stage}_policy"], probe[f"{before}_policy"])
        assert error < moved / 4, (stage, error, moved)


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ({}, None),
        ({"use_dora": True}, "DoRA"),
        ({"bias": "lora_only"}, "trained biases"),
        ({"modules_to_save": ["score"]}, "modules_to_save (score)"),
        ({"rank_pattern": {"q_proj": 8}}, "per-layer ranks or alphas (vLLM reads one r and one alpha)"),
        ({"target_modules": ["q_proj", "lm_head"]}, "an adapter on the embeddings or the output layer"),
        ({"r": 1024}, "rank 1024 above vLLM's 512"),
    ],
)
def test_which_lora_adapters_vllm_can_serve(keys, problem):
    from peft import LoraConfig

    config = LoraConfig(**{"r": 16, "lora_alpha": 32, "target_modules": "all-linear", **keys})
    assert lora_config_problem(config) == problem


def test_vllm_lora_rank_rounds_up_to_one_it_accepts():
    assert [round_lora_rank(r) for r in (1, 2, 8, 16, 17, 64, 500)] == [1, 8, 8, 16, 32, 64, 512]
    with pytest.raises(ValueError, match="above vLLM's largest, 512"):
        round_lora_rank(513)


SMOLLM2_135M = dict(
    model_type="llama", vocab_size=49152, hidden_size=576, num_hidden_layers=30, intermediate_size=1536,
    num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
)  # fmt: skip


def _recipe(tmp_path, *overrides):
    model = tmp_path / "smollm2-135m"  # the shapes alone: nothing loads
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(SMOLLM2_135M))
    data = tiny_recipe(model, tmp_path / "out")
    data["model"]["lora"] = {"r": 16, "alpha": 32}
    data["trainer"]["use_vllm"] = True
    return load_recipe(write_recipe(tmp_path / "r.yaml", data), list(overrides), check_trainer=False)


def test_make_check_says_which_sync_a_recipe_uses_and_why(tmp_path):
    from grpo_recipes.launch.memory import MODEL_SHAPES

    assert planned_sync(_recipe(tmp_path)) == (
        "adapter: vLLM keeps the base weights it loaded and receives the LoRA adapter "
        "(4.9 M parameters a sync instead of the model's 135 M)"
    )
    merged = {
        "model.lora.vllm_sync=merged": "model.lora.vllm_sync: merged",
        "model.lora=null": "all weights are trained (no LoRA adapter)",
        "trainer.vllm_enable_sleep_mode=true": "vllm_enable_sleep_mode",
        "model.lora.target_modules=[q_proj, lm_head]": "an adapter on the embeddings or the output layer",
    }
    for override, reason in merged.items():
        assert planned_sync(_recipe(tmp_path, override)) == f"merged: every weight, each sync ({reason})"
    assert planned_sync(_recipe(tmp_path, "trainer.use_vllm=false")) is None
    # A server takes the adapter too; sleep mode and tensor parallelism are then the server's own business.
    server = planned_sync(
        _recipe(tmp_path, "trainer.vllm_mode=server", "trainer.vllm_enable_sleep_mode=true")
    )
    assert server.startswith("adapter: ") and server.endswith(
        "; the server loads it from a folder, which make serve starts it to do"
    )
    # The figures come from the model's shapes: Qwen2.5-1.5B's adapter against its 1,544 M parameters.
    assert "Qwen/Qwen2.5-1.5B-Instruct" in MODEL_SHAPES
    qwen = planned_sync(_recipe(tmp_path, "model.name_or_path=Qwen/Qwen2.5-1.5B-Instruct"))
    assert qwen.endswith("(18.5 M parameters a sync instead of the model's 1544 M)"), qwen


def test_make_serve_starts_a_lora_recipes_server_ready_to_load_its_adapter(tmp_path):
    """The server command for a LoRA recipe enables LoRA at the adapter's rank (rounded up to one vLLM takes)
    and the endpoint that loads adapters at run time; a recipe whose weights sync merged gets neither."""
    from grpo_recipes.launch.serve import recipe_serve_command

    command, env = recipe_serve_command(_recipe(tmp_path, "model.lora.r=12"))
    assert command[-7:] == [
        "--enable-lora",
        "--max-lora-rank",
        "16",
        "--max-loras",
        "1",
        "--max-cpu-loras",
        "2",
    ]
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    for override in ("model.lora=null", "model.lora.vllm_sync=merged"):
        command, env = recipe_serve_command(_recipe(tmp_path, override))
        assert "--enable-lora" not in command and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env, override


@needs_vllm
@pytest.mark.smoke
def test_the_adapter_vllm_serves_is_the_policy_that_trains(tiny_model, tmp_path):
    """After each sync (the adapter at zero, moved by hand, and after a real optimizer step), vLLM's
    log-probabilities of a fixed text match the PEFT model's own, within the bfloat16 rounding of vLLM's CPU
    kernels; each sync sends the adapter alone, and vLLM holds only the latest."""
    probe = run_probe(Path(__file__).with_name("vllm_adapter_probe.py"), str(tiny_model), str(tmp_path))
    assert probe["generation"] == "AdapterSyncCPUVLLMGeneration" and probe["fallback"] is None
    # vLLM applied the adapter with the project's one-product-per-adapter ops (grpo_recipes.launch.vllm_cpu_lora).
    assert probe["lora_op"] == "grpo_recipes.launch.vllm_cpu_lora.bgmv_shrink"
    assert_served_is_the_policy(probe)
    assert max(abs(a - b) for a, b in zip(probe["perturbed"], probe["original"], strict=True)) > 0.2
    assert probe["trained"] != pytest.approx(probe["perturbed"], abs=1e-4)  # the step moved the adapter
    assert probe["sync_bytes"] == 4 * probe["adapter_parameters"]  # float32 adapter, nothing else
    assert probe["loras"] == [probe["version"]] and probe["version"] >= 4


@needs_vllm
@pytest.mark.smoke
def test_a_vllm_server_serves_the_adapter_that_trains(tiny_model, tmp_path):
    """Server mode: make serve's command for a LoRA recipe, then each sync hands the server the adapter alone.
    After each (the adapter at zero, moved by hand, after a real optimizer step) the server's log-probabilities
    of a fixed text under the adapter the client names match the PEFT model's; the server holds the latest
    adapter only, and pre-flight finds it ready for them."""
    import os

    from grpo_recipes.launch import preflight
    from grpo_recipes.launch.serve import Server, recipe_serve_command, server_lora_problem
    from grpo_recipes.ports import free_port

    data = tiny_recipe(tiny_model, tmp_path / "out")
    data["model"]["lora"] = {"r": 4, "alpha": 8, "dropout": 0.0}
    data["trainer"].update(use_vllm=True, vllm_mode="server", vllm_max_model_length=256)
    recipe = load_recipe(write_recipe(tmp_path / "r.yaml", data), check_trainer=False)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command, env = recipe_serve_command(recipe, port=port)
    env = {k: v for k, v in env.items() if k != "VLLM_PLUGINS"}  # every plugin, the project's included
    with Server(command, {**env, "CUDA_VISIBLE_DEVICES": ""}, url, tmp_path / "server.log"):
        assert server_lora_problem(url, rank=4) is None
        assert server_lora_problem(url, rank=64) == "its --max-lora-rank 8 is below the adapter's rank 64"
        probe = run_probe(
            Path(__file__).with_name("vllm_adapter_probe.py"),
            str(tiny_model),
            str(tmp_path),
            url,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )
        config = type("Config", (), {"vllm_server_base_url": url, "vllm_server_timeout": 5})()
        assert preflight._server_problem(recipe, config, {}) is None
    server_log = (tmp_path / "server.log").read_text()
    assert probe["generation"] == "AdapterSyncCPUVLLMGeneration" and probe["fallback"] is None
    assert_served_is_the_policy(probe)
    assert max(abs(a - b) for a, b in zip(probe["perturbed"], probe["original"], strict=True)) > 0.2
    assert probe["trained"] != pytest.approx(probe["perturbed"], abs=1e-4)
    assert probe["sync_bytes"] == 4 * probe["adapter_parameters"]
    assert probe["loras"] == [probe["version"]] and probe["model_named"] == f"policy-v{probe['version']}"
    assert "reload_weights" not in server_log  # the server's own weights were never replaced
    # The server's processes run the project's CPU LoRA ops too (the vLLM plugin), and served the policy above.
    assert "grpo-recipes: CPU LoRA ops installed" in server_log and "CPU LoRA ops stay" not in server_log


def test_a_server_without_lora_is_refused_before_training_with_the_fix(tmp_path, monkeypatch):
    """Pre-flight reads the server's /server_info: a server started without LoRA, or whose adapters cannot be
    loaded at run time, is named in one line with the two ways out."""
    from grpo_recipes.launch import preflight, serve

    recipe = _recipe(tmp_path, "trainer.vllm_mode=server")
    config = type("Config", (), {"vllm_server_base_url": "http://h:1", "vllm_server_timeout": 5})()
    monkeypatch.setattr(preflight, "health_problem", lambda url, timeout: None)
    infos = {
        "it was started without --enable-lora": {"vllm_config": {"lora_config": None}},
        "it was started without VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 (no endpoint loads an adapter)": {
            "vllm_config": {"lora_config": {"max_lora_rank": 16}},
            "vllm_env": {},
        },
    }
    for why, info in infos.items():
        monkeypatch.setattr(serve, "_server_info", lambda url, timeout, info=info: info)
        problem = preflight._server_problem(recipe, config, {})
        assert str(problem).endswith(
            f"cannot load it: {why}; fix: restart it with make serve RECIPE={tmp_path / 'r.yaml'}, which enables "
            "LoRA, or add the override model.lora.vllm_sync=merged"
        ), problem
    ready = {
        "vllm_config": {"lora_config": {"max_lora_rank": 16}},
        "vllm_env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": True},
    }
    monkeypatch.setattr(serve, "_server_info", lambda url, timeout: ready)
    assert preflight._server_problem(recipe, config, {}) is None
    # A merged sync needs nothing of the server's LoRA.
    monkeypatch.setattr(
        serve, "_server_info", lambda url, timeout: infos["it was started without --enable-lora"]
    )
    merged = _recipe(tmp_path, "trainer.vllm_mode=server", "model.lora.vllm_sync=merged")
    assert preflight._server_problem(merged, config, {}) is None


def _tiny_vllm_run(tiny_model, out, sync: str) -> list[dict]:
    data = tiny_recipe(
        tiny_model, out, max_steps=3, save_steps=3, num_generations=4, per_device_train_batch_size=8
    )
    data["model"]["lora"] = {"r": 8, "alpha": 16, "dropout": 0.0, "vllm_sync": sync}
    data["evaluation"] = {"enabled": False}
    data["trainer"].update(
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.15,
        vllm_max_model_length=256,
        learning_rate=5e-3,
    )
    recipe = write_recipe(out.with_suffix(".yaml"), data)
    result = run_script("train.py", "--config", str(recipe), extra_env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        f"vLLM weight sync: {'adapter' if sync == 'adapter' else 'merged (model.lora.vllm_sync: merged)'}"
        in (result.stdout)
    )
    return [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]


@needs_vllm
@pytest.mark.smoke
def test_adapter_and_merged_syncs_train_alike(tiny_model, tmp_path):
    """The same seed's tiny run with each sync: the first step samples from the same weights (the adapter at
    zero), so its rewards are identical; later steps' policies differ only by float rounding (the adapter
    applied unmerged against merged in float32). The adapter sync sends the adapter's bytes alone."""
    adapter = _tiny_vllm_run(tiny_model, tmp_path / "adapter", "adapter")
    merged = _tiny_vllm_run(tiny_model, tmp_path / "merged", "merged")
    assert [h["step"] for h in adapter] == [h["step"] for h in merged] == [1, 2, 3]
    assert adapter[0]["reward"] == merged[0]["reward"]
    assert adapter[0]["completions/mean_length"] == merged[0]["completions/mean_length"]
    for a, m in zip(adapter, merged, strict=True):
        assert a["vllm/sync_mb"] < m["vllm/sync_mb"] / 10, (a, m)
