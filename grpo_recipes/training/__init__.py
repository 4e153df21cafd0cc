"""Training: a recipe's run from data to saved model.

- ``train``: the run, read top to bottom as labelled steps (check, data, before-evaluation, trainer,
  training, after-evaluation, summary and report).
- ``trainer``: the GRPOTrainer subclass (CPU vLLM sync, dynamic sampling hooks).
- ``dynamic_sampling``: replaces groups whose rewards are all equal with fresh ones.
- ``console``: the one line per optimizer step.

May import the shared modules of ``grpo_recipes`` and its ``evaluation`` (before/after accuracy, the run
report) and ``launch`` (pre-flight checks, the CPU vLLM sync); nothing imports ``training`` but scripts.
"""
