"""A user's own tools and environments, named by import path (``user_tools:convert``) in the agents tests.

Written the way a user writes them: postponed annotations (``from __future__ import annotations``, so every
annotation is a string) and typing names this module imports, which the package's modules do not.
"""

from __future__ import annotations

import threading
from typing import Literal

#: Set by the tests to let a blocked tool finish, so that no thread outlives its test for long.
RELEASE = threading.Event()


def convert(value: float, unit: Literal["cm", "in"]) -> str:
    """Convert a length to the other unit.

    Args:
        value: The length.
        unit: The unit `value` is in.
    """
    return f"{value * 2.54:g} cm" if unit == "in" else f"{value / 2.54:g} in"


def undocumented(x: int) -> int:
    return x


def unannotated(x) -> int:
    """Return x.

    Args:
        x: Anything.
    """
    return x


class NotAFunction:
    """A class, where a tool (a function) is expected.

    Args:
        x: Anything.
    """

    def __init__(self, x: int = 0) -> None:
        self.x = x


class Walk:
    """Walk along a line; the reward is the final position."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.position = start

    def reset(self, start: int | None = None, **row) -> str:
        self.position = self.start if start is None else start
        return f" You stand at {self.position}."

    def move(self, direction: Literal["left", "right"], steps: int = 1) -> str:
        """Move along the line.

        Args:
            direction: Which way to go.
            steps: How far.
        """
        self.position += steps if direction == "right" else -steps
        return f"at {self.position}"

    def wait(self, seconds: float) -> str:
        """Wait, up to `seconds` or until released.

        Args:
            seconds: How long.
        """
        RELEASE.wait(seconds)
        return "waited"

    def fail(self, message: str) -> str:
        """Raise an error.

        Args:
            message: The error's text.
        """
        raise RuntimeError(message)

    def get_reward(self) -> float:
        return float(self.position)


class NoReset:
    def act(self, x: int) -> str:
        """Act.

        Args:
            x: How much.
        """
        return str(x)

    def get_reward(self) -> float:
        return 0.0


class NoReward:
    def reset(self, **row) -> None:
        pass

    def act(self, x: int) -> str:
        """Act.

        Args:
            x: How much.
        """
        return str(x)


class NoPublicMethod:
    def reset(self, **row) -> None:
        pass

    def _hidden(self, x: int) -> str:
        return str(x)

    def get_reward(self) -> float:
        return 0.0


class UndescribedMethod:
    def reset(self, **row) -> None:
        pass

    def act(self, x: int, y: int) -> str:
        """Act.

        Args:
            x: How much.
        """
        return str(x + y)

    def get_reward(self) -> float:
        return 0.0
