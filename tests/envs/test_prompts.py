"""Agent prompts, completion-to-code, stop strings, centralized prompts and the joint-answer parser."""

import pytest

from envs.code_generation.data import Problem
from envs.code_generation.prompts import (JointAnswer, agent_prompts, aux_prompt, centralized_answer_prefix,
                                          centralized_prompt,
                                          centralized_stop_strings, code_prefix, completion_to_code,
                                          extract_function, main_prompt, parse_joint_answer, single_prompt,
                                          stop_strings)

PROMPT = 'def add_one(x: int) -> int:\n    """Return x + 1."""\n'
P = Problem("T/0", PROMPT, "def check(candidate):\n    assert candidate(1) == 2\n", "add_one")
# HumanEval style: imports first, and most prompts start with blank lines
P_IMPORTS = Problem("T/1", '\n\nfrom typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n',
                    "def check(candidate):\n    assert candidate([1]) == 1\n", "total")

AUX_GOLDEN = '''Problem:
def add_one(x: int) -> int:
    """Return x + 1."""

Write a helper function named `aux` that solves a useful sub-task of this problem. \
The main function `add_one` will call `aux` and use the value it returns.
Write only the Python code of `aux`, ending with a return statement. No explanation, no tests, no example usage.

def aux('''

MAIN_GOLDEN = '''A helper function `aux(...)` is already defined and available. Do not redefine `aux`; call it in your solution.
Implement only the function `add_one` below. Write only the Python code, no explanation, no tests.

def add_one(x: int) -> int:
    """Return x + 1."""
'''


def test_aux_prompt_golden_ends_with_def_aux():
    assert aux_prompt(P) == AUX_GOLDEN
    assert aux_prompt(P).endswith("def aux(")


def test_main_prompt_golden_ends_with_problem_prompt():
    assert main_prompt(P) == MAIN_GOLDEN
    assert main_prompt(P).endswith(PROMPT)


def test_single_prompt_asks_for_whole_function():
    text = single_prompt(P)
    assert text.endswith(PROMPT) and "aux" not in text


def test_prompts_drop_leading_blank_lines():
    assert main_prompt(P_IMPORTS).endswith(code_prefix("main", P_IMPORTS))
    assert code_prefix("main", P_IMPORTS).startswith("from typing import List")


def test_agent_prompts_by_count():
    assert agent_prompts(P, 2) == [aux_prompt(P), main_prompt(P)]
    assert agent_prompts(P, 1) == [single_prompt(P)]
    with pytest.raises(ValueError, match="num_agents=3"):
        agent_prompts(P, 3)


def test_code_prefix_and_roles():
    assert code_prefix("aux", P) == "def aux("
    assert code_prefix("main", P) == code_prefix("single", P) == PROMPT
    with pytest.raises(ValueError, match="role 'critic'"):
        code_prefix("critic", P)


def test_completion_to_code_continues_the_prefix():
    assert completion_to_code("aux", P, "x):\n    return x + 1\n") == "def aux(x):\n    return x + 1\n"
    assert completion_to_code("main", P, "    return aux(x)\n") == PROMPT + "    return aux(x)\n"


def test_completion_to_code_cuts_at_stop_strings():
    # transformers keeps the stop string in the output; trailing junk must not reach the reward
    assert completion_to_code("aux", P, "x):\n    return x\n\ndef test():\n    pass") == "def aux(x):\n    return x\n"
    assert completion_to_code("main", P, "    return aux(x)\n```\nDone.") == PROMPT + "    return aux(x)"
    nested = "    def inner(y):\n        return y\n    return inner(x)\n\nprint(add_one(1))"
    assert completion_to_code("main", P, nested) == PROMPT + nested.split("\n\nprint")[0] + "\n"


def test_completion_that_restarts_the_function_gets_one_header():
    aux = completion_to_code("aux", P, "def aux(x):\n    return x\n")
    assert aux == "def aux(x):\n    return x\n"
    main = completion_to_code("main", P_IMPORTS, "```python\nfrom typing import List\n\ndef total(xs):\n    return "
                                                 "sum(xs)\n```")
    assert main.count("def total(") == 1
    assert main.startswith("from typing import List")  # the prompt's preamble is kept
    assert main.endswith("def total(xs):\n    return sum(xs)")


def test_stop_strings_only_column_zero():
    for role in ("aux", "main", "single"):
        stops = stop_strings(role)
        assert "\ndef " in stops and "\n```" in stops
        assert all(s.startswith("\n") and not s[1].isspace() for s in stops)


# ---------------------------------------------------------------- centralized

def test_centralized_concat_has_problem_twice_native_once():
    assert centralized_prompt(P, "concat").count('"""Return x + 1."""') == 2
    assert centralized_prompt(P, "native").count('"""Return x + 1."""') == 1
    for style in ("concat", "native"):
        text = centralized_prompt(P, style)
        assert "<auxiliary>" in text and "</main>" in text
        assert text.index("<auxiliary>") < text.index("<main>")
        assert not text.endswith("<auxiliary>")


