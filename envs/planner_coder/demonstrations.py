"""Reference demonstrations of the planner+coder team: a plan derived from the reference solution, then the reference.

The planner's prompt ends with `Plan:\\n1.`; its demonstration is at most three numbered steps, each a sentence read
off the reference's statements (`describe`): a helper the reference uses (the coop set's aux) is step 1, then the
statements of the function's body, the middle ones merged into one step. The coder's demonstration is the one-function
reference (`envs.code_generation.demonstrations.single_completion`), which follows its plan's steps in order.
"""

from __future__ import annotations

import ast

from envs.code_generation.demonstrations import function_body, single_completion
from rewards.cleaning import parse_python
from rewards.problem import Problem

MAX_EXPRESSION = 60   # characters of code quoted in a step; longer expressions are named by their kind


def _code(node: ast.AST) -> str:
    text = ast.unparse(node)
    return f"`{text}`" if len(text) <= MAX_EXPRESSION else "an expression"


def describe(statement: ast.stmt) -> str:
    """Return one plain sentence saying what `statement` does (a loop, a condition, an assignment, the return)."""
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return f"Loop over {_code(statement.iter)} as {_code(statement.target)}"
    if isinstance(statement, ast.While):
        return f"Repeat while {_code(statement.test)}"
    if isinstance(statement, ast.If):
        return f"If {_code(statement.test)}, handle that case first"
    if isinstance(statement, ast.Return):
        return f"Return {_code(statement.value)}" if statement.value is not None else "Return"
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        names = ", ".join(ast.unparse(t) for t in targets)
        return (
            f"Compute `{names}` from {_code(statement.value)}" if statement.value is not None else f"Declare `{names}`"
        )
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"Write a helper `{statement.name}`"
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return "Import what is needed"
    return f"Do {_code(statement)}"


def plan_steps(problem: Problem) -> list[str] | None:
    """Return the plan's steps (at most three sentences) read off `problem`'s reference, None without one."""
    canonical = problem.extra.get("canonical_solution")
    main = function_body(problem.extra.get("reference_main") or "", problem.entry_point)
    body = canonical if canonical else main
    if body is None:
        return None
    try:
        statements = parse_python("def _f():\n" + body).body[0].body
    except SyntaxError:
        return None
    steps = [describe(s) for s in statements if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    aux = problem.extra.get("reference_aux") if not canonical else None
    if aux:
        helper = parse_python(aux).body[0]
        returned = [describe(s) for s in ast.walk(helper) if isinstance(s, ast.Return)]
        arguments = ", ".join(a.arg for a in helper.args.args)
        step = f"Write a helper `aux({arguments})`"
        steps.insert(0, step + (f" that does: {returned[-1][0].lower()}{returned[-1][1:]}" if returned else ""))
    if len(steps) > 3:
        steps = [steps[0], "; then ".join(steps[1:-1]), steps[-1]]
    return steps


def planner_completion(problem: Problem) -> str | None:
    """Return the planner's demonstration: the steps after its prompt's `Plan:\\n1.` (` step one`, `2. step two`,
    ...)."""
    steps = plan_steps(problem)
    if not steps:
        return None
    return " " + "\n".join(f"{i}. {step}." if i > 1 else f"{step}." for i, step in enumerate(steps, 1)) + "\n"


def planner_coder_demonstrations(problem: Problem) -> list[str] | None:
    """Return [planner, coder] completions for `problem`, None without a reference."""
    completions = [planner_completion(problem), single_completion(problem)]
    return None if any(c is None for c in completions) else completions
