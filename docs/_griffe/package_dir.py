"""Griffe extension: load the subpackages that ``pyproject.toml`` maps to top-level folders.

dlbricks installs ``dlbricks.generators`` from ``generators/``, ``dlbricks.estimator`` from
``estimator/`` and so on (``[tool.setuptools.package-dir]``). Griffe finds packages by walking
folders, so it sees ``dlbricks/`` but not the subpackages that live beside it. This extension reads
the mapping from ``pyproject.toml`` and, when the parent package has been visited, visits each mapped
folder (its ``__init__.py`` and its modules) as a subpackage of it, with the same docstring parser
and collections, so that the API reference is built by static analysis like any other package.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import griffe


class PackageDir(griffe.Extension):
    """Attach the folders of ``[tool.setuptools.package-dir]`` to their parent packages."""

    def __init__(self, pyproject: str = "pyproject.toml") -> None:
        path = Path(pyproject).resolve()
        mapping = tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
        root = path.parent
        self.children: dict[str, Path] = {
            name: root / folder for name, folder in mapping.items() if "." in name and name != folder
        }

    def on_module_members(self, *, mod: griffe.Module, agent: Any, **kwargs: Any) -> None:
        for name, folder in self.children.items():
            parent_path, _, child = name.rpartition(".")
            if mod.path == parent_path and child not in mod.members:
                mod.set_member(child, _visit_package(child, folder, mod, agent))


def _visit(name: str, filepath: Path, parent: griffe.Module, agent: Any) -> griffe.Module:
    code = filepath.read_text(encoding="utf-8-sig")
    agent.lines_collection[filepath] = code.splitlines(keepends=False)
    return griffe.visit(
        name,
        filepath=filepath,
        code=code,
        parent=parent,
        extensions=agent.extensions,
        docstring_parser=agent.docstring_parser,
        docstring_options=agent.docstring_options,
        lines_collection=agent.lines_collection,
        modules_collection=agent.modules_collection,
    )


def _visit_package(name: str, folder: Path, parent: griffe.Module, agent: Any) -> griffe.Module:
    package = _visit(name, folder / "__init__.py", parent, agent)
    for entry in sorted(folder.iterdir()):
        if entry.suffix == ".py" and entry.name != "__init__.py":
            package.set_member(entry.stem, _visit(entry.stem, entry, package, agent))
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            package.set_member(entry.name, _visit_package(entry.name, entry, package, agent))
    return package
