"""The code's shape: the pipeline's direction, the command line above it, no import cycles, private
modules kept private.

The analysis is ``benchmarks/public_surface.py`` (which prints the figures); these tests hold the
code to them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._scripts import load_script

#: Private modules of the core package that other packages still import, by importing package: the
#: contracts between the core and the backends (a brick's metadata keys, its weights drawn late,
#: synthetic inputs), the identifier checks, MXNet's frontend. Each is to become public or move; a new
#: pair fails :func:`test_no_new_import_of_a_private_module`. The command line (``dlbricks.cli``), the
#: layer above every stage, may still import any of their private modules.
KNOWN_PRIVATE = {
    "dlbricks.model_zoo": {"dlbricks._mxnet_frontend", "dlbricks._mxnet_bricks", "dlbricks._names"},
    "dlbricks.generators": {"dlbricks._graph", "dlbricks._inputs", "dlbricks._bricks", "dlbricks._mxnet_bricks",
                            "dlbricks._mxnet_frontend", "dlbricks._ov_fusion", "dlbricks._fusion",
                            "dlbricks._ortutil"},
    "dlbricks.benchmarks_db": {"dlbricks._names", "dlbricks._tempdir"},
    "dlbricks.estimator": {"dlbricks._names", "dlbricks._mxnet_frontend", "dlbricks._cost",
                           "dlbricks._fusion", "dlbricks._onnx_frontend", "dlbricks._ortutil", "dlbricks._memory"},
}


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


def test_no_new_import_of_a_private_module(surface, found_imports) -> None:
    private = surface.private_imports(found_imports)
    assert private  # the check sees the ones still there
    new = sorted({(surface.package_of(i.module), i.target) for i in private
                  if i.target not in KNOWN_PRIVATE.get(surface.package_of(i.module), set())})
    assert new == [], f"import the package's public names instead of its private modules: {new}"


def test_errors_come_from_the_public_package(surface, found_imports) -> None:
    """Every error class that the core package exports is imported from it, not from ``_errors``,
    outside the core package."""
    import dlbricks

    public = set(dlbricks.__all__)
    private = surface.private_imports(found_imports) + surface.cli_private_imports(found_imports)
    offending = [f"{i.module}:{i.line}" for i in private
                 if i.target == "dlbricks._errors" and set(i.names) <= public]
    assert offending == []
