"""rewards.assert_units: which units of a check are tests (asserts that exercise the candidate, through the test
file's helpers and the entry point's name too) and which are setup (`assert True, "..."` and the like), as
`TestSuite.from_check` splits a check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from envs.code_generation.data import load_problems  # noqa: E402
from rewards.sandbox import TestSuite  # noqa: E402


def test_context_helpers_and_entry_point_name_exercise_the_candidate():
    test = ("def run(x):\n    return add_all(x)\n\n\ndef check(candidate):\n    assert run([1]) == 1\n"
            "    assert add_all([2]) == 2\n    assert len([1]) == 1\n")
    suite = TestSuite.from_check(test, "add_all")
    assert suite.tests == ["assert run([1]) == 1", "assert add_all([2]) == 2"]


@pytest.mark.slow
def test_humaneval_fake_asserts_are_setup_and_every_problem_keeps_a_test():
    problems = load_problems({"type": "humaneval"}, "test")
    fake = with_fake = 0
    for p in problems:
        suite = TestSuite.from_check(p.test, p.entry_point, context=[p.prompt])
        assert suite.total >= 1, p.task_id
        assert not any(t.startswith("assert True") for t in suite.tests), p.task_id
        n_fake = sum(1 for kind, src, _ in suite.units if kind == "setup" and src.startswith("assert True"))
        fake += n_fake
        with_fake += n_fake > 0
    assert (with_fake, fake) == (36, 48)
