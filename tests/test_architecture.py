"""The code's shape: the pipeline's direction, the command line above it, no import cycles, private
modules kept private.

The analysis is ``benchmarks/public_surface.py`` (which prints the figures); these tests hold the
code to them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._scripts import load_script

#: At most this many public names (the packages' ``__all__``) in all six packages.
MAX_PUBLIC_NAMES = 40


@pytest.fixture(scope="module")
def surface():
    return load_script("public_surface")


@pytest.fixture(scope="module")
def found(surface):
    return surface.modules()


@pytest.fixture(scope="module")
def found_imports(surface, found):
    return surface.all_imports(found)


def test_every_package_is_read(surface, found) -> None:
    for package in surface.PACKAGES:
        assert package in found
    assert len(found) > 60  # every module of the six folders, not one folder's


def test_no_module_level_import_cycle(surface, found, found_imports) -> None:
    assert surface.import_cycles(found_imports, found) == []


def test_a_cycle_is_found(surface, tmp_path: Path) -> None:
    """The cycle check sees a cycle where there is one (two modules importing each other)."""
    (tmp_path / "dlbricks").mkdir()
    (tmp_path / "dlbricks" / "__init__.py").write_text("__all__ = []\n")
    (tmp_path / "dlbricks" / "_a.py").write_text("from dlbricks._b import x\n")
    (tmp_path / "dlbricks" / "_b.py").write_text("from ._a import y\n\ndef f():\n    from dlbricks import _a\n")
    found = {name: path for name, path in surface.modules(tmp_path).items()}
    cycles = surface.import_cycles(surface.all_imports(found), found)
    assert sorted(cycles[0]) == ["dlbricks._a", "dlbricks._b"]


def test_no_import_cycle_hidden_in_a_function(surface, found, found_imports) -> None:
    """No cycle either among the imports that can run, those inside functions counted too (an import
    moved into a function does not break a cycle, it hides it until the function is called)."""
    assert surface.runtime_cycles(found_imports, found) == []


def test_a_cycle_hidden_in_a_function_is_found(surface, tmp_path: Path) -> None:
    """The check sees a cycle that an import inside a function closes, and not one that only an
    ``if TYPE_CHECKING`` block (which never runs) closes."""
    (tmp_path / "dlbricks").mkdir()
    (tmp_path / "dlbricks" / "__init__.py").write_text("__all__ = []\n")
    (tmp_path / "dlbricks" / "_a.py").write_text("from dlbricks._b import x\nfrom dlbricks._c import z\n")
    (tmp_path / "dlbricks" / "_b.py").write_text("def f():\n    from dlbricks._a import y\n")
    (tmp_path / "dlbricks" / "_c.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from dlbricks._a import y\n")
    found = surface.modules(tmp_path)
    found_imports = surface.all_imports(found)
    assert surface.import_cycles(found_imports, found) == []
    assert [sorted(c) for c in surface.runtime_cycles(found_imports, found)] == [["dlbricks._a", "dlbricks._b"]]
    assert [(i.module, i.line) for i in surface.function_imports(found_imports)] == [("dlbricks._b", 2)]
    typing_only = [i for i in found_imports if i.module == "dlbricks._c"]
    assert [(i.top_level, i.in_function, i.runs) for i in typing_only] == [(False, False, False)]


def test_stages_import_only_stages_to_their_left(surface, found_imports) -> None:
    wrong = surface.against_the_pipeline(found_imports)
    assert wrong == [], [f"{i.module}:{i.line} imports {i.target}" for i in wrong]


def test_the_command_line_is_the_last_layer(surface) -> None:
    """``dlbricks.cli`` sits right of every stage: it may import them all, none of them imports it."""
    assert list(surface.PACKAGES)[-1] == surface.CLI == "dlbricks.cli"


def test_no_stage_imports_the_command_line(surface, found_imports) -> None:
    """No module of the core or of a stage imports ``dlbricks.cli``, not even inside a function
    (``python -m dlbricks``'s script aside)."""
    up = surface.imports_of_the_cli(found_imports)
    assert up == [], [f"{i.module}:{i.line} imports {i.target}" for i in up]


@pytest.mark.parametrize("folder, source", [
    ("estimator", "from dlbricks.cli._util import format_table\n"),
    ("benchmarks_db", "def f():\n    from dlbricks.cli import main\n"),
    ("dlbricks", "import dlbricks.cli\n"),
])
def test_an_import_of_the_command_line_is_found(surface, tmp_path: Path, folder: str, source: str) -> None:
    """The check sees a stage, or the core, that imports the command line (at the top, or in a
    function), and so does the check of the pipeline's direction."""
    for f in set(surface.PACKAGES.values()):
        (tmp_path / f).mkdir()
        (tmp_path / f / "__init__.py").write_text("__all__ = []\n")
    (tmp_path / folder / "_x.py").write_text(source)
    found_imports = surface.all_imports(surface.modules(tmp_path))
    assert [i.module for i in surface.imports_of_the_cli(found_imports)] == [
        f"{'dlbricks' if folder == 'dlbricks' else 'dlbricks.' + folder}._x"]
    assert len(surface.against_the_pipeline(found_imports)) == 1


def test_the_command_line_may_import_every_stage(surface, found_imports) -> None:
    """The command line imports every stage, and that is along the pipeline's direction."""
    imported = {surface.package_of(i.target) for i in found_imports if surface.package_of(i.module) == surface.CLI}
    assert set(surface.PACKAGES) - {surface.CLI} <= imported


def test_no_import_of_another_packages_private_module(surface, found_imports) -> None:
    """The core and the stages meet through each other's public names and public submodules."""
    private = surface.private_imports(found_imports)
    assert private == [], [f"{i.module}:{i.line} imports {i.target}" for i in private]


def test_the_command_line_imports_no_private_module(surface, found_imports) -> None:
    """The command line, too, uses the stages' public names and public submodules only."""
    private = surface.cli_private_imports(found_imports)
    assert private == [], [f"{i.module}:{i.line} imports {i.target}" for i in private]


@pytest.mark.parametrize("source", ["from dlbricks.generators._runner import Runner\n",
                                    "def f():\n    from dlbricks._names import shown\n"])
def test_an_import_of_a_private_module_is_found(surface, tmp_path: Path, source: str) -> None:
    """The check sees an import of another package's private module, at the top or in a function."""
    for f in set(surface.PACKAGES.values()):
        (tmp_path / f).mkdir()
        (tmp_path / f / "__init__.py").write_text("__all__ = []\n")
    (tmp_path / "estimator" / "_x.py").write_text(source)
    (tmp_path / "cli" / "_y.py").write_text(source)
    found_imports = surface.all_imports(surface.modules(tmp_path))
    assert [i.module for i in surface.private_imports(found_imports)] == ["dlbricks.estimator._x"]
    assert [i.module for i in surface.cli_private_imports(found_imports)] == ["dlbricks.cli._y"]


def test_public_names_are_few(surface, found) -> None:
    """What a user needs first is exported; the rest is importable from public submodules."""
    counts = surface.public_names(found)
    assert sum(counts.values()) <= MAX_PUBLIC_NAMES, counts


def test_public_submodules_are_counted(surface, found) -> None:
    """Every module without a leading ``_`` is public, and each package's count says so."""
    subs = surface.public_submodules(found)
    assert set(subs) == set(surface.PACKAGES)
    assert "errors" in subs["dlbricks"] and "runner" in subs["dlbricks.generators"]
    assert subs["dlbricks.cli"] == []  # the command line's modules are all private
    assert all(not name.startswith("_") for names in subs.values() for name in names)


def test_errors_come_from_the_public_package(surface, found_imports) -> None:
    """Outside the core package, an error class that the core package exports is imported from it,
    not from ``dlbricks.errors`` (which holds the others)."""
    import dlbricks

    public = set(dlbricks.__all__)
    offending = [f"{i.module}:{i.line} {', '.join(sorted(set(i.names) & public))}" for i in found_imports
                 if i.target == "dlbricks.errors" and surface.package_of(i.module) != "dlbricks"
                 and set(i.names) & public]
    assert offending == []


#: The generators' modules that run one runtime (each backend's own module and its helpers).
BACKEND_MODULES = ("dlbricks.generators.ort", "dlbricks.generators.ort_kernels", "dlbricks.generators._ort_config",
                   "dlbricks.generators.mxnet", "dlbricks.generators._openvino", "dlbricks.generators._cuda")


def test_the_database_imports_no_backend(found_imports) -> None:
    """The brick database reaches runtimes only through the backend registry (``get_backend``):
    none of its modules imports a backend's module, at the top or in a function."""
    found = [(i.module, i.target) for i in found_imports
             if i.module.startswith("dlbricks.benchmarks_db") and i.target.startswith(BACKEND_MODULES)]
    assert found == []
