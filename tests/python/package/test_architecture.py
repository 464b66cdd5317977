"""The backend's shape, checked on its source: folders by concern in layers that import one way,
short functions, and an R package that uses only the backend's public names.

- At most 14 entries (modules and folders) at the package's top, and each folder imports only
  the folders below it (``LAYERS``, the table its ``__init__`` docstrings describe): e.g. nothing
  imports ``training`` but ``r``, and ``engines`` never imports ``training`` or ``data``.
- No import cycle between backend modules (subpackages' modules included), lazy imports (inside
  functions) and name registries included: a module that imports another only inside a function
  still depends on it, and a module whose function fills a module-level table of another
  (``registry.register(name=fn)``) makes that module depend on it as surely as an import.
- No backend function runs over 60 lines of code (docstring, comments and blank lines aside).
- No private name crosses modules: ``from .x import _y`` reaches into ``x``'s insides.
- No R file reaches into a private backend module (`` backend()$`_args` ``): R keeps no rules
  of its own and calls what Python users call.
- ``launch()`` takes the target, the cluster's shape and a few option objects: at most 14
  parameters (and, for one release, the old spellings' ``**deprecated_keywords``), and each
  engine's launcher is made from one plan: at most 8 parameters.
- Each default of ``launch()``'s options is written once: no function or dataclass of the
  backend retypes it under the option's name (a named constant is fine: it is the one place),
  no ``DEFAULT_*`` constant is defined in two modules, and R's launch functions
  (``launch_cluster()``, ``local_hosts()``, ``slurm()``, ``ray()``, ``restarts()``,
  ``watching()``) give their options no default but ``NULL`` or none: R passes on only what the
  user gave.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "pybackend" / "tfdistributed"
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    """``demo`` for demo.py, ``engines.local.plan`` for engines/local/plan.py, ``engines`` for
    engines/__init__.py."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(path): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return (PACKAGE / name.replace(".", "/") / "__init__.py").exists()


def _imported(tree: ast.Module, module: str):
    """``(node, the package module it names, the names it takes)`` for each import in ``tree``,
    at the top or inside functions; ``module`` is the importing module's dotted name."""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            anchor = base[:len(base) - (node.level - 1)] if node.level > 1 else base
            target = ".".join(anchor + ([node.module] if node.module else []))
        elif (node.module or "").startswith("tfdistributed."):
            target = node.module[len("tfdistributed."):]
        elif node.module == "tfdistributed":
            target = ""
        else:
            continue
        yield node, target, [alias.name for alias in node.names]


def _reexported(package: str) -> dict[str, str]:
    """``{name: submodule}`` for the names a package's ``__init__`` takes from its modules."""
    init = PACKAGE / package.replace(".", "/") / "__init__.py"
    if not package or not init.exists():
        return {}
    found = {}
    for node, target, _ in _imported(ast.parse(init.read_text()), package):
        for alias in node.names:
            if target.startswith(package + "."):
                found[alias.asname or alias.name] = target
    return found


def _resolve(target: str, name: str, names: set[str]) -> str | None:
    """The package module ``from target import name`` depends on: ``target.name`` when that is
    a module, the module a folder's ``__init__`` takes ``name`` from, else ``target`` (or its
    nearest enclosing module)."""
    if f"{target}.{name}".lstrip(".") not in names and _is_package(target):
        origin = _reexported(target).get(name)
        if origin in names:
            return origin
    for candidate in (f"{target}.{name}".lstrip("."), target):
        while candidate:
            if candidate in names:
                return candidate
            candidate = candidate.rpartition(".")[0]
    return None


def _imports(tree: ast.Module, names: set[str], module: str = "") -> set[str]:
    """The package's modules ``tree`` imports, at the top or inside functions."""
    found = set()
    for _, target, taken in _imported(tree, module):
        for name in taken:
            resolved = _resolve(target, name, names)
            if resolved:
                found.add(resolved)
    return found


def _fillers(tree: ast.Module) -> set[str]:
    """The functions of ``tree`` that store what they are given (one of their parameters) in a
    module-level table: registries. A function keeping its own state there is not one."""
    tables = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
              for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
              if isinstance(t, ast.Name)}

    def names_in(nodes) -> set[str]:
        return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}

    def stores_parameter(node, params: set[str]) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("update", "append", "add", "setdefault", "extend") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in tables:
            return bool(names_in(node.args + [k.value for k in node.keywords]) & params)
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                and t.value.id in tables for t in node.targets):
            return bool(names_in([node.value]) & params)
        return False

    found = set()
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef):
            a = fn.args
            params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
            params |= {x.arg for x in (a.vararg, a.kwarg) if x}
            if any(stores_parameter(n, params) for n in ast.walk(fn)):
                found.add(fn.name)
    return found


