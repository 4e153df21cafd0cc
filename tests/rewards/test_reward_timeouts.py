"""Bounded time: sympy runs in killable worker processes, whatever thread the reward is called from."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from support import alive

import rewards
from rewards import get_reward
from rewards.worker_pool import POOL, Job

TIMEOUT = 2.0  # per completion; generous enough that a legitimate check never hits it under load
MARGIN = 1.5  # scheduling slack on a loaded 2-core machine; a worker restart is not counted
SLOW = r"\boxed{9^{9^{9^{9}}}}"  # sympy tries to evaluate this tower for ever


@pytest.fixture()
def reward():
    reward = get_reward("math_accuracy", timeout_seconds=TIMEOUT)
    reward.warmup()
    return reward


def test_slow_completion_in_the_main_thread_scores_zero_in_time(reward):
    began = time.monotonic()
    assert reward([SLOW], solution=["7"]) == [0.0]
    assert time.monotonic() - began < TIMEOUT + MARGIN
    assert reward([r"\boxed{(y+1)^2}"], solution=["y^2+2y+1"]) == [1.0]  # and the next call still works


def test_slow_completion_in_a_worker_thread_scores_zero_in_time(reward):
    results = {}

    def run():
        began = time.monotonic()
        results["scores"] = reward([SLOW], solution=["3"])
        results["took"] = time.monotonic() - began

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert results["scores"] == [0.0]
    assert results["took"] < TIMEOUT + MARGIN
    assert reward([r"\boxed{(z+1)^2}"], solution=["z^2+2z+1"]) == [1.0]


def test_a_worker_stuck_past_its_deadline_is_killed_and_replaced(reward):
    """The worker's own alarm is disabled (soft_timeout far away), so only the kill can stop it."""
    old = POOL.worker_pids()
    began = time.monotonic()
    assert POOL.run([Job("1", (r"9^{9^{9^{9}}}",))], timeout=TIMEOUT, soft_timeout=600) == ["timeout"]
    assert time.monotonic() - began < TIMEOUT + MARGIN
    time.sleep(0.2)
    assert old and not any(alive(pid) for pid in old)
    assert POOL.run([Job("x^2-1", ("(x-1)(x+1)",))], timeout=30) == ["equal"]
    assert POOL.worker_pids() and POOL.worker_pids() != old


def test_each_completion_gets_its_own_deadline_and_good_ones_still_score(reward):
    completions = [SLOW, r"\boxed{(t+1)^2}", r"\boxed{(10^{10})!}", r"\boxed{t^2+2t+1}"]
    began = time.monotonic()
    scores = reward(completions, solution=["t^2+2t+1"] * 4)
    assert scores == [0.0, 1.0, 0.0, 1.0]
    assert time.monotonic() - began < 2 * (TIMEOUT + MARGIN) + 3  # two timeouts (+ a restart)


def test_concurrent_calls_from_threads_are_safe(reward):
    outcomes = []

    def run(k: int):
        outcomes.append(
            reward([rf"\boxed{{(s+{k})^2}}", r"\boxed{0}"], solution=[f"s^2+{2 * k}s+{k * k}", "1"])
        )

    threads = [threading.Thread(target=run, args=(k,)) for k in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcomes == [[1.0, 0.0]] * 4


def test_several_workers_share_a_batch():
    reward = get_reward("math_accuracy", num_workers=2)
    golds = [f"r^2+{2 * k}r+{k * k}" for k in range(1, 7)]
    answers = [rf"\boxed{{(r+{k})^2}}" for k in range(1, 7)]
    assert reward(answers, solution=golds) == [1.0] * 6
    assert len(POOL.worker_pids()) == 2


def test_shutdown_stops_every_worker_and_they_restart_on_demand(reward):
    pids = POOL.worker_pids()
    assert pids
    rewards.shutdown_workers()
    assert not any(alive(pid) for pid in pids)
    assert POOL.worker_pids() == []
    assert reward([r"\boxed{(q+1)^2}"], solution=["q^2+2q+1"]) == [1.0]


def test_workers_do_not_outlive_the_interpreter(tmp_path):
    script = textwrap.dedent(
        r"""
        import rewards
        from rewards.worker_pool import POOL
        print(rewards.get_reward("math_accuracy")([r"\boxed{(p+1)^2}"], solution=["p^2+2p+1"]))
        print(*POOL.worker_pids())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    lines = out.stdout.split("\n")
    assert lines[0] == "[1.0]"
    pids = [int(pid) for pid in lines[1].split()]
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids and not any(alive(pid) for pid in pids)


def test_workers_are_recycled_after_many_requests(monkeypatch):
    import rewards.worker_pool as sandbox

    monkeypatch.setattr(sandbox, "MAX_REQUESTS_PER_WORKER", 2)
    starts = POOL.counters["worker_starts"]
    jobs = [Job(f"o^2+{2 * k}o+{k * k}", (f"(o+{k})^2",)) for k in range(1, 4)]
    assert POOL.run(jobs, timeout=30) == ["equal"] * 3
    assert POOL.counters["worker_starts"] >= starts + 1


def test_a_worker_that_cannot_start_is_a_setup_error_not_a_zero(tmp_path, monkeypatch):
    import rewards.worker_pool as sandbox

    broken = tmp_path / "worker.py"
    broken.write_text(
        'print(\'{"error": "cannot import math_verify: No module named math_verify"}\', flush=True)\n'
    )
    rewards.shutdown_workers()
    monkeypatch.setattr(sandbox, "WORKER_SCRIPT", broken)
    reward = get_reward("math_accuracy")
    with pytest.raises(rewards.RewardSetupError, match="math_verify"):
        reward([r"\boxed{(n+1)^2}"], solution=["n^2+2n+1"])
    rewards.shutdown_workers()
