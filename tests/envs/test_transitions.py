"""Test slicing, level/plain/expert feedback and the multi-turn prompts; no model, no network, no sandbox."""

import json
import sys

import pytest

from envs.code_generation.data import Problem
from envs.code_generation.prompts import aux_prompt, completion_to_code, main_prompt
from envs.code_generation.transitions import (expert_feedback, expert_messages, feedback_problem,
                                              level_feedback, make_expert_client, next_prompt, plain_feedback,
                                              slice_tests, visible_asserts)
from rewards.code_rewards import RewardBreakdown

PROMPT = 'def add_one(x: int) -> int:\n    """Return x + 1."""\n'
TEST = ("\n\nMETADATA = {}\n\n\ndef check(candidate):\n"
        "    assert candidate(1) == 2\n    assert candidate(-1) == 0\n    assert candidate(0) == 1\n")
P = Problem("T/0", PROMPT, TEST, "add_one")

FAILING = RewardBreakdown(total=2.5, aux_defined=True, main_defined=True, syntax_ok=True, tests_passed=1,
                          tests_total=2, uses_aux=True, not_wrapper=True,
                          failures=("assert candidate(-1) == 0 -> AssertionError",))
PASSING = RewardBreakdown(total=4.0, aux_defined=True, main_defined=True, syntax_ok=True, tests_passed=2,
                          tests_total=2, uses_aux=True, not_wrapper=True)
SYNTAX = RewardBreakdown(total=1.0, aux_defined=True, main_defined=True,
                         reason="syntax error: '(' was never closed (line 6, column 15)")


# ---------------------------------------------------------------- slicing

def _asserts(test):
    return [line.strip() for line in test.splitlines() if line.strip().startswith("assert ")]


@pytest.mark.parametrize("chosen, expected", [
    (1, ["assert candidate(1) == 2"]),
    (2, ["assert candidate(1) == 2", "assert candidate(-1) == 0"]),
    (-1, ["assert candidate(0) == 1"]),
    ("2", ["assert candidate(1) == 2", "assert candidate(-1) == 0"]),  # config overrides may give strings
    (0, None), (None, None), ("all", None), ("ALL", None),  # None: every assert
])
def test_slice_tests(chosen, expected):
    sliced = slice_tests(TEST, chosen)
    assert _asserts(sliced) == (expected if expected is not None else _asserts(TEST))
    assert "METADATA = {}" in sliced and "def check(candidate):" in sliced


def test_slice_keeps_multiline_asserts_and_loops_whole():
    test = ("def check(candidate):\n    import math\n    assert candidate(\n        [1, 2]\n    ) == 3\n"
            "    for x in range(3):\n        assert candidate([x]) == x\n    assert candidate([]) == 0\n")
    assert slice_tests(test, 1) == ("def check(candidate):\n    import math\n    assert candidate(\n"
                                    "        [1, 2]\n    ) == 3\n")
    assert slice_tests(test, -2) == ("def check(candidate):\n    import math\n    for x in range(3):\n"
                                     "        assert candidate([x]) == x\n    assert candidate([]) == 0\n")
    with pytest.raises(ValueError, match="sandbox_slice"):
        slice_tests(test, "first")


def test_feedback_problem_keeps_the_rest_of_the_problem():
    assert _asserts(feedback_problem(P, -1).test) == ["assert candidate(0) == 1"]
    two = feedback_problem(P, 2)
    assert len(_asserts(two.test)) == 2 and (two.task_id, two.prompt, two.entry_point) == (
        P.task_id, P.prompt, P.entry_point)
    assert visible_asserts(P, -2) == ["assert candidate(-1) == 0", "assert candidate(0) == 1"]


# ---------------------------------------------------------------- level / plain feedback

def test_level_feedback_failing_golden():
    assert level_feedback(P, "main", FAILING) == (
        "Feedback on your code:\n"
        "- The helper aux: defined.\n"
        "- Your function add_one: defined.\n"
        "- Syntax: OK.\n"
        "- Tests: 1/2 passed.\n"
        "  Failed: assert candidate(-1) == 0 -> AssertionError\n"
        "Revise your code to fix these problems. Write only the code, no explanation.")


def test_level_feedback_passing_golden():
    assert level_feedback(P, "aux", PASSING) == (
        "Feedback on your code:\n"
        "- Your helper aux: defined.\n"
        "- The main function add_one: defined.\n"
        "- Syntax: OK.\n"
        "- Tests: 2/2 passed.\n"
        "No problems were found. Write your final code again, improving it if you can. "
        "Write only the code, no explanation.")


