"""The Gluon part of the zoo: 34 architectures, random deterministic weights, every one decomposes."""

from __future__ import annotations

import numpy as np
import pytest

import dlbricks
from dlbricks import InvalidArgumentError
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()

from dlbricks.model_zoo.gluon import (  # noqa: E402
    GLUON_MODELS,
    GLUON_PREFIX,
    build_gluon,
    gluon_block,
    list_gluon_models,
)

#: One of each family, fast enough for every run of the lane.
FAMILIES = ("resnet18_v2", "vgg11", "alexnet", "densenet121", "squeezenet1.1", "inceptionv3", "mobilenet0.5",
            "mobilenetv2_0.5")


def test_list() -> None:
    models = list_gluon_models()
    assert len(models) == 34 == len(GLUON_MODELS)
    names = [m.name for m in models]
    assert len(set(names)) == 34 and all(n.startswith(GLUON_PREFIX) for n in names)
    for bare in ("resnet152_v2", "vgg19_bn", "densenet201", "squeezenet1.0", "inceptionv3", "mobilenet0.25",
                 "mobilenetv2_0.25"):
        assert GLUON_PREFIX + bare in names
    inception = next(m for m in models if m.name == "gluon_inceptionv3")
    assert inception.input_shapes == (("data", (1, 3, 299, 299), "float32"),)
    assert {m.task for m in models} == {"image_classification"}


def test_the_gluon_zoo_is_the_real_one() -> None:
    from mxnet.gluon.model_zoo import vision

    with pytest.raises(ValueError, match="not supported"):
        vision.get_model("nope")
    for name in GLUON_MODELS:
        vision.get_model(name, pretrained=False)  # every name is a Gluon name; nothing downloaded


def test_weights_are_deterministic_and_counted() -> None:
    a, b = gluon_block("mobilenet0.25", seed=3), gluon_block("gluon_mobilenet0.25", seed=3)
    pa, pb = a.collect_params(), b.collect_params()
    assert list(pa) == list(pb)
    for key in pa:
        np.testing.assert_array_equal(pa[key].data().asnumpy(), pb[key].data().asnumpy())
    trainable = sum(p.data().size for p in pa.values() if p.grad_req != "null")
    assert trainable == GLUON_MODELS["mobilenet0.25"][1]
    other = gluon_block("mobilenet0.25", seed=4).collect_params()
    assert not np.array_equal(next(iter(other.values())).data().asnumpy(), next(iter(pa.values())).data().asnumpy())
    assert build_gluon("mobilenet0.25", seed=3).key == build_gluon("mobilenet0.25", seed=3).key


def test_bad_names_and_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="Did you mean 'gluon_resnet50_v1'"):
        build_gluon("gluon_resnet50v1")
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        build_gluon("alexnet", batch_size=0)
    with pytest.raises(InvalidArgumentError, match="seed"):
        build_gluon("alexnet", seed=-1)


def _check(name: str, batch_size: int = 1) -> dlbricks.Decomposition:
    graph = build_gluon(name, batch_size=batch_size)
    assert graph.name == GLUON_PREFIX + name
    assert graph.outputs[0].shape == (batch_size, 1000)
    params = sum(graph.constant_array(n).size for n in graph.constants)
    assert params >= GLUON_MODELS[name][1]  # trainable + BatchNorm statistics
    dec = dlbricks.decompose(graph)
    assert dec.layers == len(graph) and 0 < len(dec.bricks) <= dec.layers
    assert dec.dag.number_of_nodes() == dec.layers
    return dec


@pytest.mark.parametrize("name", FAMILIES)
def test_one_model_per_family_decomposes(name: str) -> None:
    _check(name)


def test_batch_size() -> None:
    dec = _check("squeezenet1.1", batch_size=4)
    assert dec.inputs[0].shape == (4, 3, 224, 224)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in GLUON_MODELS if n not in FAMILIES])
def test_every_gluon_model_decomposes(name: str) -> None:
    _check(name)


def test_suite_reuses_bricks_across_models() -> None:
    bs = dlbricks.BrickSet.from_models(build_gluon(n) for n in ("resnet18_v1", "resnet34_v1", "resnet50_v1"))
    s = bs.summary()
    assert s.reuse_ratio > 3 and s.shared_across_models > 20
