"""The public surface is deliberate: pin it."""

import dlbricks

EXPECTED = {
    "load_model", "ModelGraph", "ModelSource", "LayerNode", "TensorSpec", "ValueStatistics", "decompose",
    "Decomposition",
    "Occurrence", "Brick", "BrickInContext", "BrickContext", "ConstantSpec", "BrickSet", "BrickSetSummary",
    "GRANULARITIES",
    "SIGNATURE_VERSION", "random_inputs", "DlbricksError", "InvalidArgumentError", "ModelLoadError",
    "ShapeInferenceError", "UnrunnableBrickError", "BackendError", "BackendUnavailableError",
    "DatabaseError", "MissingBricksError",
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
    "BrickContribution", "Calibration", "DEFAULT_SUITE", "Estimate", "Evaluation", "EvaluationRow", "InModelTimes",
    "LatencyPredictor", "MissingBrick", "ON_MISSING", "OpModel", "Peaks", "Plan", "Prediction", "Predictor", "Validation",
    "calibrate_peaks", "combined_halfwidth", "critical_path", "estimate", "estimate_decomposition", "evaluate",
    "in_model_times", "measure_whole", "open_store", "plan", "plan_decomposition", "sequential", "validate",
    "estimate_sweep", "validate_sweep", "SweepShape", "SweepPoint", "last_level_cache", "cache_capacity", "memory_rate", "matvec_rates",
    "merge_peaks",
    "QueueTimes", "queue_latency", "queue_critical_path", "issue_time",
    "COMPOSITION_NEIGHBOURS", "CompositionReference", "composition_error", "composition_references",
    "with_composition", "floor_drift_s", "PAIRED_ROUNDS", "paired_interval",
    "model_report", "ModelReport", "render_report", "write_report",
}
MODEL_ZOO = {"TASKS", "ZooModel", "build", "count_params", "export", "get_model", "list_models"}


def test_estimator_and_model_zoo_public_api_are_pinned() -> None:
    """The other packages' lists are pinned beside their tests (generators, benchmarks_db)."""
    import dlbricks.estimator as estimator
    import dlbricks.model_zoo as model_zoo

    for package, expected in ((estimator, ESTIMATOR), (model_zoo, MODEL_ZOO)):
        assert set(package.__all__) == expected, package.__name__
        for name in package.__all__:
            assert hasattr(package, name), f"{package.__name__}.{name}"


def test_no_package_imports_another_packages_private_module() -> None:
    """Packages meet through each other's public names; inside a package, imports are relative."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    private = re.compile(r"from dlbricks\.[a-z_]*\._")
    found = [f"{path.relative_to(root)}:{n}" for folder in ("dlbricks", "generators", "benchmarks_db", "estimator",
                                                            "model_zoo")
             for path in sorted((root / folder).glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if private.search(line)]
    assert found == []