def test_level_feedback_syntax_error_golden():
    own = PROMPT + "    return aux(x\n"
    assert level_feedback(P, "main", SYNTAX, own) == (
        "Feedback on your code:\n"
        "- The helper aux: defined.\n"
        "- Your function add_one: defined.\n"
        "- Syntax error in your code at line 3, column 15: '(' was never closed.\n"
        "- Tests were not run because of the syntax error.\n"
        "Revise your code to fix these problems. Write only the code, no explanation.")
    # the aux agent's own code compiles: it is told where the combined program breaks
    assert ("- Syntax error in the combined program at line 6, column 15: '(' was never closed.\n"
            in level_feedback(P, "aux", SYNTAX, "def aux(x):\n    return x\n"))


def test_garbage_the_parser_gives_up_on_is_reported_not_raised():
    garbage = PROMPT + "    return " + "-" * 100_000 + "x\n"
    broken = RewardBreakdown(total=1.0, aux_defined=True, main_defined=True,
                             reason="syntax error: the parser gave up (MemoryError)")
    assert ("- Syntax error in your code: the parser gave up (MemoryError).\n"
            in level_feedback(P, "main", broken, garbage))


def test_level_feedback_usage_notes_and_roles():
    ignored = RewardBreakdown(aux_defined=True, main_defined=True, syntax_ok=True, tests_passed=1, tests_total=1,
                              uses_aux=True, not_wrapper=True, ignored_aux_return=True)
    assert "- Your function add_one calls aux but ignores the value it returns." in level_feedback(P, "main", ignored)
    assert "- The main function add_one ignores the value your helper aux returns." in level_feedback(P, "aux", ignored)
    uncalled = RewardBreakdown(aux_defined=True, main_defined=True, syntax_ok=True, tests_passed=1, tests_total=1)
    assert "- Your function add_one does not call aux." in level_feedback(P, "main", uncalled)
    single = level_feedback(P, "single", uncalled)
    assert "aux" not in single and "No problems were found." in single
    missing = level_feedback(P, "main", RewardBreakdown(aux_defined=False, reason="main function missing"))
    assert "- The helper aux: missing or has no return value.\n" in missing
    assert "- Syntax and tests were not checked because add_one is missing.\n" in missing


def test_plain_feedback_golden():
    assert plain_feedback(P, "main") == ("Revise your function add_one: fix any mistakes and keep it concise. "
                                         "Write only the code, no explanation.")
    assert plain_feedback(P, "aux").startswith("Revise your helper aux:")


# ---------------------------------------------------------------- expert

class FakeClient:
    def __init__(self, reply="- In add_one, return x + 1 when x <= 0."):
        self.reply, self.calls = reply, []

    def __call__(self, messages):
        self.calls.append(messages)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def test_expert_feedback_with_fake_client():
    client = FakeClient()
    text = expert_feedback(P, "main", "def aux(x):\n    return x + 1", "def add_one(x):\n    return aux(x)",
                           FAILING, client, tests=["assert candidate(-1) == 0"])
    assert text == ("An expert reviewer suggests these edits:\n- In add_one, return x + 1 when x <= 0.\n"
                    "Revise your code with these edits. Write only the code, no explanation.")
    (system, user), = client.calls
    assert system["role"] == "system" and "compact edits" in system["content"]
    assert "def aux(x):" in user["content"] and "Tests:\nassert candidate(-1) == 0" in user["content"]
    assert user["content"].endswith("Suggest compact edits to the function `add_one` only.")
    assert "Helper function aux" not in expert_messages(P, "single", "", "def add_one(x): ...", PASSING)[1]["content"]


def test_expert_failure_falls_back_to_level_feedback():
    with pytest.warns(UserWarning, match="expert call failed"):
        text = expert_feedback(P, "main", "", "", FAILING, FakeClient(RuntimeError("quota")))
    assert text == level_feedback(P, "main", FAILING)


