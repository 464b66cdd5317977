"""The backend's shape, checked on its source: layers that import one way, short functions, and
an R package that uses only the backend's public names.

- No import cycle between backend modules, lazy imports (inside functions) included: a module
  that imports another only inside a function still depends on it.
- No backend function runs over 60 lines of code (docstring, comments and blank lines aside).
- No R file reaches into a private backend module (`` backend()$`_args` ``): R keeps no rules
  of its own and calls what Python users call.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pybackend" / "tfdistributed"
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(), str(path)) for path in PACKAGE.glob("*.py")}


def _imports(tree: ast.Module, names: set[str]) -> set[str]:
    """The package's modules ``tree`` imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfdistributed."):
            found.add(node.module.split(".")[1])
    return found & names


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_no_import_cycle_between_backend_modules_lazy_imports_included():
    modules = _modules()
    # The package's __init__ gathers the public names: it imports everything by design.
    graph = {name: _imports(tree, set(modules)) - {"__init__", "__main__", name}
             for name, tree in modules.items() if name not in ("__init__", "__main__")}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def _code_lines(node: ast.AST, source_lines: list[str]) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    lines = source_lines[body[0].lineno - 1:node.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def test_no_backend_function_over_sixty_lines_of_code():
    long = []
    for path in sorted(PACKAGE.glob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _code_lines(node, lines)
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "functions over 60 lines of code: " + ", ".join(long)


def test_no_r_file_calls_a_private_backend_module():
    private = re.compile(r"\$`_[A-Za-z]")
    calls = [f"{path.name}:{i}: {line.strip()}"
             for path in sorted((ROOT / "rpkg" / "R").glob("*.R"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert not calls, calls


def test_the_checks_themselves_see_a_cycle_and_a_long_function():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    source = "def f():\n    '''doc'''\n" + "    x = 1\n" * 61 + "    # a comment\n\n"
    tree = ast.parse(source)
    assert _code_lines(tree.body[0], source.splitlines()) == 61
