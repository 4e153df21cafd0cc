"""grpo-recipes: the small library under the recipes.

The package, top to bottom (each module's docstring says what it owns; ``docs/architecture.md`` draws it):

- ``training/``   the run (``train``), the GRPOTrainer subclass, dynamic sampling, the step line
- ``evaluation/`` generation, evaluation, metrics, run reports, the reward audit
- ``launch/``     pre-flight checks, ``make smoke``, the vLLM server, vLLM with a CPU policy
- ``recipe``, ``data``, ``models``, ``local_model``, ``reward_stack``, ``cli``, ``ports``: shared by all three
- ``tasks/``      generated datasets (arithmetic, Countdown, reasoning-gym)

Below the package sit ``rewards`` and ``sandbox``, which import nothing from it and no torch. Imports point
down only: the three subpackages above may import the shared modules and ``tasks``; ``training`` may import
``evaluation`` and ``launch`` (it evaluates before and after, checks before loading); nothing imports upward.

Imports are kept light here; torch, transformers and trl load only when a model is actually needed.

Modules that moved into a subpackage still import under their old names, with a DeprecationWarning that
names the new one:

    >>> import sys, warnings
    >>> _ = sys.modules.pop("grpo_recipes.metrics", None)  # as in a fresh process
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from grpo_recipes.metrics import pass_at_k
    >>> str(caught[0].message)
    'grpo_recipes.metrics moved to grpo_recipes.evaluation.metrics; import it from there.'
    >>> pass_at_k(n=4, c=2, k=1)
    0.5
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.1.0"

#: Old module name -> where it lives now.
MOVED_MODULES = {
    "grpo_recipes.countdown_task": "grpo_recipes.tasks.countdown",
    "grpo_recipes.reasoning_gym_tasks": "grpo_recipes.tasks.reasoning_gym",
    "grpo_recipes.train": "grpo_recipes.training.train",
    "grpo_recipes.trainer": "grpo_recipes.training.trainer",
    "grpo_recipes.dynamic_sampling": "grpo_recipes.training.dynamic_sampling",
    "grpo_recipes.console": "grpo_recipes.training.console",
    "grpo_recipes.generate": "grpo_recipes.evaluation.generate",
    "grpo_recipes.evaluate": "grpo_recipes.evaluation.evaluate",
    "grpo_recipes.metrics": "grpo_recipes.evaluation.metrics",
    "grpo_recipes.report": "grpo_recipes.evaluation.report",
    "grpo_recipes.audit": "grpo_recipes.evaluation.audit",
    "grpo_recipes.preflight": "grpo_recipes.launch.preflight",
    "grpo_recipes.smoke": "grpo_recipes.launch.smoke",
    "grpo_recipes.serve": "grpo_recipes.launch.serve",
    "grpo_recipes.vllm_cpu": "grpo_recipes.launch.vllm_cpu",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves an old module name with the module at its new place (the same module object, so state and
    monkeypatches are shared), warning once per import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new_name = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new_name}; import it from there.", DeprecationWarning, stacklevel=2
        )
        return importlib.import_module(new_name)

    def exec_module(self, module):
        """The module was executed under its new name already."""


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
