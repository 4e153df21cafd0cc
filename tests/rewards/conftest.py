"""Fixtures for the rewards tests: the shared real data (skipped when absent) and worker cleanup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rewards

#: repo_root/../shared/data: real GSM8K and MATH-500 files, present on CI and dev machines, not on users'.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _rows(relative: str) -> list[dict]:
    path = SHARED_DATA / relative
    if not path.is_file():
        pytest.skip(f"{path} not found: the real-data audits need the shared data folder next to the repo")
    with path.open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="session")
def gsm8k_test_rows() -> list[dict]:
    """All 1319 rows of GSM8K's test split (question, answer ending in '#### N')."""
    return _rows("gsm8k/test.jsonl")


@pytest.fixture(scope="session")
def math500_rows() -> list[dict]:
    """All 500 rows of MATH-500 (problem, solution with \\boxed{}, answer, subject, level)."""
    return _rows("math500/test.jsonl")


@pytest.fixture(scope="session", autouse=True)
def _stop_sympy_workers():
    """No worker process outlives the test session."""
    yield
    rewards.shutdown_workers()
