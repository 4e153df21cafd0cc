"""The worker process that runs math-verify (sympy) on answers the fast path could not decide.

Run as ``python _sympy_worker.py`` by :mod:`rewards.worker_pool`; it imports nothing from the ``rewards``
package, so it starts the same way whatever the parent's ``__main__`` is. Protocol: one JSON object
per line on stdin, one JSON reply per line on stdout.

* startup: replies ``{"ready": true}`` once math-verify is imported (or ``{"error": "..."}``).
* ``{"op": "verify", "gold": "...", "answers": ["...", ...], "soft_timeout": 4.5}``:
  replies ``{"equal": true}`` when every answer is equivalent to the gold, ``{"equal": false}``
  otherwise, ``{"timeout": true}`` when the work overran ``soft_timeout`` seconds, ``{"gold_ok": false}``
  when the gold itself does not parse. With no answers, only the gold is parsed.
* ``{"op": "stats"}``: replies with counters (how many golds and answers were parsed, ...).

``soft_timeout`` is enforced here with ``SIGALRM`` (this process is single-threaded, so that works);
the parent additionally kills this process if no reply comes in time, which covers work stuck in C
code where a signal cannot interrupt it. The process exits when its stdin closes.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from functools import lru_cache

#: Address-space cap, so a pathological expression fails with MemoryError instead of swapping the host.
MEMORY_LIMIT_BYTES = 4 * 1024**3

STATS = {"gold_parses": 0, "answer_parses": 0, "verifications": 0, "timeouts": 0}


class _SoftTimeout(BaseException):
    """Raised by SIGALRM. A BaseException, so that math-verify's and sympy's ``except Exception``
    handlers cannot swallow it and report "not equal" for what was really a timeout."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _SoftTimeout


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent; we exit when stdin closes
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    try:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except Exception as error:  # reported to the parent, which raises a clear error
        _reply({"error": f"cannot import math_verify in {sys.executable}: {error!r}"})
        return
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # "timeout disabled" warnings: we time out here
    signal.signal(signal.SIGALRM, _on_alarm)
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]

    @lru_cache(maxsize=1024)
    def parse_gold(gold: str) -> list:
        STATS["gold_parses"] += 1
        return parse("\\boxed{" + gold + "}", extraction_config=config, parsing_timeout=None)

    @lru_cache(maxsize=4096)
    def parse_answer(answer: str) -> list:
        STATS["answer_parses"] += 1
        return parse("\\boxed{" + answer + "}", extraction_config=config, parsing_timeout=None)

    def run_verify(request: dict) -> dict:
        gold = parse_gold(request["gold"])
        if not gold:
            return {"equal": False, "gold_ok": False}
        for answer in request["answers"]:
            STATS["verifications"] += 1
            parsed = parse_answer(answer)
            if not parsed or not verify(gold, parsed, timeout_seconds=None):
                return {"equal": False}
        return {"equal": True}

    _reply({"ready": True})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if request.get("op") == "stats":
                _reply(dict(STATS))
                continue
            signal.setitimer(signal.ITIMER_REAL, max(float(request.get("soft_timeout", 5.0)), 0.01))
            try:
                reply = run_verify(request)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            STATS["timeouts"] += 1
            reply = {"timeout": True}
        except Exception:  # sympy raises anything (MemoryError too): "not equal"
            reply = {"equal": False}
        _reply(reply)


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
