"""The packages' layering (docs/architecture.md): each top-level package imports only the layers below it.

cooprl (the library) <- rewards (code execution and scoring) <- envs (tasks) <- strategies, scripts. The library
names no task, the reward knows no environment, so a new environment is a new folder under envs/.
"""

import ast
import re
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


def test_only_the_parallel_package_and_the_engine_reach_other_processes():
    # the library asks the other processes through the parallel context (cooprl.parallel.context.Parallel) and steps
    # through cooprl.update.engine; the collectives and the sharding stay behind those two
    allowed = {ROOT / "cooprl" / "update" / "engine.py"}
    wrong = {str(path.relative_to(ROOT)): sorted(_module_imports(path) & {"cooprl.parallel.distributed",
                                                                          "cooprl.parallel.fsdp"})
             for path in (ROOT / "cooprl").rglob("*.py")
             if path not in allowed and path.parent != ROOT / "cooprl" / "parallel"}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_the_losses_are_pure_tensor_math():
    # cooprl/update/losses.py: no model call, no process group, no optimizer: torch alone
    imported = {name.split(".")[0] for name in _module_imports(ROOT / "cooprl" / "update" / "losses.py")}
    assert imported <= {"__future__", "typing", "torch"}, imported


def _project_files() -> list[Path]:
    return sorted([*ROOT.glob("*.py"), *(path for package in ALLOWED for path in (ROOT / package).rglob("*.py"))])


def _is_section(node: ast.AST) -> bool:
    """Whether `node` names a trainer section: the name `section`, or an attribute `<anything>.section`."""
    return (isinstance(node, ast.Name) and node.id == "section") or (isinstance(node, ast.Attribute)
                                                                     and node.attr == "section")


