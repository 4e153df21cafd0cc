"""What training prints: one readable line per logged step, under the progress bar.

transformers prints every log as a raw dict (its ProgressCallback, or PrinterCallback when tqdm is off); that
dict stays in `log_history.json` and the trackers, and the console gets `step_line` instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ..evaluation.report import format_duration


def step_line(logs: dict[str, Any], step: int, max_steps: int, elapsed_seconds: float) -> str:
    """One logged step as people read it: reward, curriculum level (a run with one), zero-variance groups,
    length, tool use (a run with tools), time.

    >>> step_line({"reward": 0.625, "zero_variance_groups": 0.5, "completions/mean_length": 23.5,
    ...            "completions/clipped_ratio": 0.125, "step_time": 9.71}, 3, 70, 31.2)
    'step 3/70  reward 0.625  zero-variance groups 0.50  mean length 23.5 (12 % clipped)  9.7 s/step  (31 s)'
    >>> step_line({"reward": 0.5, "curriculum/level": 2.0}, 4, 70, 40.0)
    'step 4/70  reward 0.500  level 2  (40 s)'
    >>> step_line({"reward": 0.25, "divergence": 0.4123}, 5, 60, 50.0)
    'step 5/60  reward 0.250  divergence 0.412  (50 s)'
    """
    parts = [f"step {step}/{max_steps}", f"reward {logs['reward']:.3f}"]
    if "divergence" in logs:  # distillation: the loss it trains on; the reward is only measured
        parts.append(f"divergence {logs['divergence']:.3f}")
    if "curriculum/level" in logs:
        parts.append(f"level {logs['curriculum/level']:g}")
    if "zero_variance_groups" in logs:
        parts.append(f"zero-variance groups {logs['zero_variance_groups']:.2f}")
    if "groups_generated" in logs:
        parts.append(f"kept {logs['groups_kept']:.0f}/{logs['groups_generated']:.0f} groups")
    if "completions/mean_length" in logs:
        clipped = (
            f" ({100 * logs['completions/clipped_ratio']:.0f} % clipped)"
            if "completions/clipped_ratio" in logs
            else ""
        )
        parts.append(f"mean length {logs['completions/mean_length']:.1f}{clipped}")
    tools = tool_part(logs)
    if tools:
        parts.append(tools)
    if "step_time" in logs:
        parts.append(f"{logs['step_time']:.1f} s/step")
    parts.append(f"({format_duration(elapsed_seconds)})")
    return "  ".join(parts)


def tool_part(logs: dict[str, Any]) -> str:
    """The tool use of a logged step, for a run with tools (empty otherwise): TRL's `tools/call_frequency`
    (calls per completion) and the guarded tools' `tools/failures` and `tools/timeouts` (TRL's
    `tools/failure_frequency`, a share of the calls, where those counts are not logged).

    >>> tool_part({"tools/call_frequency": 0.75, "tools/failures": 2.0, "tools/timeouts": 1.0})
    'tool calls 0.75/completion (2 failed, 1 timed out)'
    >>> tool_part({"tools/call_frequency": 1.0, "tools/failure_frequency": 0.125})
    'tool calls 1.00/completion (12 % failed)'
    >>> tool_part({"reward": 0.5})
    ''
    """
    present = {key for key in logs if key.startswith("tools/") and _number(logs[key])}
    details = []
    if "tools/failures" in present:
        details.append(f"{logs['tools/failures']:.3g} failed")
    elif "tools/failure_frequency" in present:
        details.append(f"{100 * logs['tools/failure_frequency']:.0f} % failed")
    if "tools/timeouts" in present:
        details.append(f"{logs['tools/timeouts']:.3g} timed out")
    if "tools/call_frequency" not in present:
        return f"tools: {', '.join(details)}" if details else ""
    text = f"tool calls {logs['tools/call_frequency']:.2f}/completion"
    return text + (f" ({', '.join(details)})" if details else "")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def step_log_callback(log: Callable[[str], Any], max_steps: int):
    """A trainer callback that writes `step_line` for every logged training step (main process only)."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class StepLog(TrainerCallback):
        """One readable line per logged step: the mean reward is what tells a run is learning."""

        def __init__(self):
            self.start = time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "reward" not in logs:
                return
            line = step_line(logs, state.global_step, max_steps or state.max_steps, time.time() - self.start)
            with tqdm.external_write_mode():  # lift the progress bar, write the line, redraw the bar below it
                log(line)

    return StepLog()


def quiet_raw_logs(trainer) -> None:
    """Keep transformers' progress bar but not its raw dict of each log; drop PrinterCallback (tqdm off).

    A notebook's progress table, or any other progress callback, is left as it is.
    """
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        """transformers' progress bar, without writing `str(logs)` under it at every step."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            pass

    for callback in list(trainer.callback_handler.callbacks):
        if type(callback) is ProgressCallback:
            trainer.remove_callback(callback)
            trainer.add_callback(BarOnly())
        elif type(callback) is PrinterCallback:
            trainer.remove_callback(callback)
