"""Tools and environments: what a model may call during a multi-turn rollout, and how the calls are guarded.

- ``tools``: the tool registry (``get_tool``: a shipped tool by name, or a user's own by import path
  ``package.module:function``) and the guard every call goes through (timeout, error text, truncation, counts).
- ``calculator``: a safe arithmetic evaluator (an ``ast`` walk over numbers and operators; never ``eval``).
- ``python_tool``: runs a snippet of Python in the code tasks' sandbox and returns what it printed.
- ``environments``: stateful environments (``reset(**row)``, public methods as tools, ``get_reward()``), and
  their registry (``get_environment``).
- ``templates``: the chat template a tool recipe uses, and the check that TRL can parse its tool calls.
- ``rollout``: the multi-turn loop (generate, run the calls, feed back the results) for evaluation.
- ``demonstrations``: the one-call conversations of a recipe's supervised warm-up.

Torch-free: may import ``rewards`` and ``sandbox`` and nothing else of the project, so the recipe loader can
check tool and environment names before anything heavy loads.
"""

from . import calculator, python_tool  # noqa: F401 - the shipped tools register themselves
from .environments import ENVIRONMENTS, get_environment_class, register_environment
from .tools import TOOLS, ToolError, ToolStats, get_tool, guard, register_tool, tool_schema_problems

__all__ = [
    "ENVIRONMENTS",
    "TOOLS",
    "ToolError",
    "ToolStats",
    "get_environment_class",
    "get_tool",
    "guard",
    "register_environment",
    "register_tool",
    "tool_schema_problems",
]
