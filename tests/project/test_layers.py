"""The packages' layering (docs/architecture.md): each top-level package imports only the layers below it.

cooprl (the library) <- rewards (code execution and scoring) <- envs (tasks) <- strategies, scripts. The library
names no task, the reward knows no environment, so a new environment is a new folder under envs/.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what each package may import from the project's own packages
ALLOWED = {"cooprl": {"cooprl"}, "rewards": {"rewards", "cooprl"}, "envs": {"envs", "rewards", "cooprl"},
           "strategies": {"strategies", "envs", "rewards", "cooprl"}}


def _project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below(package):
    wrong = {str(path.relative_to(ROOT)): sorted(_project_imports(path) - ALLOWED[package])
             for path in (ROOT / package).rglob("*.py")}
    assert {path: names for path, names in wrong.items() if names} == {}


# words of the code-generation task, which the library (cooprl/) must not need
CODE_TASK_WORDS = ("aux", "humaneval", "level_feedback", "level feedback", "<auxiliary>", "<main>", "entry_point",
                   "sandbox")


def test_the_library_names_no_code_generation_concept():
    import re
    pattern = re.compile("|".join(rf"\b{re.escape(w)}\b" if w[0].isalpha() else re.escape(w) for w in CODE_TASK_WORDS),
                         re.IGNORECASE)
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "cooprl").rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line) and "code task" not in line]
    assert found == []


def test_the_architecture_page_names_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [str(path.relative_to(ROOT)) for package in ALLOWED for path in sorted((ROOT / package).rglob("*.py"))
               if path.name != "__init__.py" and path.name not in page and "data" not in path.parts]
    assert missing == []


def _module_imports(path: Path) -> set[str]:
    """Return the dotted names of every module `path` imports (`from a import b` gives a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_trainers_reach_other_processes_only_through_the_parallel_context():
    # the trainers (and their loop) ask the other processes through cooprl.parallel and step through cooprl.engine;
    # the collectives and the sharding stay behind those two
    wrong = {str(path.relative_to(ROOT)): sorted(_module_imports(path) & {"cooprl.distributed", "cooprl.fsdp"})
             for path in (ROOT / "cooprl" / "trainers").glob("*.py")}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_the_losses_are_pure_tensor_math():
    # cooprl/losses.py: no model call, no process group, no optimizer: torch alone
    imported = {name.split(".")[0] for name in _module_imports(ROOT / "cooprl" / "losses.py")}
    assert imported <= {"__future__", "typing", "torch"}, imported
