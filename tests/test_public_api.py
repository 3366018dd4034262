"""The public surface is deliberate: pin it."""

import dlbricks

EXPECTED = {
    "load_model", "ModelGraph", "decompose", "Decomposition", "Brick", "BrickSet",
    "DlbricksError", "InvalidArgumentError", "MissingBricksError", "ModelLoadError", "BackendError",
}


def test_public_api_is_pinned() -> None:
    assert set(dlbricks.__all__) == EXPECTED
    for name in dlbricks.__all__:
        assert hasattr(dlbricks, name)


def test_errors_share_one_root() -> None:
    for name in dlbricks.__all__:
        obj = getattr(dlbricks, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, dlbricks.DlbricksError)


ESTIMATOR = {
    "estimate", "Estimate", "plan", "validate", "Validation", "evaluate", "Evaluation", "calibrate_peaks",
    "model_report", "write_report",
}
MODEL_ZOO = {"build", "count_params", "get_model", "list_models"}
#: At most this many public names in all the packages' ``__all__`` (``benchmarks/public_surface.py``).
MAX_PUBLIC_NAMES = 40


def test_estimator_and_model_zoo_public_api_are_pinned() -> None:
    """The other packages' lists are pinned beside their tests (generators, benchmarks_db)."""
    import dlbricks.estimator as estimator
    import dlbricks.model_zoo as model_zoo

    for package, expected in ((estimator, ESTIMATOR), (model_zoo, MODEL_ZOO)):
        assert set(package.__all__) == expected, package.__name__
        for name in package.__all__:
            assert hasattr(package, name), f"{package.__name__}.{name}"


def test_errors_module_holds_every_error() -> None:
    """``dlbricks.errors`` is public: every error class, each under the one root."""
    import dlbricks.errors as errors

    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, dlbricks.DlbricksError), name


def test_public_names_are_few() -> None:
    """The packages export what a user needs first; the rest lives in public submodules."""
    import dlbricks.benchmarks_db
    import dlbricks.cli
    import dlbricks.estimator
    import dlbricks.generators
    import dlbricks.model_zoo

    packages = (dlbricks, dlbricks.model_zoo, dlbricks.generators, dlbricks.benchmarks_db, dlbricks.estimator,
                dlbricks.cli)
    assert sum(len(p.__all__) for p in packages) <= MAX_PUBLIC_NAMES


def test_every_public_submodule_declares_its_names() -> None:
    """A public submodule (no ``_`` in front) says what it exports, and has each of those names."""
    import importlib

    from tests._scripts import load_script

    surface = load_script("public_surface")
    for package, names in surface.public_submodules(surface.modules()).items():
        for name in names:
            module = importlib.import_module(f"{package}.{name}")
            assert isinstance(getattr(module, "__all__", None), list), module.__name__
            missing = [n for n in module.__all__ if not hasattr(module, n)]
            assert missing == [], f"{module.__name__}: {missing}"


def test_no_package_imports_another_packages_private_module() -> None:
    """Packages, the command line among them, meet through each other's public names and public
    submodules; inside a package, imports are relative."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    folders = {"dlbricks": "dlbricks", "generators": "generators", "benchmarks_db": "benchmarks_db",
               "estimator": "estimator", "model_zoo": "model_zoo", "cli": "cli"}
    found = []
    for folder, package in folders.items():
        # another stage's private module (dlbricks.generators._runner), or the core's (dlbricks._x)
        patterns = [r"(from|import) dlbricks\.(?!" + package + r"\b)[a-z_]+\._"]
        if folder != "dlbricks":
            patterns.append(r"(from|import) dlbricks\._")
        private = re.compile("|".join(patterns))
        found += [f"{path.relative_to(root)}:{n}" for path in sorted((root / folder).glob("*.py"))
                  for n, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert found == []
