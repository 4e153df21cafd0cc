"""The difficulty curriculum of a generated task (the recipe's `curriculum:` section): which level's prompts
the next batch is drawn from, moved by how the groups at the current level fare.

A group is judged by its share of right completions (its pass rate): all right (1.0) teaches nothing because
the task is too easy, all wrong (0.0) teaches nothing because it is too hard. Every `window` groups the
controller looks back: when at least `raise_at` of them were all right it moves one level up, else when at
least `lower_at` of them were all wrong it moves one level down (up is checked first, so with both it goes
up); it stays within the levels, and each judgement starts a fresh window. It is plain Python and
deterministic: processes that feed it the same gathered pass rates take the same decisions.

Example: a window of 4 groups, all solved, then all failed::

    >>> controller = CurriculumController(levels=3, start=0, window=4)
    >>> controller.observe([1.0, 1.0, 1.0, 0.5])
    1
    >>> controller.level, controller.observe([0.0] * 4), controller.level
    (1, -1, 0)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The controller's state in each checkpoint folder.
STATE_FILE = "curriculum.json"


class CurriculumController:
    """The current level, moved by the pass rates of the groups generated at it."""

    def __init__(
        self,
        levels: int,
        start: int = 0,
        window: int = 8,
        raise_at: float = 0.5,
        lower_at: float = 0.5,
    ) -> None:
        if levels < 1 or not 0 <= start < levels or window < 1:
            raise ValueError(
                f"need levels >= 1, 0 <= start < levels, window >= 1; got {levels}, {start}, {window}"
            )
        self.levels, self.window, self.raise_at, self.lower_at = levels, window, raise_at, lower_at
        self.level = start
        self.moves = 0
        self._pending: list[float] = []

    def observe(self, pass_rates: Iterable[float]) -> int:
        """Take the pass rates of groups generated at the current level; returns the move made (-1, 0 or +1).

        A move drops the rest of `pass_rates`: they were measured at the level just left.

        >>> controller = CurriculumController(levels=2, start=1, window=2)
        >>> controller.observe([1.0, 1.0]), controller.level  # already at the top: stays
        (0, 1)
        """
        for rate in pass_rates:
            self._pending.append(float(rate))
            if len(self._pending) < self.window:
                continue
            move = self._judge(self._pending)
            self._pending = []
            if move:
                self.level += move
                self.moves += 1
                return move
        return 0

    def _judge(self, rates: list[float]) -> int:
        all_right = sum(rate >= 1.0 for rate in rates) / len(rates)
        all_wrong = sum(rate <= 0.0 for rate in rates) / len(rates)
        if all_right >= self.raise_at:  # checked first: when both hold, up (or stay, at the top)
            return 1 if self.level < self.levels - 1 else 0
        if all_wrong >= self.lower_at:
            return -1 if self.level > 0 else 0
        return 0

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (plain JSON data).

        >>> CurriculumController(levels=3, start=2).state_dict()
        {'level': 2, 'moves': 0, 'pending': []}
        """
        return {"level": self.level, "moves": self.moves, "pending": list(self._pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`'s data; a level beyond the levels (a recipe changed since) is clamped."""
        self.level = min(max(int(state["level"]), 0), self.levels - 1)
        self.moves = int(state.get("moves", 0))
        self._pending = [float(rate) for rate in state.get("pending", [])][: self.window - 1]


def group_pass_rates(right: list[bool], group_size: int) -> list[float]:
    """The share of right completions in each group of `group_size` consecutive completions.

    >>> group_pass_rates([True, True, False, False, False, False], 3)
    [0.6666666666666666, 0.0]
    """
    return [sum(right[i : i + group_size]) / group_size for i in range(0, len(right), group_size)]


@dataclass
class Curriculum:
    """What the trainer needs: the controller, where each level's pool sits in the training rows, and how a
    completion is judged right (its reward column at or above `solved_at`)."""

    controller: CurriculumController
    bounds: list[tuple[int, int]]
    """Each level's pool of training rows, (first row, end), easy to hard; all of one size."""
    reward_index: int
    """The judging reward's column in the rewards TRL computes (its index in the recipe's `rewards`)."""
    solved_at: float = 1.0

    @classmethod
    def for_recipe(cls, recipe: Any, bounds: list[tuple[int, int]]) -> Curriculum:
        """The curriculum of a recipe with a `curriculum:` section, over the pools `bounds` (`Splits.level_bounds`)."""
        spec = recipe.curriculum
        controller = CurriculumController(
            len(spec.levels), spec.start, spec.window, spec.raise_at, spec.lower_at
        )
        index = [reward.name for reward in recipe.rewards].index(spec.reward)
        return cls(controller, bounds, index, spec.solved_at)

    def right(self, rewards: list[list[float]]) -> list[bool]:
        """Per completion (a row of per-reward values): is it right? A missing (NaN) reward is not.

        >>> curriculum = Curriculum(CurriculumController(2), [(0, 4), (4, 8)], reward_index=1, solved_at=0.5)
        >>> curriculum.right([[0.0, 1.0], [1.0, 0.25], [1.0, float("nan")]])
        [True, False, False]
        """
        return [row[self.reward_index] >= self.solved_at for row in rewards]

    def at_current_level(self, row: dict[str, Any], rows: Any) -> dict[str, Any]:
        """`row`, or the row at its place in the current level's pool of `rows` (the training rows).

        >>> rows = [{"q": q, "curriculum_level": q // 2, "curriculum_row": q % 2} for q in range(4)]
        >>> curriculum = Curriculum(CurriculumController(2, start=1), [(0, 2), (2, 4)], reward_index=0)
        >>> curriculum.at_current_level(rows[1], rows)["q"], curriculum.at_current_level(rows[3], rows)["q"]
        (3, 3)
        """
        level = self.controller.level
        if row["curriculum_level"] == level:
            return row
        return rows[self.bounds[level][0] + row["curriculum_row"]]

    def save(self, folder: str | Path) -> None:
        """Write the controller's state into a checkpoint folder."""
        (Path(folder) / STATE_FILE).write_text(json.dumps(self.controller.state_dict()) + "\n")

    def load(self, folder: str | Path) -> bool:
        """Restore the controller's state from a checkpoint folder; False when it holds none."""
        path = Path(folder) / STATE_FILE
        if not path.is_file():
            return False
        self.controller.load_state_dict(json.loads(path.read_text()))
        return True


def checkpoint_callback(curriculum: Curriculum):
    """A trainer callback that writes the controller's state into each checkpoint folder (main process)."""
    from transformers import TrainerCallback

    class SaveCurriculum(TrainerCallback):
        """`curriculum.json` beside the weights of `<output_dir>/checkpoint-<step>`: what a resumed run reads."""

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                curriculum.save(folder)

    return SaveCurriculum()
