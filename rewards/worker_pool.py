"""Bounded-time symbolic checks: math-verify runs in persistent worker subprocesses with a hard deadline.

Why a subprocess: sympy can be made to run for hours (``9^{9^{9^{9}}}``) or exhaust memory, and
math-verify's own timeout uses ``SIGALRM``, which only works in the main thread -- TRL, evaluation
harnesses and tests call rewards from worker threads too. A separate process can always be killed.

How: :class:`VerifierPool` keeps up to ``workers`` processes running :mod:`rewards._sympy_worker`
(plain ``subprocess`` + JSON lines, so nothing depends on the parent's ``__main__``, and no ``fork``
happens next to torch's threads). Each request gets ``timeout`` seconds: the worker stops itself
after ~90% of it; if it has not answered when the time is up, it is killed and a replacement starts
at once. A worker's start-up (~1 s, importing sympy) does not count against a request's deadline.
Workers exit when their stdin closes, at interpreter exit (``atexit``) or on :func:`shutdown_workers`.

This module imports no sympy; only the worker does.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rewards.base import RewardSetupError

WORKER_SCRIPT = Path(__file__).with_name("_sympy_worker.py")
#: Longest wait for a fresh worker to import math-verify before its request is given up.
STARTUP_TIMEOUT_SECONDS = 60.0
#: A worker is recycled after this many requests, so sympy's caches cannot grow for a whole run.
MAX_REQUESTS_PER_WORKER = 20_000

Outcome = Literal["equal", "different", "no_gold", "timeout", "error"]


class WorkerUnavailableError(RewardSetupError):
    """The worker cannot run at all (math-verify is not installed in this interpreter)."""


@dataclass(frozen=True)
class Job:
    """One question for a worker: is every answer equivalent to the gold? (LaTeX strings)

    With no answers, the question is whether math-verify parses the gold at all.
    """

    gold: str
    answers: tuple[str, ...]


class _Worker:
    """One worker process and the line-based pipe protocol to it.

    ``script`` is the worker program: the sympy worker (:data:`WORKER_SCRIPT`) by default; any script that
    answers the same start-up handshake (``{"ready": true}`` or ``{"error": ...}``) and one JSON reply per
    request line.
    """

    def __init__(self, script: Path | None = None) -> None:
        self.script = script
        self.process = subprocess.Popen(
            [sys.executable, "-u", str(script or WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # inherited: a crash's traceback stays visible; nothing is written otherwise
            bufsize=0,
            close_fds=True,
        )
        self._buffer = b""
        self.ready = False
        self.requests = 0
        assert self.process.stdout is not None
        self._poller = select.poll()
        self._poller.register(self.process.stdout.fileno(), select.POLLIN)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def _read_message(self, deadline: float) -> dict | None:
        """The next JSON line, or None if the deadline passes or the worker dies first."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    return json.loads(line)
                except ValueError:  # a stray print from a library, not a reply
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            # poll(), not select(): select() fails on descriptors above 1024, common in training jobs.
            if not self._poller.poll(math.ceil(remaining * 1000)):
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF: the worker died
                return None
            self._buffer += chunk

    def wait_ready(self) -> bool:
        """Wait for the start-up handshake. False if it does not come; raises if math-verify is missing."""
        if self.ready:
            return True
        message = self._read_message(time.monotonic() + STARTUP_TIMEOUT_SECONDS)
        if message is not None and "error" in message:
            what = "math_accuracy's sympy worker" if self.script is None else self.script.name
            raise WorkerUnavailableError(f"{what} cannot start: {message['error']}")
        self.ready = message is not None and message.get("ready") is True
        return self.ready

    def request(self, message: dict, timeout: float) -> dict | None:
        """Send one request; its reply, or None on timeout or crash."""
        assert self.process.stdin is not None
        try:
            os.write(self.process.stdin.fileno(), (json.dumps(message) + "\n").encode())
        except OSError:  # broken pipe: the worker is gone
            return None
        return self._read_message(time.monotonic() + timeout)

    def kill(self) -> None:
        if self.alive:
            self.process.kill()
        self._reap(timeout=5.0)

    def close(self) -> None:
        """Ask the worker to exit (close its stdin), then kill it if it lingers."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        if not self._reap(timeout=2.0):
            self.kill()

    def _reap(self, timeout: float) -> bool:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        for pipe in (self.process.stdin, self.process.stdout):  # a killed worker's stdin is still open
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return True


class _Slot:
    """A place for one worker; its lock makes one thread at a time talk to that worker."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.worker: _Worker | None = None


