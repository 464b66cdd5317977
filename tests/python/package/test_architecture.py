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
- One module installs import hooks (``versions.after_import``).
- ``launch()`` takes the target, the job's shape (a ``Scaling``) and a few option objects: at
  most 10 named parameters, no catch-all.
- Each engine is one folder whose option object makes a launcher that subclasses the
  ``Launcher`` protocol, is made from the plan and the relay alone and copies no field of the
  plan; the protocol (``Launcher`` and ``Job`` of engines/base.py) declares everything
  restarts.py and elastic/ use; and no engine module checks ``workers``, ``ps`` or ``chief``
  (``Scaling`` does, once).
- Each default of ``launch()``'s options is written once: no function or dataclass of the
  backend retypes it under the option's name (a named constant is fine: it is the one place),
  and no ``DEFAULT_*`` constant is defined in two modules.
- R never retypes a default of the backend: every exported R function that reaches the
  backend (through ``backend()$...``, in its body or its helpers) gives an argument no default
  but none or ``NULL`` (where Python's is None or empty), under Python's name unless R's
  conventions ask for another (``R_NAMES``, each listed in the Python-and-R article). The check
  itself is shown to fail on a retyped default, a renamed argument and a default Python lacks.
"""

from __future__ import annotations

import ast
import inspect
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


# --- launch()'s surface, its engines, and its defaults written once -----------------------------

MAX_LAUNCH_PARAMETERS = 10
ENGINES = PACKAGE / "engines"
OPTIONS = ENGINES / "options.py"
# Each engine is one folder: its option object in engine.py, its launcher beside it.
ENGINE_FOLDERS = ("local", "slurm", "ray")
OPTION_FILES = (OPTIONS, *(ENGINES / folder / "engine.py" for folder in ENGINE_FOLDERS))
OPTION_BASES = {"Options", "Engine"}
# local_cluster() is the cluster layer's own function of a shape (workers, ps, chief), below
# the engines: its defaults are its own, and Scaling's are the job's.
OWN_SHAPE = {"local_cluster"}


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


def _option_classes():
    """``(path, class node)`` of every option object: the classes of options.py and of each
    engine's engine.py that derive from ``Options`` or ``Engine`` (or from one that does)."""
    found = []
    for path in OPTION_FILES:
        bases = set(OPTION_BASES)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and (
                    node.name in bases or {getattr(b, "id", None) for b in node.bases} & bases):
                bases.add(node.name)
                found.append((path, node))
    return found


def _module_of(path: Path) -> str:
    return _module_name(path)


def option_defaults() -> dict:
    """``{name: default}`` of every option field and of launch()'s other parameters."""
    defaults = {}
    for path, node in _option_classes():
        constants = _constants(_module_of(path))
        for field in node.body:
            if isinstance(field, ast.AnnAssign) and field.value is not None \
                    and "ClassVar" not in ast.unparse(field.annotation):
                known, value = _literal(field.value, constants)
                if known:
                    defaults[field.target.id] = value
    constants = _constants("engines.launch")
    for name, default in _defaults(_function(ENGINES / "launch.py", "launch")):
        known, value = _literal(default, constants)
        if known:
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
    options = {(path, node.name) for path, node in _option_classes()}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owners = {id(n): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                  for n in c.body}
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, ast.FunctionDef) and node.name not in OWN_SHAPE \
                    and not (path == ENGINES / "launch.py" and node.name == "launch"):
                pairs = [(x, d, node.name) for x, d in _defaults(node)]
            elif isinstance(node, ast.AnnAssign) and node.value is not None \
                    and isinstance(node.target, ast.Name) and id(node) in owners \
                    and (path, owners[id(node)]) not in options:
                pairs = [(node.target.id, node.value, owners[id(node)])]
            for name, default, where in pairs:
                # A named constant is the one place; a literal is a copy.
                known, value = _literal(default, {})
                if known and name in defaults and _same(value, defaults[name]):
                    found.append(f"{path.relative_to(PACKAGE)}:{default.lineno} {where}: "
                                 f"{name}={value!r}")
    return found


def _r_functions() -> dict:
    """``{name: ([(formal, default text or None), ...], body)}`` of every function in
    rpkg/R/*.R; the body without its comment lines."""
    found = {}
    for path in sorted((ROOT / "rpkg" / "R").glob("*.R")):
        text = path.read_text()
        starts = list(re.finditer(r"^([A-Za-z_.][\w.]*) <- function\(", text, re.M))
        for n, match in enumerate(starts):
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
            end = starts[n + 1].start() if n + 1 < len(starts) else len(text)
            body = "\n".join(line for line in text[i:end].splitlines()
                             if not line.lstrip().startswith("#"))
            found[match.group(1)] = ([f for f in formals if f[0]], body)
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
    launch = _function(ENGINES / "launch.py", "launch")
    a = launch.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    assert len(named) <= MAX_LAUNCH_PARAMETERS, named
    assert {"scaling", "engine", "restarts", "watch"} <= set(named)
    assert a.vararg is None and a.kwarg is None


def _class(path: Path, name: str) -> ast.ClassDef:
    return next(node for node in ast.parse(path.read_text()).body
                if isinstance(node, ast.ClassDef) and node.name == name)


