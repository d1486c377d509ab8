"""Bisection over checkpoints on scripted monotone predicates with known answers."""

import math

import pytest

from emergence_bench.analysis.bisection import bisect_steps
from emergence_bench.callbacks.checkpoints import schedule


def scripted(first: int | None):
    """A monotone predicate that solves from step ``first`` on (never when None), counting its calls."""
    calls = []

    def solves(step: int) -> bool:
        calls.append(step)
        return first is not None and step >= first

    return solves, calls


def test_finds_the_first_solving_checkpoint_with_log2_evaluations():
    steps = schedule(10_000, every=50, log_spaced=True)  # 0, 1, 2, 4, …, 8192, and every 50
    solves, calls = scripted(first=1234)
    found = bisect_steps(steps, solves)
    assert found.first_solved == 1250 and found.last_unsolved == 1200  # the checkpoints bracketing 1234
    assert found.evaluations == len(calls) == len(set(calls))  # never the same checkpoint twice
    assert found.evaluations <= math.ceil(math.log2(len(steps) + 1))
    assert found.evaluations >= math.floor(math.log2(len(steps)))  # and the cost really is ~log2(n)
    assert [s for s, _ in found.evaluated] == calls
    assert found.to_dict()["bracket"] == [1200, 1250] and not found.censored


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 33])
def test_every_emergence_point_against_brute_force(n):
    steps = [10 * i for i in range(n)]
    for k in range(n + 1):  # k = n: never solved
        first = steps[k] if k < n else None
        solves, calls = scripted(first)
        found = bisect_steps(list(reversed(steps)), solves)  # the order given does not matter
        assert found.first_solved == first
        assert found.last_unsolved == (steps[k - 1] if k > 0 else None)
        assert found.censored == (first is None)
        assert len(calls) <= math.ceil(math.log2(n + 1))


def test_never_solved_is_censored_at_the_last_checkpoint_and_solved_from_the_start_has_no_before():
    never = bisect_steps([0, 100, 200, 300], scripted(None)[0])
    assert never.first_solved is None and never.last_unsolved == 300 and never.censored
    always = bisect_steps([0, 100, 200, 300], scripted(0)[0])
    assert always.first_solved == 0 and always.last_unsolved is None
    empty = bisect_steps([], scripted(0)[0])
    assert empty.first_solved is None and empty.evaluations == 0
