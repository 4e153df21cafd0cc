"""`make smoke` as a user runs it: the distributed matrix on this CPU, 2 real processes each (`make test-smoke`).

Each run is `scripts/smoke.py`: the shipped accelerate config plus `--num_processes 2 --mixed_precision no`,
a tiny model of the recipe's architecture, 2 optimizer steps and a held-out evaluation split across ranks.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from support import REPO, run_script

pytestmark = pytest.mark.smoke

# {ddp, zero2, zero3} x {transformers, vLLM colocate}; LoRA and full weights alternate so that every launcher
# and every back-end runs both.
MATRIX = [
    ("ddp", "hf", "off"),
    ("ddp", "vllm-colocate", "on"),
    ("zero2", "hf", "on"),
    ("zero2", "vllm-colocate", "off"),
    ("zero3", "hf", "off"),
    ("zero3", "vllm-colocate", "on"),
    ("zero3-offload", "hf", "off"),
]
EXPECTED = {
    "ddp": {"distributed_type": "MULTI_CPU", "zero_stage": None},
    "zero2": {"distributed_type": "DEEPSPEED", "zero_stage": 2},
    "zero3": {"distributed_type": "DEEPSPEED", "zero_stage": 3},
    "zero3-offload": {"distributed_type": "DEEPSPEED", "zero_stage": 3},
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """One outputs folder for the module, so the tiny models are built once per architecture."""
    return tmp_path_factory.mktemp("outputs")


def smoke(outputs, recipe: str, dist: str, gen: str, lora: str, *overrides: str):
    result = run_script(
        "smoke.py",
        "--config",
        recipe,
        "--dist",
        dist,
        "--gen",
        gen,
        "--lora",
        lora,
        "--outputs",
        str(outputs),
        *overrides,
        timeout=900,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    return outputs / f"smoke-{recipe}", log


def check_run(out, log, dist: str, gen: str, lora: str) -> dict:
    info = json.loads((out / "run_info.json").read_text())
    generation = {"hf": "transformers"}.get(gen, gen)
    assert info["world_size"] == 2 and info["global_step"] == 2 and info["generation"] == generation
    assert {k: info[k] for k in EXPECTED[dist]} == EXPECTED[dist]
    assert info["mixed_precision"] == "no"
    assert info["versions"]["trl"] and info["versions"]["deepspeed"] != "not installed"
    assert "[rank 0 of 2]" in log and "[rank 1 of 2]" in log
    # How the policy reached vLLM: the LoRA adapter alone, every weight where all are trained.
    expected_sync = {
        ("vllm-colocate", "on"): "adapter",
        ("vllm-colocate", "off"): "merged (all weights are trained (no LoRA adapter))",
        ("vllm-server", "on"): "adapter",
        ("vllm-server", "off"): "merged (all weights are trained (no LoRA adapter))",
        ("hf", "on"): None,
        ("hf", "off"): None,
    }
    if (gen, lora) in expected_sync:
        assert info["vllm_sync"] == expected_sync[gen, lora]

    # Evaluation ran on both ranks, 2 of the 4 held-out prompts each, and the results were gathered: the main
    # rank's line before and after GRPO, and for the base model in a run with a warm-up, with the LoRA adapter
    # turned off; a warm-up of all weights has the base model evaluated before it, each rank on all 4.
    warmed_up = "warmup" in info
    sharded = 2 + (warmed_up and lora == "on")
    assert log.count("evaluated 4 problems (2 on this process)") == sharded, log[-3000:]
    assert ("evaluated 4 problems (4 on this process)" in log) == (warmed_up and lora == "off")
    if dist.startswith("zero3"):
        assert f"trained with ZeRO-3: {out} holds the gathered model" in log
    for name in ("eval_base.json",) * warmed_up + ("eval_before.json", "eval_after.json"):
        result = json.loads((out / name).read_text())
        assert result["total"] == 4 and len(result["examples"]) == 4

    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert [h["step"] for h in history] == [1, 2]
    # One prompt's group of 4 per step, split 2 + 2 across the ranks: counted whole, it is 0 or 1, never 0.5.
    assert all(h["zero_variance_groups"] in (0.0, 1.0) for h in history)
    assert (out / "adapter_config.json").is_file() == (lora == "on")
    return info


@pytest.mark.parametrize("dist, gen, lora", MATRIX, ids=["-".join(m) for m in MATRIX])
def test_default_recipe_runs_distributed(outputs, dist, gen, lora):
    out, log = smoke(outputs, "default", dist, gen, lora)
    info = check_run(out, log, dist, gen, lora)
    # Its warm-up ran on each process first (cut to 2 steps), on the adapter GRPO then trained, or all weights.
    assert info["warmup"]["steps"] == 2 and info["warmup"]["examples"] == 4
    # The policy's device, where the trainer then trains it ("cpu" is "cpu:0" in accelerate's multi-CPU state).
    assert info["warmup"]["device"].partition(":")[0] == info["device"].partition(":")[0]
    trained = "the LoRA adapter" if lora == "on" else "all weights"
    assert f"2 supervised steps (batch 2, learning rate 0.0002) on {trained}" in log


def test_gsm8k_recipe_zero3_vllm_colocate_with_its_own_architecture_and_rewards(outputs):
    """Offline, the Hub dataset is replaced by its local sample with the same columns."""
    out, log = smoke(outputs, "gsm8k", "zero3", "vllm-colocate", "recipe")
    check_run(out, log, "zero3", "vllm-colocate", "off")
    assert (
        "the Hub dataset openai/gsm8k is replaced by its local sample recipes/data/smoke/openai--gsm8k.jsonl"
        in log
    )
    # A tiny model of the recipe's own architecture (Qwen2.5), scored by its own two rewards.
    assert (
        json.loads((outputs / "smoke-models" / "qwen2" / "config.json").read_text())["model_type"] == "qwen2"
    )
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert all("rewards/gsm8k_accuracy/mean" in h and "rewards/think_format/mean" in h for h in history)


#: Every other shipped recipe, offline, each under one launcher and back-end (together they cover each one).
OTHER_RECIPES = [
    ("math", "zero2", "vllm-colocate"),
    ("countdown", "zero3", "hf"),
    ("gsm8k-lora", "zero2", "vllm-colocate"),  # its LoRA adapter synced alone into vLLM under ZeRO-2
    ("template", "ddp", "hf"),
    ("reasoning-gym", "zero2", "hf"),
    ("basic-arithmetic-cpu", "ddp", "vllm-colocate"),
    ("code", "zero2", "vllm-colocate"),  # a Hub dataset replaced by its sample; programs run in the sandbox
    ("code-cpu", "zero3", "hf"),
    ("gsm8k-python", "zero2", "vllm-colocate"),  # the python tool's programs run in the sandbox
    ("guess-number", "zero3", "hf"),  # an environment per rollout, scored by environment_reward
]


#: The tool recipe under ZeRO-2 with vLLM colocated and under ZeRO-3 with transformers: its tool reaches TRL's
#: tool loop on both processes, after its supervised warm-up (cut to 2 steps by the smoke run). The tiny random
#: model calls no tool by itself: tests/training/test_tool_rounds.py scripts the calls, under the other pairs
#: (DDP, ZeRO-2 and ZeRO-3 with transformers, ZeRO-3 with vLLM colocated and with a server).
TOOL_RECIPES = [("calculator-cpu", "zero2", "vllm-colocate"), ("calculator-cpu", "zero3", "hf")]


#: The distillation recipes: a tiny teacher beside the tiny student (their tokenizer shared), the GPU recipe under
#: ZeRO-2 with vLLM colocated and under ZeRO-3, as a GPU runs it.
DISTILL_RECIPES = [
    ("distill-qwen", "zero2", "vllm-colocate"),
    ("distill-qwen", "zero3", "hf"),
    ("distill-cpu", "ddp", "hf"),
]


def test_every_shipped_recipe_has_a_smoke_run_here():
    covered = {"default", "gsm8k"} | {name for name, _, _ in OTHER_RECIPES + TOOL_RECIPES + DISTILL_RECIPES}
    assert covered == {path.stem for path in (REPO / "recipes").glob("*.yaml")}


@pytest.mark.parametrize("name, dist, gen", OTHER_RECIPES, ids=[r[0] for r in OTHER_RECIPES])
def test_every_recipe_runs_distributed_offline(outputs, name, dist, gen):
    from grpo_recipes.recipe import load_recipe

    out, log = smoke(outputs, name, dist, gen, "recipe")
    lora = "on" if load_recipe(REPO / "recipes" / f"{name}.yaml").model.lora is not None else "off"
    check_run(out, log, dist, gen, lora)


@pytest.mark.parametrize(
    "name, dist, gen", DISTILL_RECIPES, ids=[f"{name}-{dist}-{gen}" for name, dist, gen in DISTILL_RECIPES]
)
def test_distillation_recipe_runs_distributed_with_a_tiny_teacher(outputs, name, dist, gen):
    out, log = smoke(outputs, name, dist, gen, "recipe")
    info = json.loads((out / "run_info.json").read_text())
    generation = {"hf": "transformers"}.get(gen, gen)
    assert info["world_size"] == 2 and info["global_step"] == 2 and info["generation"] == generation
    assert {k: info[k] for k in EXPECTED[dist]} == EXPECTED[dist]
    assert "[rank 0 of 2]" in log and "[rank 1 of 2]" in log
    assert "building a tiny random" in log or (outputs / "smoke-models").is_dir()
    # The student before and after, and the teacher, each evaluated on both ranks, 2 of the 4 prompts each.
    assert log.count("evaluated 4 problems (2 on this process)") == 3, log[-3000:]
    for when in ("before", "after", "teacher"):
        assert json.loads((out / f"eval_{when}.json").read_text())["total"] == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trainer"] == "distillation" and summary["teacher"]["total"] == 4
    # Each step's loss is the divergence to the teacher, over both ranks' samples; the reward is measured beside.
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "divergence" in h]
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["divergence"] > 0 and 0 <= h["reward"] <= 1 for h in history)
    resolved = (out / "resolved_recipe.yaml").read_text()
    assert f"name_or_path: {outputs / 'smoke-models'}" in resolved and "divergence: reverse_kl" in resolved


@pytest.mark.parametrize(
    "name, dist, gen", TOOL_RECIPES, ids=[f"{name}-{dist}-{gen}" for name, dist, gen in TOOL_RECIPES]
)
def test_tool_recipe_runs_distributed_with_its_tools_after_its_warm_up(outputs, name, dist, gen):
    out, log = smoke(outputs, name, dist, gen, "recipe")
    info = check_run(out, log, dist, gen, "off")
    # The warm-up ran on each process before GRPO, cut to 2 steps on 4 demonstrations.
    assert info["warmup"]["steps"] == 2 and info["warmup"]["examples"] == 4
    assert "warm-up: 4 demonstrations, 2 supervised steps" in log
    # The trainer had the tool: TRL logs its call frequency only then, and the guard's counts are beside it.
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert all("tools/call_frequency" in h and h["tools/timeouts"] == 0 for h in history)
    resolved = (out / "resolved_recipe.yaml").read_text()
    assert "name: calculator" in resolved and "chat_template: qwen2_5" in resolved


def test_server_mode_trains_against_a_served_model_and_leaves_no_process(outputs):
    # Full weights with weight decay: every step moves the weights even when all rewards are equal, so
    # the server's answers must change once training's syncs reach it. Under ZeRO-2 (DDP's weights reach
    # the server by the same unsharded path); the adapter's sync under ZeRO-3 is the test below.
    out, log = smoke(
        outputs,
        "default",
        "zero2",
        "vllm-server",
        "off",
        "trainer.weight_decay=0.1",
        "trainer.learning_rate=0.01",
    )
    info = check_run(out, log, "zero2", "vllm-server", "off")
    assert info["served_weights_changed"] is True
    assert "/collective_rpc" in (out / "vllm-server.log").read_text()
    left = subprocess.run(["pgrep", "-f", "vllm.entrypoints"], capture_output=True, text=True).stdout
    assert left.strip() == "", f"vLLM processes left behind: {left}"


def test_server_and_trainers_started_together_as_the_docs_do(outputs):
    """docs/distributed.md's one-node command: `make serve &` and the launch at once. The trainers wait for the
    server's /health (pre-flight, with a progress line) instead of failing while it loads its model. With
    LoRA under ZeRO-3 (the adapter's shards gathered), each sync hands the server the adapter alone: make
    serve started it with LoRA enabled, and it loaded one adapter a sync instead of reloading its weights."""
    out, log = smoke(outputs, "default", "zero3", "vllm-server", "on", "--server-start", "together")
    info = check_run(out, log, "zero3", "vllm-server", "on")
    assert info["global_step"] == 2
    assert "pre-flight: waiting for the vLLM server at" in log
    server_log = (out / "vllm-server.log").read_text()
    assert "/collective_rpc" not in server_log
    # A sync before each step's generation: two adapters loaded, the first unloaded once the second served.
    assert server_log.count('"POST /v1/load_lora_adapter HTTP/1.1" 200') == 2
    assert server_log.count('"POST /v1/unload_lora_adapter HTTP/1.1" 200') == 1
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert all(0 < h["vllm/sync_mb"] < 1 for h in history), history  # the tiny model's adapter alone
    left = subprocess.run(["pgrep", "-f", "vllm.entrypoints"], capture_output=True, text=True).stdout
    assert left.strip() == "", f"vLLM processes left behind: {left}"


def test_dynamic_sampling_with_vllm_colocate_and_lora(outputs):
    """Extra generation rounds through vLLM under 2 processes: the tiny model's groups are all equal, so every
    step spends its bound and trains on what it has."""
    out, log = smoke(
        outputs, "default", "ddp", "vllm-colocate", "on", "sampling.dynamic=true", "sampling.max_rounds=2"
    )
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "groups_generated" in h]
    assert [h["step"] for h in history] == [1, 2]
    for h in history:  # one group of 4 per round, split 2 + 2 across the ranks
        assert h["groups_generated"] == 1 + h["extra_rounds"] and h["extra_rounds"] <= 2
        assert h["groups_kept"] == 1 - h["zero_variance_groups"]
        assert h["zero_variance_groups"] == 0.0 or h["extra_rounds"] == 2