def _registrations(modules: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """``(registry module, registering module)`` for each call from one module to another's
    function that stores what it is given in a module-level table (a registry)."""
    fillers = {name: _fillers(tree) for name, tree in modules.items()}
    edges = set()
    for name, tree in modules.items():
        # Local names of package modules, and of functions taken from them.
        as_module, as_function = {}, {}
        for node, target, taken in _imported(tree, name):
            for alias in node.names:
                resolved = _resolve(target, alias.name, set(modules))
                if resolved == f"{target}.{alias.name}".lstrip("."):
                    as_module[alias.asname or alias.name] = resolved
                elif resolved:
                    as_function[alias.asname or alias.name] = (resolved, alias.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                registry, called = as_module.get(func.value.id), func.attr
            elif isinstance(func, ast.Name) and func.id in as_function:
                registry, called = as_function[func.id]
            else:
                continue
            if registry and registry != name and called in fillers.get(registry, ()):
                edges.add((registry, name))
    return edges


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


def _graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    # The package's __init__ gathers the public names: it imports everything by design.
    skip = {"__init__", "__main__"}
    graph = {name: _imports(tree, set(modules), name) - skip - {name}
             for name, tree in modules.items() if name not in skip}
    for registry, registrant in _registrations(modules):
        if registry in graph and registrant not in skip:
            graph[registry].add(registrant)
    # A package's __init__ gathers its modules' public names as the top one does.
    for package in [n for n in graph if _is_package(n)]:
        graph[package] -= {n for n in graph if n.startswith(package + ".")}
    return graph


#: Each entry at the package's top and the entries it may import (lazy imports included), lowest
#: first. ``__init__``, ``__main__`` and ``demo`` (the public API, the CLI, ``make demo``) may
#: import anything.
LAYERS = {
    "errors": set(),
    "_args": {"errors"},
    # The supported releases and the installed ones, from metadata (no TensorFlow import), and
    # the one import hook: what runs once TensorFlow or Keras is imported.
    "versions": {"errors"},
    "cluster": {"errors", "_args", "versions"},
    "data": {"errors", "_args"},
    "watch": {"errors", "_args"},
    "strategies": {"errors", "_args", "cluster"},
    "training": {"errors", "_args", "versions", "cluster", "strategies", "data", "watch"},
    "engines": {"errors", "_args", "cluster", "strategies", "watch"},
    "r": {"errors", "_args", "cluster", "strategies", "data", "watch", "training"},
    "testbeds": {"errors", "_args", "cluster"},
}
TOP = {"__init__", "__main__", "demo"}
MAX_TOP_ENTRIES = 14


def _entry(module: str) -> str:
    return module.split(".")[0]


def test_the_package_top_is_a_short_list_of_known_entries():
    entries = {p.stem for p in PACKAGE.iterdir()
               if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert entries == set(LAYERS) | TOP, sorted(entries ^ (set(LAYERS) | TOP))
    assert len(entries) <= MAX_TOP_ENTRIES, sorted(entries)


def test_each_folder_imports_only_the_folders_below_it():
    modules = _modules()
    wrong = sorted(f"{module} imports {target}"
                   for module, tree in modules.items() if _entry(module) not in TOP
                   for target in _imports(tree, set(modules), module)
                   if _entry(target) != _entry(module)
                   and _entry(target) not in LAYERS[_entry(module)])
    assert not wrong, wrong
    assert _cycle({entry: set(allowed) for entry, allowed in LAYERS.items()}) is None


def test_every_folder_says_what_lives_there_and_what_it_may_import():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        modules = sorted(p.stem for p in init.parent.iterdir()
                         if p.suffix == ".py" and p.stem != "__init__" or (p / "__init__.py").exists())
        missing = [m for m in modules if f"``{m}" not in doc]
        assert not missing, f"{init.parent.name}/__init__.py does not name {missing}"
        assert "Layer" in doc or "import" in doc, f"{init.parent.name}: no word on its imports"


def test_no_import_cycle_between_backend_modules_lazy_imports_and_registries_included():
    graph = _graph(_modules())
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_no_private_name_is_imported_across_modules():
    crossing = [f"{module}: from {target or '.'} import {name}"
                for module, tree in _modules().items()
                for _, target, taken in _imported(tree, module)
                for name in taken if name.startswith("_") and not name.startswith("__")
                and _resolve(target, name, set(_modules())) != f"{target}.{name}".lstrip(".")]
    assert not crossing, crossing


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
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _code_lines(node, lines)
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({n} lines)")
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
    registry = ast.parse("_TABLE = {}\ndef register(**kw):\n    _TABLE.update(kw)\n")
    user = ast.parse("from . import registry\nregistry.register(fit=lambda: 0)\n")
    assert _registrations({"registry": registry, "user": user}) == {("registry", "user")}
    source = "def f():\n    '''doc'''\n" + "    x = 1\n" * 61 + "    # a comment\n\n"
    tree = ast.parse(source)
    assert _code_lines(tree.body[0], source.splitlines()) == 61


def test_one_module_installs_import_hooks_and_no_module_path_shim_remains():
    # No release has been made, so no earlier module path is owed a redirect. The one import
    # hook (versions.after_import) mends TensorFlow and Keras as they are imported, for
    # cluster/join.py and training/compat.py alike: two copies of it had drifted apart.
    hooks = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if re.search(r"meta_path|MetaPathFinder|PathEntryFinder|path_hooks",
                                p.read_text()))
    assert hooks == ["versions.py"], hooks
    for init in PACKAGE.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        assert not any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                       for node in tree.body), f"{init}: a module-level __getattr__"


# --- launch()'s surface, and its defaults written once ------------------------------------------

MAX_LAUNCH_PARAMETERS = 14
MAX_LAUNCHER_PARAMETERS = 8
OPTIONS = PACKAGE / "engines" / "options.py"
OPTION_CLASSES = ("Engine", "Local", "Slurm", "Ray", "Restarts", "Watch")
# The cluster's shape: local_cluster() and slurm_script() have a shape of their own to default.
SHAPE = ("target", "workers", "ps", "chief")
R_LAUNCH_FUNCTIONS = ("launch_cluster", "local_hosts", "slurm", "ray", "restarts", "watching")
# R's own: launch_cluster() prints the lines itself (Python's echo is always off from R).
R_OWN = {("launch_cluster", "echo")}


def _function(path: Path, name: str) -> ast.FunctionDef:
    return next(node for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.FunctionDef) and node.name == name)