def test_centralized_example_style_shows_a_worked_answer_to_another_problem():
    text = centralized_prompt(P, "example")
    assert text.count('"""Return x + 1."""') == 1 and "def aux(...)" not in text and "    ..." not in text
    assert "<auxiliary>\ndef aux(ch):\n    return ch.lower() in 'aeiou'\n</auxiliary>" in text
    assert text.endswith("Now the answer for `add_one`:\n")
    bounded = centralized_prompt(P, "example", "bounded")
    assert bounded == text + "<auxiliary>\ndef aux(" == text + centralized_answer_prefix("example", "bounded")
    # the answer continues the aux header: both are put back; a restarted answer is read as it is
    cont = f"x):\n    return x + 1\n</auxiliary>\n<main>\n{MAIN}\n</main>"
    assert parse_joint_answer(cont, P, "bounded", "example") == JointAnswer(AUX, MAIN, "")
    assert parse_joint_answer(f"\n{AUX}\n</auxiliary>\n<main>\n{MAIN}\n</main>", P, "bounded",
                              "example") == JointAnswer(AUX, MAIN, "")
    assert parse_joint_answer("<auxiliary>\n" + cont.replace("x):", AUX.split("(")[0] + "(x):", 1), P, "bounded",
                              "example") == JointAnswer(AUX, MAIN, "")


def test_centralized_bounded_ends_with_opening_tag():
    for style in ("concat", "native"):
        assert centralized_prompt(P, style, "bounded").endswith("\n<auxiliary>")
        assert centralized_answer_prefix(style, "bounded") == "<auxiliary>"
    assert centralized_answer_prefix("example", "open") == ""
    assert centralized_stop_strings("bounded") == ["</main>"]
    assert centralized_stop_strings("open") == []
    with pytest.raises(ValueError, match="native"):
        centralized_prompt(P, "joint")
    with pytest.raises(ValueError, match="bounded"):
        centralized_prompt(P, "native", "closed")


AUX = "def aux(x):\n    return x + 1"
MAIN = "def add_one(x):\n    return aux(x)"


def test_parse_both_tags():
    text = f"<auxiliary>\n{AUX}\n</auxiliary>\n<main>\n{MAIN}\n</main>\ntrailing prose"
    assert parse_joint_answer(text, P) == JointAnswer(AUX, MAIN, "")


def test_parse_missing_closing_tags():
    text = f"<auxiliary>\n{AUX}\n<main>\n```python\n{MAIN}\n```"
    assert parse_joint_answer(text, P) == JointAnswer(AUX, MAIN, "")


def test_parse_labels_only():
    text = f"Auxiliary:\n{AUX}\n\n**Main function:**\n{MAIN}\n"
    assert parse_joint_answer(text, P) == JointAnswer(AUX, MAIN, "aux from labels; main from labels")


def test_parse_fences_only():
    text = f"Here is aux:\n```python\n{AUX}\n```\nand the main one:\n```python\n{MAIN}\n```"
    assert parse_joint_answer(text, P) == JointAnswer(AUX, MAIN, "aux from fenced block; main from fenced block")
    one_block = f"```python\n{AUX}\n\n{MAIN}\n```"
    assert parse_joint_answer(one_block, P) == JointAnswer(AUX, MAIN, "aux from fenced block; main from fenced block")


def test_parse_by_function_name():
    text = f"Sure!\n{AUX}\n\n{MAIN}\n\nThis adds one."
    assert parse_joint_answer(text, P) == JointAnswer(AUX, MAIN, "aux from function name; main from function name")
    assert extract_function("def f(:\n  x\ny = 1", "f") == "def f(:\n  x"


def test_parse_garbage_gives_empty_parts_with_reasons():
    for text in ("I cannot help with that.", "", None):
        assert parse_joint_answer(text, P) == JointAnswer("", "", "no <auxiliary> section; no <main> section")
    only_aux = parse_joint_answer(f"<auxiliary>\n{AUX}\n</auxiliary>\n<main>\n</main>", P)
    assert only_aux == JointAnswer(AUX, "", "no <main> section")
    # code the parser gives up on (MemoryError, not SyntaxError) falls back to the text, never raises
    deep = "def aux(x):\n    return " + "-" * 100_000 + "x"
    assert extract_function(deep, "aux") == deep


def test_parse_bounded_answer_starts_after_the_tag():
    text = f"\n{AUX}\n</auxiliary>\n<main>\n{MAIN}\n</main>"
    assert parse_joint_answer(text, P, "bounded") == JointAnswer(AUX, MAIN, "")
    # a model that repeats the opening tag is parsed the same
    assert parse_joint_answer("<auxiliary>" + text, P, "bounded") == JointAnswer(AUX, MAIN, "")


@pytest.mark.parametrize("code, expected", [
    # decorators, async and a header over several lines, parsed and unparsable alike
    ("@cache\ndef f(x):\n    return x\n\nprint(1)", "@cache\ndef f(x):\n    return x"),
    ("async def f(x):\n    return x\nf(1)", "async def f(x):\n    return x"),
    ("def f(a,\n      b):\n    return a\nz = (", "def f(a,\n      b):\n    return a"),
    ("@wrap\nasync def f(a,\n  b):\n    return a\n)", "@wrap\nasync def f(a,\n  b):\n    return a"),
    ("class K:\n    def f(self):\n        return 1\n", "def f(self):\n    return 1"),
])
def test_joint_answer_parser_and_reward_extract_the_same_function(code, expected):
    from rewards.cleaning import clean_completion
    assert extract_function(code, "f") == expected
    assert clean_completion(code, "f").function == expected
