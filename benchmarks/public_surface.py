"""The shape of dlbricks' code: public names per package, private imports across packages, import cycles.

Usage::

    python benchmarks/public_surface.py [--list]

Reads the source (``ast``, nothing imported) of the six packages (``dlbricks``, its stages
``model_zoo``, ``generators``, ``benchmarks_db``, ``estimator``, and the command line ``cli``, the
layer above every stage) and prints:

- each package's public names (its ``__all__``) and their total;
- each package's public submodules (a module whose name does not start with ``_``: what a user may
  import besides the package's names) and their total;
- the imports of another package's private module (``from dlbricks.errors import ...`` in
  ``generators``), per pair of packages, and the private names they take (``--list``: each one);
  the command line's own on a line of their own;
- the cycles among module-level imports (``networkx.simple_cycles``; ``if TYPE_CHECKING`` blocks
  and imports inside functions left out);
- the cycles among the imports that can run: module-level ones and those inside functions (which a
  cycle hides until the function is called; ``if TYPE_CHECKING`` blocks, which never run, left out);
- the imports of dlbricks modules inside functions that remain (``--list``: each one);
- imports against the pipeline's direction: a stage that imports a stage to its right, or the
  command line (``python -m dlbricks``'s script, never imported, left out);
- imports of the command line by a stage or the core (none may: the layer sits above them).

``tests/test_architecture.py`` holds the code to these figures.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
#: The command line: the layer above every stage. It may import any of them (their public names and
#: public submodules, as every package does); none of them imports it.
CLI = "dlbricks.cli"
#: Source folder of each package, in the pipeline's order: a package imports only those before it.
PACKAGES = {"dlbricks": "dlbricks", "dlbricks.model_zoo": "model_zoo", "dlbricks.generators": "generators",
            "dlbricks.benchmarks_db": "benchmarks_db", "dlbricks.estimator": "estimator", CLI: "cli"}
#: Modules run as scripts (``python -m dlbricks``), never imported: they may import the command line.
SCRIPTS = frozenset({"dlbricks.__main__"})


@dataclass(frozen=True, slots=True)
class Import:
    """One ``from X import a, b`` (or ``import X``) of a module, resolved to absolute names."""

    module: str  # the importing module
    target: str  # the module imported from
    names: tuple[str, ...]
    line: int
    top_level: bool  # run when the module is imported (not in a function, not under TYPE_CHECKING)
    in_function: bool = False  # run when a function is called (inside a def or lambda, not under TYPE_CHECKING)

    @property
    def runs(self) -> bool:
        """Whether the import can run at all (an ``if TYPE_CHECKING`` block's never does)."""
        return self.top_level or self.in_function


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the six packages by its dotted name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted((root / folder).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def package_of(module: str) -> str:
    """The package (of :data:`PACKAGES`) that ``module`` belongs to."""
    return max((p for p in PACKAGES if module == p or module.startswith(p + ".")), key=len, default="dlbricks")


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if``'s test is ``TYPE_CHECKING`` (or ``typing.TYPE_CHECKING``)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _places(tree: ast.Module) -> dict[int, str]:
    """Where each import node of the module is, by its id: ``"module"`` (run when the module is
    imported), ``"function"`` (inside a def or lambda: run when it is called) or ``"type_checking"``
    (in the body of an ``if TYPE_CHECKING``, anywhere: never run)."""
    places: dict[int, str] = {}

    def visit(node: ast.AST, place: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = place
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                inner = "type_checking"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and place == "module":
                inner = "function"
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                places[id(child)] = inner
            visit(child, inner)

    visit(tree, "module")
    return places


def imports(name: str, path: Path) -> Iterator[Import]:
    """The imports of dlbricks modules in module ``name`` (at ``path``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    places = _places(tree)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("dlbricks"):
                yield Import(name, target, tuple(a.name for a in node.names), node.lineno,
                             places[id(node)] == "module", places[id(node)] == "function")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dlbricks"):
                    yield Import(name, alias.name, (), node.lineno, places[id(node)] == "module",
                                 places[id(node)] == "function")


def all_imports(found: dict[str, Path] | None = None) -> list[Import]:
    """Every dlbricks import of every module."""
    found = modules() if found is None else found
    return [imp for name, path in found.items() for imp in imports(name, path)]


def is_private_module(target: str) -> bool:
    """Whether ``target`` names a private module (a part after its package starts with ``_``)."""
    rest = target[len(package_of(target)):].lstrip(".")
    return rest.startswith("_")


def _imports_of_private_modules(found_imports: list[Import]) -> list[Import]:
    return [imp for imp in found_imports
            if package_of(imp.module) != package_of(imp.target) and is_private_module(imp.target)]


def private_imports(found_imports: list[Import]) -> list[Import]:
    """Imports of another package's private module by the core and the stages (the command line's:
    :func:`cli_private_imports`)."""
    return [imp for imp in _imports_of_private_modules(found_imports) if package_of(imp.module) != CLI]


def cli_private_imports(found_imports: list[Import]) -> list[Import]:
    """The command line's imports of the core's and the stages' private modules."""
    return [imp for imp in _imports_of_private_modules(found_imports) if package_of(imp.module) == CLI]


def import_cycles(found_imports: list[Import], found: dict[str, Path]) -> list[list[str]]:
    """Cycles among the modules' top-level imports (``from pkg import submodule`` is an import of the
    submodule, not of the package)."""
    return _cycles([imp for imp in found_imports if imp.top_level], found)


def runtime_cycles(found_imports: list[Import], found: dict[str, Path]) -> list[list[str]]:
    """Cycles among the imports that can run: top-level ones and those inside functions (an import in a
    function that closes a cycle only hides it), not those under ``if TYPE_CHECKING``."""
    return _cycles([imp for imp in found_imports if imp.runs], found)


def function_imports(found_imports: list[Import]) -> list[Import]:
    """The imports of dlbricks modules made inside functions."""
    return [imp for imp in found_imports if imp.in_function]


def _cycles(found_imports: list[Import], found: dict[str, Path]) -> list[list[str]]:
    """Cycles among ``found_imports``, shortest first."""
    graph = nx.DiGraph()
    for imp in found_imports:
        submodules = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in found]
        targets = submodules if imp.names and len(submodules) == len(imp.names) else [imp.target]
        graph.add_edges_from((imp.module, t) for t in targets if t in found and t != imp.module)
    return sorted(nx.simple_cycles(graph), key=len)


def against_the_pipeline(found_imports: list[Import]) -> list[Import]:
    """Imports of a package to the importing module's right in :data:`PACKAGES` (the command line is
    the rightmost; :data:`SCRIPTS` left out)."""
    order = list(PACKAGES)
    return [imp for imp in found_imports
            if imp.module not in SCRIPTS
            and order.index(package_of(imp.target)) > order.index(package_of(imp.module))]


def imports_of_the_cli(found_imports: list[Import]) -> list[Import]:
    """Imports of the command line (:data:`CLI`) by a module of the core or of a stage, anywhere in
    it (in a function too; :data:`SCRIPTS` left out)."""
    return [imp for imp in found_imports
            if package_of(imp.target) == CLI and package_of(imp.module) != CLI and imp.module not in SCRIPTS]


def public_names(found: dict[str, Path]) -> dict[str, int]:
    """The length of each package's ``__all__``."""
    counts = {}
    for package in PACKAGES:
        tree = ast.parse(found[package].read_text(encoding="utf-8"))
        names: list[str] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                names = list(ast.literal_eval(node.value))
        counts[package] = len(names)
    return counts


def public_submodules(found: dict[str, Path]) -> dict[str, list[str]]:
    """Each package's public submodules (their names after the package's): the modules whose name
    does not start with ``_`` (the package itself and :data:`SCRIPTS` left out)."""
    subs: dict[str, list[str]] = {package: [] for package in PACKAGES}
    for name in found:
        package = package_of(name)
        rest = name[len(package):].lstrip(".")
        if rest and not rest.startswith("_") and name not in SCRIPTS:
            subs[package].append(rest)
    return {package: sorted(names) for package, names in subs.items()}


def _print_private(private: list[Import], title: str, found: dict[str, Path], each: bool) -> None:
    """One line of ``private``'s figures per pair of packages (``each``: then one line per import)."""
    pairs = Counter((package_of(i.module), package_of(i.target)) for i in private)
    taken = {(package_of(i.module), f"{i.target}.{n}") for i in private for n in i.names}
    print(f"{title}: {len(private)}, {len(taken)} names; "
          + ", ".join(f"{a} -> {b} {n}" for (a, b), n in pairs.most_common()))
    if each:
        for imp in private:
            print(f"  {found[imp.module].relative_to(ROOT)}:{imp.line} {imp.target} {', '.join(imp.names)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each private import")
    args = parser.parse_args()
    found = modules()
    found_imports = all_imports(found)
    counts = public_names(found)
    print("public names: " + ", ".join(f"{p} {n}" for p, n in counts.items()) + f"; {sum(counts.values())} in all")
    subs = public_submodules(found)
    print("public submodules: " + ", ".join(f"{p} {len(n)}" for p, n in subs.items())
          + f"; {sum(map(len, subs.values()))} in all")
    for package, names in subs.items():
        if names:
            print(f"  {package}: {', '.join(names)}")
    private = private_imports(found_imports)
    _print_private(private, "imports of another package's private module", found, args.list)
    _print_private(cli_private_imports(found_imports), "the command line's imports of a private module", found,
                   args.list)
    cycles = import_cycles(found_imports, found)
    print(f"module-level import cycles: {len(cycles)}" + "".join(f"\n  {' -> '.join(c)}" for c in cycles))
    hidden = runtime_cycles(found_imports, found)
    print(f"import cycles counting imports inside functions: {len(hidden)}"
          + "".join(f"\n  {' -> '.join(c)}" for c in hidden))
    local = function_imports(found_imports)
    print(f"imports of dlbricks modules inside functions: {len(local)}"
          + "".join(f"\n  {found[i.module].relative_to(ROOT)}:{i.line} {i.target} {', '.join(i.names)}"
                    for i in local if args.list))
    wrong = against_the_pipeline(found_imports)
    print(f"imports against the pipeline's direction: {len(wrong)}"
          + "".join(f"\n  {found[i.module].relative_to(ROOT)}:{i.line} {i.target}" for i in wrong))
    up = imports_of_the_cli(found_imports)
    print(f"imports of the command line by a stage or the core: {len(up)}"
          + "".join(f"\n  {found[i.module].relative_to(ROOT)}:{i.line} {i.target}" for i in up))


if __name__ == "__main__":
    main()
