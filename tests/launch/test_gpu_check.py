"""The GPU check's CPU side: what it does without a GPU, the pack it carries, and the assertions it makes,
read from real runs and real models on this CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from importlib.metadata import requires, version
from pathlib import Path

import pytest

from grpo_recipes.launch import gpu_check
from grpo_recipes.launch.memory import lora_parameter_count, parameter_count

REPO = Path(__file__).resolve().parents[2]


def test_without_a_cuda_device_it_says_so_in_one_line_and_exits_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "gpu-check: no CUDA device here, nothing checked (on a GPU machine: docs/distributed.md, 'GPU check')"
    ]


def test_the_pack_carries_the_tested_versions_and_leaves_the_image_its_own():
    closure = gpu_check.dependency_closure(gpu_check.project_roots())
    for name in (
        "trl",
        "transformers",
        "datasets",
        "accelerate",
        "peft",
        "math-verify",
        "deepspeed",
        "pyyaml",
    ):
        assert closure[name] == version(name), name
    # The image's torch (and its CUDA libraries) is used as it is; matplotlib is left out for the size limit.
    assert not [name for name in closure if gpu_check._not_carried(name)]
    assert "torch" not in closure and "matplotlib" not in closure and "pillow" not in closure
    # A dependency that only an excluded package needs is not carried either (pandas comes with datasets).
    assert "pandas" in closure and "kiwisolver" not in closure


def test_the_project_admits_the_gpu_images_torch():
    """The image's torch 2.11 is used as it is: the project's range must admit it."""
    from packaging.requirements import Requirement

    torch = next(r for r in map(Requirement, requires("grpo-recipes")) if r.name == "torch")
    assert torch.specifier.contains("2.11.0")


def test_install_pack_makes_a_venv_that_sees_this_pythons_packages_and_installs_once(tmp_path):
    """A pack of one wheel built here: installed offline into a venv without pip of its own, next to the
    packages of the Python that made it; a second call finds the same pack installed and does nothing."""
    project = tmp_path / "tinypkg"
    (project / "tinypkg").mkdir(parents=True)
    (project / "tinypkg" / "__init__.py").write_text("VALUE = 42\n")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "1.0"\n'
    )
    pack = tmp_path / "pack"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(pack / "wheels"), str(project)],
        check=True,
    )  # fmt: skip
    (pack / "requirements.txt").write_text("tinypkg==1.0\n")
    (pack / "manifest.json").write_text(json.dumps({"packages": {"tinypkg": "1.0"}}))
    lines = []
    python = gpu_check.install_pack(pack, tmp_path / "venv", log=lines.append)
    assert python == tmp_path / "venv" / "bin" / "python" and len(lines) == 1
    code = "import tinypkg, yaml; print(tinypkg.VALUE)"  # yaml: from the Python that made the venv
    assert (
        subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout == "42\n"
    )
    assert gpu_check.install_pack(pack, tmp_path / "venv", log=lines.append) == python and len(lines) == 1


@pytest.mark.parametrize("rank", [4, None])
def test_memory_measurement_trains_what_the_estimate_counts(rank):
    """The memory step's model, on this CPU at a tiny size: LoRA trains exactly the adapter that
    `memory.lora_parameter_count` counts, full fine-tuning every parameter that `parameter_count` counts."""
    shape = dict(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True,
    )  # fmt: skip
    figures = gpu_check.measure_memory(
        "tiny-qwen2", rank, steps=2, batch=2, tokens=16, device="cpu", shape=shape
    )
    expected = lora_parameter_count(shape, rank) if rank else parameter_count(shape)
    assert figures["trained_parameters"] == expected
    assert figures["peak_gb"] is None and figures["estimate_without_activations_gb"] >= 0


@pytest.mark.slow
@pytest.mark.long  # a tiny run of the default recipe, about a minute
def test_a_tiny_run_is_checked_from_the_devices_its_files_record(tiny_model, tmp_path):
    """The check's recipe step on this CPU: the run passes where CPU and float32 are expected, and the same
    run's files, read for CUDA and bfloat16 as on a GPU, name every piece that ran elsewhere."""
    result = gpu_check.recipe_step(
        "default-lora", "default.yaml", tiny_model, tmp_path, timeout=900, device_type="cpu", dtype="float32"
    )
    assert result.status == "ok", result.line()
    assert result.figures["steps"] == 5 and result.figures["policy"] == "cpu float32"
    assert result.figures["warm-up"] == "cpu" and result.figures["report"]
    problems = gpu_check.placement_problems(tmp_path / "default-lora", "cuda", "bfloat16")
    assert problems == [
        "the policy trained on cpu, not cuda",
        "the policy's weights are float32, not bfloat16",
        "no GPU memory was used (peak 0)",
        "the warm-up ran on cpu, not cuda",
        "the after evaluation ran on cpu, not cuda",
        "the base evaluation ran on cpu, not cuda",
        "the before evaluation ran on cpu, not cuda",
    ]


def _index_answers() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/trl/", timeout=10).close()
    except OSError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.long  # downloads about 50 MiB from the package index
def test_gpu_wheels_fills_a_pack_under_the_size_limit(tmp_path):
    if not _index_answers():
        pytest.skip("needs the package index (pypi.org)")
    from grpo_recipes.launch.smoke import LOCAL_TOKENIZER

    if not (LOCAL_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip("needs the local SmolLM2 tokenizer (make model)")
    manifest = gpu_check.prepare_pack(tmp_path / "pack", log=lambda _: None)
    pack = tmp_path / "pack"
    assert gpu_check.pack_size_mib(pack) <= gpu_check.PACK_LIMIT_MIB
    assert manifest["size_mib"] <= gpu_check.PACK_LIMIT_MIB
    requirements = (pack / "requirements.txt").read_text().split()
    assert (
        f"trl=={version('trl')}" in requirements
        and f"transformers=={version('transformers')}" in requirements
    )
    assert (pack / "sdists.txt").read_text().split() == [f"deepspeed=={version('deepspeed')}"]
    wheels = sorted(p.name for p in (pack / "wheels").iterdir())
    compiled = [name for name in wheels if "-cp3" in name and "abi3" not in name]
    assert compiled and all("-cp312-" in name for name in compiled), compiled
    assert any(name.startswith("deepspeed-") and name.endswith(".tar.gz") for name in wheels)
    assert (pack / "tokenizer" / "tokenizer.json").is_file()