def test_make_expert_client_needs_url_and_key(monkeypatch):
    for var in ("COOPRL_EXPERT_BASE_URL", "OPENAI_BASE_URL", "COOPRL_EXPERT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="COOPRL_EXPERT_BASE_URL"):
        make_expert_client("deepseek-coder")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://expert.invalid/v1")
    with pytest.raises(ValueError, match="COOPRL_EXPERT_API_KEY"):
        make_expert_client("deepseek-coder")


def test_expert_edits_without_an_api_is_one_config_error_naming_the_mode_and_the_variable(monkeypatch):
    # a ValueError traceback before; it named neither the key that asked for the API nor the mode that needs none
    from cooprl.config import ConfigError, Run, load_config
    from envs.code_generation.task import build_code_task
    for var in ("COOPRL_EXPERT_BASE_URL", "OPENAI_BASE_URL", "COOPRL_EXPERT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    config = load_config(None, ["external.mode=expert_edits", "magrpo.num_turns=2"])
    with pytest.raises(ConfigError) as err:
        build_code_task(Run.of(config, "magrpo"))
    assert str(err.value) == ("external.mode=expert_edits: the expert model 'deepseek-coder' (external.expert_model, "
                              "an OpenAI-compatible chat API) has no API URL: set COOPRL_EXPERT_BASE_URL (or "
                              "OPENAI_BASE_URL); or use external.mode=level_feedback, which needs no API")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://expert.invalid/v1")
    with pytest.raises(ConfigError, match="has no API key: set COOPRL_EXPERT_API_KEY \\(or OPENAI_API_KEY\\); or use"):
        build_code_task(Run.of(config, "magrpo"))


def test_make_expert_client_over_urllib(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # force the urllib path
    sent = {}

    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return json.dumps({"choices": [{"message": {"content": "use x + 1"}}]}).encode()

    def fake_urlopen(request, timeout):
        sent.update(url=request.full_url, body=json.loads(request.data), auth=request.get_header("Authorization"))
        return Response()

    monkeypatch.setattr("urllib.request.urlopen", fake_urlopen)
    client = make_expert_client("coder", base_url="http://expert.invalid/v1/", api_key="k")
    assert client([{"role": "user", "content": "hi"}]) == "use x + 1"
    assert sent["url"] == "http://expert.invalid/v1/chat/completions"
    assert sent["body"]["model"] == "coder" and sent["auth"] == "Bearer k"


# ---------------------------------------------------------------- next prompt

MAIN_TURN2_GOLDEN = '''A helper function `aux(...)` is already defined and available. Do not redefine `aux`; call it in your solution.
Implement only the function `add_one` below. Write only the Python code, no explanation, no tests.

def add_one(x: int) -> int:
    """Return x + 1."""
    return aux(x) if x > 0 else x

Feedback on your code:
- The helper aux: defined.
- Your function add_one: defined.
- Syntax: OK.
- Tests: 1/2 passed.
  Failed: assert candidate(-1) == 0 -> AssertionError
Revise your code to fix these problems. Write only the code, no explanation.

def add_one(x: int) -> int:
    """Return x + 1."""
'''


def test_second_turn_golden():
    history = [(main_prompt(P), "    return aux(x) if x > 0 else x\n\ndef test():\n")]
    assert next_prompt("level_feedback", P, "main", history, FAILING) == MAIN_TURN2_GOLDEN


def test_three_turns_hold_each_response_once_and_end_with_the_prefix():
    responses = ["x):\n    return x  # first\n", "x):\n    return x + 1  # second\n",
                 "x):\n    return x + 2  # third\n"]
    history = [(aux_prompt(P), responses[0])]
    history.append((next_prompt("level_feedback", P, "aux", history, FAILING), responses[1]))
    history.append((next_prompt("plain", P, "aux", history, PASSING), responses[2]))
    final = next_prompt("level_feedback", P, "aux", history, PASSING)
    for response in responses:
        assert final.count(completion_to_code("aux", P, response).rstrip()) == 1
    assert final.count("Problem:\ndef add_one") == 1
    assert final.count("Feedback on your code:") == 2 and final.count("Revise your helper aux:") == 1
    assert final.index("# first") < final.index("# second") < final.index("# third")
    assert final.endswith("\n\ndef aux(")


def test_next_prompt_passthrough_expert_and_errors():
    history = [(main_prompt(P), "    return aux(x)\n")]
    assert (
        next_prompt("plain", P, "main", history, FAILING, passthrough=True)
        == plain_feedback(P, "main") + "\n\n" + PROMPT
    )
    client = FakeClient()
    text = next_prompt("expert_edits", P, "main", history, FAILING, expert_client=client,
                       partner_code="def aux(x):\n    return x + 1", sandbox_slice=-1)
    assert "An expert reviewer suggests these edits:" in text and text.endswith(PROMPT)
    user = client.calls[0][1]["content"]
    assert "return x + 1" in user and "Tests:\nassert candidate(0) == 1" in user
    with pytest.raises(ValueError, match="level_feedback, plain, expert_edits"):
        next_prompt("hints", P, "main", history, FAILING)
    with pytest.raises(ValueError, match="expert client"):
        next_prompt("expert_edits", P, "main", history, FAILING)
    with pytest.raises(ValueError, match="empty"):
        next_prompt("plain", P, "main", [], FAILING)