def _constants(module: str) -> dict:
    """A module's module-level ``NAME = literal`` constants, and those it imports by name."""
    path = PACKAGE / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    for node, target, taken in _imported(tree, module):
        origin = PACKAGE / (target.replace(".", "/") + ".py")
        if origin.exists() and target != module:
            theirs = _constants(target)
            found.update({name: theirs[name] for name in taken if name in theirs})
    return found


def _literal(node, constants: dict):
    """``(True, value)`` for a default written as a literal or as a named constant, else
    ``(False, None)``; None and empty containers say "not given", and are left out."""
    if isinstance(node, ast.Constant):
        value = node.value
    elif isinstance(node, ast.Name) and node.id in constants:
        value = constants[node.id]
    else:
        return False, None
    return (value is not None and value != "" and value != ()), value


def _same(a, b) -> bool:
    return (isinstance(a, bool), a) == (isinstance(b, bool), b)


def option_defaults() -> dict:
    """``{name: default}`` of every option field and of launch()'s other parameters."""
    defaults = {}
    constants = _constants("engines.options")
    for node in ast.parse(OPTIONS.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name in OPTION_CLASSES:
            for field in node.body:
                if isinstance(field, ast.AnnAssign) and field.value is not None \
                        and "ClassVar" not in ast.unparse(field.annotation):
                    known, value = _literal(field.value, constants)
                    if known:
                        defaults[field.target.id] = value
    constants = _constants("engines.launch")
    for name, default in _defaults(_function(PACKAGE / "engines" / "launch.py", "launch")):
        known, value = _literal(default, constants)
        if known and name not in SHAPE:
            defaults[name] = value
    return defaults


def _defaults(function: ast.FunctionDef) -> list:
    """``(parameter, default node)`` of each parameter of ``function`` that has a default."""
    a = function.args
    positional = a.posonlyargs + a.args
    return [(x.arg, d) for x, d in zip(positional[len(positional) - len(a.defaults):],
                                       a.defaults)] + \
        [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]


def _retyped(defaults: dict) -> list:
    """Functions and dataclass fields of the backend that default an option's name to the
    option's own default, the option objects and launch() aside."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owners = {id(n): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                  for n in c.body}
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, ast.FunctionDef) and not (path == PACKAGE / "engines" / "launch.py"
                                                          and node.name == "launch"):
                pairs = [(x, d, node.name) for x, d in _defaults(node)]
            elif isinstance(node, ast.AnnAssign) and node.value is not None \
                    and isinstance(node.target, ast.Name) and id(node) in owners \
                    and not (path == OPTIONS and owners[id(node)] in OPTION_CLASSES):
                pairs = [(node.target.id, node.value, owners[id(node)])]
            for name, default, where in pairs:
                # A named constant is the one place; a literal is a copy.
                known, value = _literal(default, {})
                if known and name in defaults and _same(value, defaults[name]):
                    found.append(f"{path.relative_to(PACKAGE)}:{default.lineno} {where}: "
                                 f"{name}={value!r}")
    return found


def _r_functions() -> dict:
    """``{name: [(formal, default text or None), ...]}`` of every function in rpkg/R/*.R."""
    found = {}
    for path in sorted((ROOT / "rpkg" / "R").glob("*.R")):
        text = path.read_text()
        for match in re.finditer(r"^([A-Za-z_.][\w.]*) <- function\(", text, re.M):
            depth, i, start = 1, match.end(), match.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            formals, depth, piece = [], 0, ""
            for ch in text[start:i - 1] + ",":
                if ch == "," and depth == 0:
                    name, _, default = piece.partition("=")
                    formals.append((name.strip(), default.strip() or None))
                    piece = ""
                    continue
                depth += {"(": 1, ")": -1}.get(ch, 0)
                piece += ch
            found[match.group(1)] = [f for f in formals if f[0]]
    return found


def _r_literal(text):
    """The value of an R literal default (a number, a string, TRUE/FALSE), else None."""
    if text is None or text == "NULL":
        return None
    if text in ("TRUE", "FALSE"):
        return text == "TRUE"
    if re.fullmatch(r'"[^"]*"', text):
        return text[1:-1]
    if re.fullmatch(r"-?\d+(\.\d+)?L?", text):
        return float(text.rstrip("L"))
    return None


def test_launch_takes_the_target_the_shape_and_a_few_option_objects():
    launch = _function(PACKAGE / "engines" / "launch.py", "launch")
    a = launch.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    assert len(named) <= MAX_LAUNCH_PARAMETERS, named
    assert {"engine", "restarts", "watch"} <= set(named)
    # The one catch-all: the old spellings, kept for one release (engines/deprecated.py).
    assert a.vararg is None and (a.kwarg is None or a.kwarg.arg == "deprecated_keywords")


def test_each_engine_is_made_from_one_plan():
    engines = ast.parse((PACKAGE / "engines" / "__init__.py").read_text())
    table = next(node.value for node in engines.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "ENGINES" for t in node.targets))
    wide = []
    for module, name in ast.literal_eval(table).values():
        path = PACKAGE / "engines" / (module.replace(".", "/") + ".py")
        cls = next(node for node in ast.parse(path.read_text()).body
                   if isinstance(node, ast.ClassDef) and node.name == name)
        init = next(node for node in cls.body
                    if isinstance(node, ast.FunctionDef) and node.name == "__init__")
        a = init.args
        params = [x.arg for x in a.posonlyargs + a.args[1:] + a.kwonlyargs]
        if len(params) > MAX_LAUNCHER_PARAMETERS or a.vararg or a.kwarg:
            wide.append(f"{name}({', '.join(params)})")
    assert not wide, wide


def test_no_default_of_the_launch_options_is_written_twice_in_python():
    defaults = option_defaults()
    assert {"max_restarts", "grace", "stall_warning", "timeout", "job_name", "poll",
            "progress"} <= set(defaults), defaults
    retyped = _retyped(defaults)
    assert not retyped, "option defaults typed again (use the option's own): " + ", ".join(retyped)
    named = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id.startswith("DEFAULT_"):
                        named.setdefault(t.id, []).append(str(path.relative_to(PACKAGE)))
    twice = {name: where for name, where in named.items() if len(where) > 1}
    assert not twice, twice


def test_r_passes_the_launch_options_through_without_retyping_their_defaults():
    defaults = option_defaults()
    launch = _function(PACKAGE / "engines" / "launch.py", "launch")
    parameters = {x.arg for x in launch.args.args + launch.args.kwonlyargs}
    functions = _r_functions()
    missing = [name for name in R_LAUNCH_FUNCTIONS if name not in functions]
    assert not missing, missing
    given = []
    for name in R_LAUNCH_FUNCTIONS:
        for formal, default in functions[name]:
            if (formal in defaults or formal in parameters) and default not in (None, "NULL") \
                    and (name, formal) not in R_OWN:
                given.append(f"{name}({formal} = {default})")
    assert not given, "R gives these options a default of its own: " + ", ".join(given)
    retyped = [f"{name}({formal} = {default})" for name, formals in functions.items()
               for formal, default in formals
               if formal in defaults and _r_literal(default) is not None
               and _r_literal(default) == defaults[formal] and (name, formal) not in R_OWN]
    assert not retyped, "R retypes these defaults of the launch options: " + ", ".join(retyped)


def test_the_default_checks_see_a_retyped_default():
    assert _literal(ast.parse("60.0").body[0].value, {}) == (True, 60.0)
    assert _literal(ast.parse("None").body[0].value, {}) == (False, None)
    assert not _same(True, 1) and _same(60, 60.0)
    assert _r_literal("60") == 60.0 and _r_literal("TRUE") is True and _r_literal("NULL") is None
