"""The public surface is deliberate: pin it."""

import dlbricks

EXPECTED = {
    "load_model", "ModelGraph", "ModelSource", "LayerNode", "TensorSpec", "ValueStatistics", "decompose",
    "Decomposition",
    "Occurrence", "Brick", "BrickInContext", "ConstantSpec", "BrickSet", "BrickSetSummary", "GRANULARITIES",
    "SIGNATURE_VERSION", "random_inputs", "DlbricksError", "InvalidArgumentError", "ModelLoadError",
    "ShapeInferenceError", "UnrunnableBrickError", "BackendError", "BackendUnavailableError",
    "DatabaseError",
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
