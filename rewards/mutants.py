"""Plausible wrong codes for judging generated tests: single-point mutants of a problem's reference solution.

A tester's test is paid for the wrong codes it rejects (`rewards.self_tests`). The junk stubs (`None`, a string
naming the arguments) only tell a tautology `f(x) == f(x)` apart; a guarded tautology
(`f('') == f('') and f('') != None and str(f(''))[:4] != 'junk'`) rejects both, and a wrong code that raises is
rejected by any test that calls it. What a tautology never rejects is a code that returns a value of the right
type that is wrong: the reference with one operator or constant changed. So every problem with a reference gets
such mutants (`wrong_mutants`): each mutation site of the reference, in `ast.walk` order, changed alone:
    a comparison operator to its neighbour      <  <=,  >  >=,  ==  !=   (both ways)
    an integer constant n to n + 1               (not bools)
    + to -  and  - to +                          (binary operators)
    and to or,  or to and
Only the candidates `fails_hidden` marks are kept (in the rewards: they load, some hidden test rejects them on their
value, none times out; a mutant the hidden tests cannot tell from the reference may be correct: it is no wrong
code), at most `MAX_MUTANTS`, spread over the sites; the hidden-test verdicts are computed once per problem and
cached.
"""

from __future__ import annotations

import ast
import copy
import threading
from typing import Any, Callable

from rewards.cleaning import PARSE_ERRORS, parse_python

MAX_MUTANTS = 6          # wrong mutants kept per problem
MAX_CANDIDATES = 16      # mutants tried against the hidden tests per problem (spread over the sites)
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.Add: ast.Sub, ast.Sub: ast.Add, ast.And: ast.Or, ast.Or: ast.And}


def mutation_sites(tree: ast.Module) -> list[tuple[int, int]]:
    """Return the mutation sites of `tree`: (index of the node in `ast.walk` order, which operator of it: a
    comparison's position, else 0). Docstrings hold no site: only int constants are changed."""
    sites = []
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare):
            sites += [(index, k) for k, op in enumerate(node.ops) if type(op) in _FLIP]
        elif isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in _FLIP:
            sites.append((index, 0))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites.append((index, 0))
    return sites


def mutate(tree: ast.Module, site: tuple[int, int]) -> str:
    """Return the source of `tree` with the one change at `site` (`mutation_sites`)."""
    tree = copy.deepcopy(tree)
    index, k = site
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == index)
    if isinstance(node, ast.Compare):
        node.ops[k] = _FLIP[type(node.ops[k])]()
    elif isinstance(node, ast.Constant):
        node.value += 1
    else:
        node.op = _FLIP[type(node.op)]()
    return ast.unparse(tree)


def candidate_mutants(reference: str) -> list[str]:
    """Return up to MAX_CANDIDATES distinct mutants of `reference` (source), spread evenly over its mutation
    sites; none when it does not parse."""
    try:
        tree = parse_python(reference)
        sites = mutation_sites(tree)
        step = max(1, len(sites) // MAX_CANDIDATES + (len(sites) % MAX_CANDIDATES > 0))
        out = []
        for site in sites[::step]:
            source = mutate(tree, site)
            if source not in out:
                out.append(source)
        return out
    except (*PARSE_ERRORS, TypeError, ValueError):
        return []


_cache: dict[Any, list[str]] = {}
_lock = threading.Lock()


def wrong_mutants(key: Any, reference: str | None, fails_hidden: Callable[[list[str]], list[bool]]) -> list[str]:
    """Return the wrong mutants of `reference` (at most MAX_MUTANTS): the candidates for which `fails_hidden`
    (one verdict per program: it loads and fails some hidden test) is True. Cached by `key` (the problem)."""
    if reference is None:
        return []
    with _lock:
        if key in _cache:
            return _cache[key]
    candidates = candidate_mutants(reference)
    wrong = [m for m, bad in zip(candidates, fails_hidden(candidates) if candidates else []) if bad]
    step = max(1, -(-len(wrong) // MAX_MUTANTS))
    chosen = wrong[::step][:MAX_MUTANTS]
    with _lock:
        _cache[key] = chosen
    return chosen