def test_no_trainer_section_is_probed_for_a_key():
    # A run hands its trainer its own typed section (cooprl.config.Run): a key several trainers share is declared on
    # the section class they share, a key only some have is asked with isinstance. getattr(section, "key", default)
    # or hasattr(section, "key") would hide a misspelt key, and a section typed Any says nothing of what it holds.
    found = []
    for path in _project_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args and _is_section(node.args[0])):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            if (isinstance(node, ast.arg) and node.arg == "section" and node.annotation is not None
                    and ast.unparse(node.annotation) == "Any"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: section: Any")
    assert found == []


def test_a_trainer_section_is_looked_up_by_name_only_in_the_config_package():
    # Run.of (cooprl/config/run.py) looks the run's section up once; the loader's checks go over every section. No
    # trainer, helper or task threads (config, trainer name) to look it up again.
    found = [f"{path.relative_to(ROOT)}:{n}" for path in _project_files() if "config" not in path.parent.name
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if ".trainer(" in line]
    assert found == []


# ------------------------------------------------------------------------------------------------ floors
# cooprl's floors, lowest first (docs/architecture.md): a module imports only modules of its own floor or lower ones,
# and no two modules import each other, even through others or inside a function.
FLOORS = (
    ("cooprl", "cooprl.errors", "cooprl.text", "cooprl.task", "cooprl.samples", "cooprl.console", "cooprl.tracking",
     "cooprl.plot", "cooprl.stopping", "cooprl.metrics"),
    ("cooprl.config",),
    ("cooprl.parallel",),
    ("cooprl.models",),
    ("cooprl.checkpoint", "cooprl.run_folders"),
    ("cooprl.update",),
    ("cooprl.rollout",),
    ("cooprl.preferences",),
    ("cooprl.trainers",),
    ("cooprl.cli", "cooprl.train", "cooprl.config_docs"),
)


def _modules(*packages: str) -> dict[str, Path]:
    """Return every module of `packages` by its dotted name (a package by its own name, not `.__init__`)."""
    return {".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
            for package in packages for path in (ROOT / package).rglob("*.py")}


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Return, per module, the modules of `modules` it imports (anywhere in its file)."""
    return {name: {other for other in _module_imports(path) if other in modules and other != name}
            for name, path in modules.items()}


def _floor(module: str) -> int:
    """Return the floor of a cooprl module: the highest floor naming it or a package above it."""
    found = [level for level, names in enumerate(FLOORS) for name in names
             if module == name or (name != "cooprl" and module.startswith(name + "."))]
    assert found, f"{module} is on no floor: add it to FLOORS (and to docs/architecture.md)"
    return max(found)


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """Return one import cycle of `graph` as a path that ends where it starts, or [] when it has none."""
    done, path = set(), []

    def visit(module: str) -> list[str]:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return []
        path.append(module)
        for other in sorted(graph[module]):
            cycle = visit(other)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return []

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return []


def test_find_cycle_finds_a_cycle_through_several_modules():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize("package", ["cooprl", "rewards", "envs"])
def test_no_import_cycle(package):
    assert find_cycle(_import_graph(_modules(package))) == []


def test_no_module_imports_a_higher_floor():
    graph = _import_graph(_modules("cooprl"))
    upward = [f"{module} (floor {_floor(module)}) imports {other} (floor {_floor(other)})"
              for module, others in sorted(graph.items()) for other in sorted(others) if _floor(other) > _floor(module)]
    assert upward == []


def test_the_architecture_page_draws_these_floors():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawing = page[page.index("## The library's floors"):page.index("## One training step")]
    # a package as `name/`, a module by its name, each on the row of its floor's number
    rows = {int(line.split()[0]): line for line in drawing.splitlines() if line.strip()[:1].isdigit()}
    missing = [name for level, names in enumerate(FLOORS) for name in names[1 if level == 0 else 0:]
               if not re.search(rf"\b{name.split('.')[-1]}(/|\.py|,|\s|$)", rows.get(level, "") + "\n"
                                + _continuation(drawing, level))]
    assert missing == []


def _continuation(drawing: str, level: int) -> str:
    """Return the lines of the floors drawing that continue floor `level`'s row (indented, no number)."""
    lines, taken, out = drawing.splitlines(), False, []
    for line in lines:
        head = line.strip()[:1]
        if head.isdigit():
            taken = int(line.split()[0]) == level
        elif taken and line.startswith("   "):
            out.append(line)
    return "\n".join(out)


def test_library_files_stay_short():
    # one job per module; the sandbox worker (a stdlib-only script run as `python -I`, one auditable boundary) and
    # the problem data written as Python are the exceptions
    exempt = {"rewards/_sandbox_worker.py", "envs/code_generation/data/coop_source.py"}
    long = {
        str(path.relative_to(ROOT)): n
        for package in ("cooprl", "rewards", "envs", "strategies")
        for path in (ROOT / package).rglob("*.py")
        if str(path.relative_to(ROOT)) not in exempt and (n := len(path.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}


# functions of cooprl/ that may take 8 or more parameters, each with why (the signature is not ours to choose)
MANY_PARAMETERS = {
    # transformers calls an attention function as f(module, query, key, value, attention_mask, dropout, scaling,
    # **kwargs) (its AttentionInterface): the signature is the library's
    "cooprl/models/trie_attention.py:trie_attention_forward",
}


def _parameter_counts(path: Path) -> list[tuple[str, int]]:
    """Return (qualified name, parameters) of every function in `path`: every parameter, *args and **kwargs included,
    but not a method's self or cls."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [
                    x.arg for x in (a.vararg, a.kwarg) if x is not None]
                if isinstance(node, ast.ClassDef) and names and names[0] in ("self", "cls"):
                    names = names[1:]
                found.append((f"{prefix}{child.name}", len(names)))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_no_library_function_takes_eight_parameters():
    # arguments that travel together are one value (a small frozen dataclass); a long signature is where a caller
    # passes a value in the wrong place
    many = {f"{path.relative_to(ROOT)}:{name}": n for path in sorted((ROOT / "cooprl").rglob("*.py"))
            for name, n in _parameter_counts(path) if n >= 8}
    assert set(many) == MANY_PARAMETERS, many


def test_parameter_counts_see_methods_nested_functions_and_star_arguments(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("class A:\n    def f(self, a, *args, b, **kw):\n        def g(x): pass\n"
                      "    @classmethod\n    def h(cls): pass\ndef k(self, a): pass\n")
    assert _parameter_counts(source) == [("A.f", 4), ("A.f.g", 1), ("A.h", 0), ("k", 2)]