def _members(cls: ast.ClassDef) -> set:
    """The methods and the annotated attributes a class declares."""
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} | \
        {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}


def _engine_launchers() -> dict:
    """``{engine folder: (launcher module path, launcher class node)}``: the class each
    engine's option object makes in its ``launcher()``."""
    found = {}
    for folder in ENGINE_FOLDERS:
        path = ENGINES / folder / "engine.py"
        method = next(node for node in ast.walk(ast.parse(path.read_text()))
                      if isinstance(node, ast.FunctionDef) and node.name == "launcher")
        made = next(node for node in ast.walk(method) if isinstance(node, ast.ImportFrom))
        module = ENGINES / folder / f"{made.module}.py"
        found[folder] = (module, _class(module, made.names[0].name))
    return found


def test_the_launcher_protocol_declares_everything_the_attempt_loop_and_elastic_use():
    # restarts.py and elastic/ drive every engine through base.py's Launcher and Job alone.
    launcher = _members(_class(ENGINES / "base.py", "Launcher"))
    job = _members(_class(ENGINES / "base.py", "Job"))
    used = {"launcher": set(), "job": set()}
    for path in [ENGINES / "restarts.py", *sorted((ENGINES / "elastic").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                value = node.value
                name = value.id if isinstance(value, ast.Name) else getattr(value, "attr", "")
                if name.lstrip("_") in used:
                    used[name.lstrip("_")].add(node.attr)
    assert used["launcher"] >= {"places", "trainers", "probe", "job", "place_word", "plan"}
    assert not used["launcher"] - launcher, used["launcher"] - launcher
    assert not used["job"] - job, used["job"] - job


def test_each_engine_is_one_folder_whose_launcher_follows_the_protocol_and_copies_nothing():
    copied = []
    for folder, (path, cls) in _engine_launchers().items():
        assert "Launcher" in {getattr(b, "id", None) for b in cls.bases}, (folder, cls.name)
        assert path.parent == ENGINES / folder
        init = next(node for node in cls.body
                    if isinstance(node, ast.FunctionDef) and node.name == "__init__")
        a = init.args
        assert [x.arg for x in a.args[1:] + a.kwonlyargs] == ["plan", "relay"] \
            and not a.vararg and not a.kwarg, (cls.name, ast.unparse(a))
        # No field of the plan copied into the launcher: ``self.timeout = plan.timeout``.
        for node in ast.walk(init):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id == "plan":
                    copied.append(f"{cls.name}: {ast.unparse(node)}")
    assert not copied, copied


def test_no_engine_module_checks_the_jobs_shape():
    # The shape (workers, ps, chief) is checked once, by Scaling; an engine reads it.
    shape = {"workers", "ps", "chief"}
    checks = []
    for folder in (*ENGINE_FOLDERS, "warm"):
        for path in sorted((ENGINES / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                tests = []
                if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)):
                    tests = [node.test]
                elif isinstance(node, ast.Call):
                    tests = [a for a in node.args if isinstance(a, ast.Constant)
                             and a.value in shape]
                    if tests:
                        checks.append(f"{path.relative_to(PACKAGE)}:{node.lineno} "
                                      f"{ast.unparse(node)}")
                    continue
                for test in tests:
                    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)} | \
                        {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
                    if names & shape:
                        checks.append(f"{path.relative_to(PACKAGE)}:{node.lineno} "
                                      f"{ast.unparse(test)}")
    assert not checks, checks


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


def test_the_default_checks_see_a_retyped_default():
    assert _literal(ast.parse("60.0").body[0].value, {}) == (True, 60.0)
    assert _literal(ast.parse("None").body[0].value, {}) == (False, None)
    assert not _same(True, 1) and _same(60, 60.0)
    assert _r_literal("60") == 60.0 and _r_literal("TRUE") is True and _r_literal("NULL") is None


# --- R never retypes a default of the backend ----------------------------------------------------

ARTICLE = ROOT / "vignettes" / "articles" / "python-and-r.Rmd"
# R arguments named otherwise than the Python parameter they give, where R's conventions ask it
# (each listed in the Python-and-R article): (R function, R argument) -> Python parameter.
R_NAMES = {
    # R launches scripts (a Python function cannot cross from R); Python, scripts or functions.
    ("launch_cluster", "script"): "target",
    ("slurm_script", "script"): "target",
    # An R data frame is `data`; Python takes its columns.
    ("write_dataset_shards", "data"): "columns",
}
# R arguments with no Python parameter behind them (R's own), and why: none today.
R_OWN: dict = {}
# Python defaults that R's NULL gives as well (R's NULL becomes None, or an empty list).
EMPTY = (None, (), [], {})
REQUIRED = inspect.Parameter.empty


def _r_exports() -> list:
    namespace = (ROOT / "rpkg" / "NAMESPACE").read_text()
    return re.findall(r"^export\(([^)]+)\)$", namespace, re.M)


def _backend_calls(name: str, functions: dict, exports: set, seen=None) -> set:
    """The backend objects (``"launch"``, ``"engines.Local"``) the R function ``name`` reaches
    through ``backend()$...``, in its body or in the package's own helpers it calls (not in
    other exported functions, which are checked on their own). The ``r`` module is left out:
    what exists only for R (R generators served from R's thread) has no Python user to mirror."""
    seen = set() if seen is None else seen
    if name in seen or name not in functions:
        return set()
    seen.add(name)
    body = functions[name][1]
    found = {chain.strip("$").replace("$", ".")
             for chain in re.findall(r"backend\(\)((?:\$[A-Za-z_]\w*)+)", body)}
    found = {chain for chain in found if not chain.startswith("r.")}
    for callee in set(re.findall(r"([A-Za-z_.][\w.]*)\(", body)):
        if callee in functions and callee not in exports:
            found |= _backend_calls(callee, functions, exports, seen)
    return found


def _python_parameters(path: str) -> dict | None:
    """``{parameter: default}`` of the backend callable at ``path`` (``REQUIRED`` where it has
    none), None for what is not callable; a class's ``**kwargs`` are its bases' parameters
    (``checkpoints.BackupAndRestore`` passes them to Keras')."""
    import tfdistributed

    obj = tfdistributed
    for part in path.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        return None
    found, signatures = {}, [inspect.signature(obj)]
    if inspect.isclass(obj):
        signatures += [inspect.signature(base.__init__) for base in obj.__mro__[1:]
                       if "__init__" in vars(base) and base is not object]
    for signature in signatures:
        params = signature.parameters
        for p in params.values():
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self":
                found.setdefault(p.name, p.default)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return found


def r_wrappers(functions=None) -> dict:
    """``{exported R function: (its formals, {Python parameter: default})}`` of every exported
    R function that wraps the backend."""
    functions = _r_functions() if functions is None else functions
    exports = set(_r_exports())
    wrappers = {}
    for name in sorted(exports):
        called = [_python_parameters(path)
                  for path in sorted(_backend_calls(name, functions, exports))]
        called = [params for params in called if params is not None]
        if called:
            wrappers[name] = (functions[name][0],
                              {k: v for params in reversed(called) for k, v in params.items()})
    return wrappers


def _r_retypings(wrappers: dict) -> list:
    """What R types of its own: a default on an argument whose Python default is not the one
    NULL gives (None, an empty list), or an argument Python does not have under that name."""
    found = []
    for name, (formals, params) in wrappers.items():
        for formal, default in formals:
            python = R_NAMES.get((name, formal), formal)
            if formal == "..." or (name, formal) in R_OWN:
                continue
            if python not in params:
                found.append(f"{name}({formal}): the backend has no `{python}`: name it as "
                             f"Python does (or list it in R_NAMES/R_OWN)")
            elif default is None:
                continue
            elif default == "NULL" and params[python] is not REQUIRED \
                    and any(_same(params[python], empty) for empty in EMPTY):
                continue
            else:
                python_default = "none" if params[python] is REQUIRED else repr(params[python])
                found.append(f"{name}({formal} = {default}): Python's default is "
                             f"{python_default}")
    return found


def test_every_exported_r_function_that_wraps_python_passes_on_only_what_it_is_given():
    wrappers = r_wrappers()
    # Every one of them, not the launch functions alone.
    assert {"launch_cluster", "scaling", "fit_distributed", "evaluate_distributed", "powersgd",
            "local_cluster", "dataset_from_arrays", "distribute_strategy", "slurm_script",
            "local_hosts", "restarts", "watching", "backup_and_restore"} <= set(wrappers)
    assert len(wrappers) >= 40, sorted(wrappers)
    retyped = _r_retypings(wrappers)
    assert not retyped, "R types defaults or names of its own: " + "; ".join(retyped)


def test_the_r_check_fails_on_a_retyped_default_or_a_renamed_argument():
    functions = _r_functions()
    formals, body = functions["powersgd"]
    retyped = dict(functions, powersgd=([("rank", "4"), *formals[1:]], body))
    assert _r_retypings(r_wrappers(retyped)) == ["powersgd(rank = 4): Python's default is 4"]
    formals, body = functions["dataset_from_arrays"]
    renamed = dict(functions, dataset_from_arrays=(
        [(("policy" if f == "shard_policy" else f), d) for f, d in formals], body))
    assert _r_retypings(r_wrappers(renamed)) == [
        "dataset_from_arrays(policy): the backend has no `policy`: name it as Python does (or "
        "list it in R_NAMES/R_OWN)"]
    formals, body = functions["dataset_from_arrays"]
    defaulted = dict(functions, dataset_from_arrays=(
        [(f, "32" if f == "batch_size" else d) for f, d in formals], body))
    assert _r_retypings(r_wrappers(defaulted)) == [
        "dataset_from_arrays(batch_size = 32): Python's default is none"]


def test_each_name_that_differs_between_the_languages_is_in_the_python_and_r_article():
    article = ARTICLE.read_text()
    wrappers = r_wrappers()
    for (name, formal), python in R_NAMES.items():
        assert name in wrappers and formal in dict(wrappers[name][0]), (name, formal)
        assert f"`{name}({formal})`" in article and f"({python})`" in article, (name, formal)
