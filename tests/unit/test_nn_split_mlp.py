"""nn-split-mlp is exact: the split model evaluates to the unsplit one (fp64 reference), in an nn.repeat body too,
and every fc2 part has K <= max_k."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.dialects import nn
from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_split_mlp import split_sizes
from ipu.passes.registry import all_passes


def run(spec: str):
    cfg = PRESETS["tiny"]
    m = build_vision_model(cfg)
    if spec:
        PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), m)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    return m, evaluate(m, {"pixel_values": x}, random_weights(cfg, 0), mode="fp64").outputs


@pytest.mark.parametrize("spec", ["nn-split-mlp{max_k=64}", "nn-outline-repeat,nn-split-mlp{max_k=48}"])
def test_split_is_exact(spec):
    _, want = run("")
    m, got = run(spec)
    ks = [op.weight.type.get_shape()[-1] for op in m.walk() if isinstance(op, nn.LinearOp)]
    fc2_ks = [
        op.weight.type.get_shape()[-1]
        for op in m.walk()
        if isinstance(op, nn.LinearOp) and isinstance(op.input.owner, nn.GeluOp)
    ]
    limit = int(spec.split("max_k=")[1].rstrip("}"))
    rows = [
        op.input.type.get_shape()[0]
        for op in m.walk()
        if isinstance(op, nn.LinearOp) and isinstance(op.input.owner, nn.GeluOp)
    ]
    enc = [k for k, r in zip(fc2_ks, rows) if r > 1]
    assert len(enc) >= 3 and max(enc) <= limit, (fc2_ks, ks)  # the encoder MLPs were split
    assert [k for k, r in zip(fc2_ks, rows) if r == 1] == [
        PRESETS["tiny"].intermediate_size
    ]  # the head's one row: whole (min_rows)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-9)


def test_split_sizes():
    assert split_sizes(4304, 2304) == [2160, 2144]
    assert split_sizes(128, 2304) == [128]
    for f, k in [(100, 40), (4304, 1000), (37, 16)]:
        sizes = split_sizes(f, k)
        assert sum(sizes) == f and max(sizes) <= k and all(s % 16 == 0 for s in sizes[:-1])