class VerifierPool:
    """Up to N sympy workers shared by every reward instance in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._pid = os.getpid()
        self._atexit_registered = False
        self.counters = {"worker_starts": 0, "requests": 0, "timeouts": 0, "crashes": 0}

    def _slots_for(self, workers: int) -> list[_Slot]:
        with self._lock:
            if os.getpid() != self._pid:
                # We are a forked child: the workers (and their pipes) belong to the parent. Start afresh.
                self._slots, self._pid = [], os.getpid()
            while len(self._slots) < workers:
                self._slots.append(_Slot())
            if not self._atexit_registered:
                atexit.register(self.shutdown)
                self._atexit_registered = True
            return self._slots[:workers]

    def _count(self, counter: str) -> None:
        with self._lock:
            self.counters[counter] += 1

    def _start(self, slot: _Slot) -> _Worker:
        slot.worker = _Worker()
        self._count("worker_starts")
        return slot.worker

    def _live_worker(self, slot: _Slot) -> _Worker:
        """The slot's worker, or a new one if it has none or it died (the dead one is reaped)."""
        if slot.worker is not None and slot.worker.alive:
            return slot.worker
        if slot.worker is not None:
            slot.worker.kill()
        return self._start(slot)

    def warmup(self, workers: int = 1) -> None:
        """Start the workers now and wait until they are ready."""
        for slot in self._slots_for(workers):
            with slot.lock:
                self._live_worker(slot).wait_ready()

    def run(
        self,
        jobs: Sequence[Job],
        timeout: float,
        workers: int = 1,
        soft_timeout: float | None = None,
    ) -> list[Outcome]:
        """Decide each job within ``timeout`` seconds of worker time; jobs spread over ``workers`` processes.

        ``soft_timeout`` (default 90% of ``timeout``) is when the worker gives up by itself; the
        parent kills it at ``timeout`` regardless.
        """
        if not jobs:
            return []
        soft = 0.9 * timeout if soft_timeout is None else soft_timeout
        queue = deque(enumerate(jobs))
        outcomes: list[Outcome] = ["error"] * len(jobs)
        failures: list[BaseException] = []

        def drain(slot: _Slot) -> None:
            with slot.lock:
                while True:
                    try:
                        index, job = queue.popleft()
                    except IndexError:
                        return
                    try:
                        outcomes[index] = self._run_one(slot, job, timeout, soft)
                    except WorkerUnavailableError as error:
                        failures.append(error)
                        return

        slots = self._slots_for(max(1, min(workers, len(jobs))))
        if len(slots) == 1:
            drain(slots[0])
        else:
            threads = [threading.Thread(target=drain, args=(slot,), daemon=True) for slot in slots]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if failures:
            raise failures[0]
        return outcomes

    def _run_one(self, slot: _Slot, job: Job, timeout: float, soft_timeout: float) -> Outcome:
        worker = self._live_worker(slot)
        if not worker.wait_ready():
            worker.kill()
            slot.worker = None
            self._count("crashes")
            return "error"
        self._count("requests")
        worker.requests += 1
        started = time.monotonic()
        reply = worker.request(
            {"op": "verify", "gold": job.gold, "answers": list(job.answers), "soft_timeout": soft_timeout},
            timeout,
        )
        if reply is None:
            # Overran the deadline (or died): kill it, and start the replacement now so it warms up
            # while the caller moves on.
            timed_out = time.monotonic() - started >= timeout
            self._count("timeouts" if timed_out else "crashes")
            worker.kill()
            self._start(slot)
            return "timeout" if timed_out else "error"
        if worker.requests >= MAX_REQUESTS_PER_WORKER:
            worker.close()
            self._start(slot)
        if reply.get("timeout"):
            self._count("timeouts")
            return "timeout"
        if reply.get("gold_ok") is False:
            return "no_gold"
        return "equal" if reply.get("equal") else "different"

    def worker_stats(self) -> list[dict]:
        """Counters reported by each live worker (``gold_parses``, ``answer_parses``, ...)."""
        stats = []
        for slot in list(self._slots):
            with slot.lock:
                worker = slot.worker
                if worker is not None and worker.alive and worker.wait_ready():
                    reply = worker.request({"op": "stats"}, timeout=10.0)
                    if reply is not None:
                        stats.append(reply)
        return stats

    def worker_pids(self) -> list[int]:
        return [
            slot.worker.process.pid for slot in self._slots if slot.worker is not None and slot.worker.alive
        ]

    def shutdown(self) -> None:
        """Stop every worker (they restart on demand)."""
        with self._lock:
            slots = list(self._slots) if os.getpid() == self._pid else []
        for slot in slots:
            with slot.lock:
                if slot.worker is not None:
                    slot.worker.close()
                    slot.worker = None


#: The process-wide pool (module-level, so reward instances stay small and picklable).
POOL = VerifierPool()


def shutdown_workers() -> None:
    """Stop all sympy worker processes now (they are restarted on demand)."""
    POOL.shutdown()
