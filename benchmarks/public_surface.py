"""The shape of dlbricks' code: public names per package, private imports across packages, import cycles.

Usage::

    python benchmarks/public_surface.py [--list]

Reads the source (``ast``, nothing imported) of the five packages (``dlbricks``, its stages
``generators``, ``benchmarks_db``, ``estimator`` and the ``model_zoo``) and prints:

- each package's public names (its ``__all__``) and their total;
- the imports of another package's private module (``from dlbricks._errors import ...`` in
  ``generators``), per pair of packages, and the private names they take (``--list``: each one);
- the cycles among module-level imports (``networkx.simple_cycles``; ``if TYPE_CHECKING`` blocks
  and imports inside functions left out);
- imports against the pipeline's direction: a stage that imports a stage to its right (the command
  line's modules, which sit above every stage, left out).

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
#: Source folder of each package, in the pipeline's order: a package imports only those before it.
PACKAGES = {"dlbricks": "dlbricks", "dlbricks.model_zoo": "model_zoo", "dlbricks.generators": "generators",
            "dlbricks.benchmarks_db": "benchmarks_db", "dlbricks.estimator": "estimator"}
#: Modules of the command line: above every stage, whichever folder holds them.
CLI_MODULES = frozenset({"cli", "_cliutil", "__main__"})


@dataclass(frozen=True, slots=True)
class Import:
    """One ``from X import a, b`` (or ``import X``) of a module, resolved to absolute names."""

    module: str  # the importing module
    target: str  # the module imported from
    names: tuple[str, ...]
    line: int
    top_level: bool  # run when the module is imported (not in a function, not under TYPE_CHECKING)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the five packages by its dotted name."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted((root / folder).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def package_of(module: str) -> str:
    """The package (of :data:`PACKAGES`) that ``module`` belongs to."""
    return max((p for p in PACKAGES if module == p or module.startswith(p + ".")), key=len, default="dlbricks")


def _top_level(tree: ast.Module) -> set[int]:
    """Ids of the import nodes that run when the module is imported."""
    ids: set[int] = set()
    for node in tree.body:
        body = node.body if isinstance(node, ast.Try) else [node]
        ids.update(id(n) for n in body if isinstance(n, (ast.Import, ast.ImportFrom)))
    return ids


def imports(name: str, path: Path) -> Iterator[Import]:
    """The imports of dlbricks modules in module ``name`` (at ``path``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = _top_level(tree)
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
                yield Import(name, target, tuple(a.name for a in node.names), node.lineno, id(node) in top)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dlbricks"):
                    yield Import(name, alias.name, (), node.lineno, id(node) in top)


def all_imports(found: dict[str, Path] | None = None) -> list[Import]:
    """Every dlbricks import of every module."""
    found = modules() if found is None else found
    return [imp for name, path in found.items() for imp in imports(name, path)]


def is_private_module(target: str) -> bool:
    """Whether ``target`` names a private module (a part after its package starts with ``_``)."""
    rest = target[len(package_of(target)):].lstrip(".")
    return rest.startswith("_")


def private_imports(found_imports: list[Import]) -> list[Import]:
    """Imports of another package's private module."""
    return [imp for imp in found_imports
            if package_of(imp.module) != package_of(imp.target) and is_private_module(imp.target)]


def import_cycles(found_imports: list[Import], found: dict[str, Path]) -> list[list[str]]:
    """Cycles among the modules' top-level imports (``from pkg import submodule`` is an import of the
    submodule, not of the package)."""
    graph = nx.DiGraph()
    for imp in found_imports:
        if not imp.top_level:
            continue
        submodules = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in found]
        targets = submodules if imp.names and len(submodules) == len(imp.names) else [imp.target]
        graph.add_edges_from((imp.module, t) for t in targets if t in found and t != imp.module)
    return sorted(nx.simple_cycles(graph), key=len)


def against_the_pipeline(found_imports: list[Import]) -> list[Import]:
    """Imports of a stage to the importing module's right in :data:`PACKAGES` (command-line modules
    left out)."""
    order = list(PACKAGES)
    return [imp for imp in found_imports
            if imp.module.rpartition(".")[2] not in CLI_MODULES
            and order.index(package_of(imp.target)) > order.index(package_of(imp.module))]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each private import")
    args = parser.parse_args()
    found = modules()
    found_imports = all_imports(found)
    counts = public_names(found)
    print("public names: " + ", ".join(f"{p} {n}" for p, n in counts.items()) + f"; {sum(counts.values())} in all")
    private = private_imports(found_imports)
    pairs = Counter((package_of(i.module), package_of(i.target)) for i in private)
    taken = {(package_of(i.module), f"{i.target}.{n}") for i in private for n in i.names}
    print(f"imports of another package's private module: {len(private)}, {len(taken)} names; "
          + ", ".join(f"{a} -> {b} {n}" for (a, b), n in pairs.most_common()))
    if args.list:
        for imp in private:
            print(f"  {found[imp.module].relative_to(ROOT)}:{imp.line} {imp.target} {', '.join(imp.names)}")
    cycles = import_cycles(found_imports, found)
    print(f"module-level import cycles: {len(cycles)}" + "".join(f"\n  {' -> '.join(c)}" for c in cycles))
    wrong = against_the_pipeline(found_imports)
    print(f"imports against the pipeline's direction: {len(wrong)}"
          + "".join(f"\n  {found[i.module].relative_to(ROOT)}:{i.line} {i.target}" for i in wrong))


if __name__ == "__main__":
    main()
