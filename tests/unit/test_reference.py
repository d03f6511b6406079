"""The numpy reference evaluator (`ipu.frontend.reference`) against independent computations.

Every op is checked against PyTorch (float64) or a hand formula; device-mode rounding against float16 and an
FP8 decoder written here from the format definition (not ml_dtypes); nn.repeat against the unrolled program.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, Float8E4M3FNUZType, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser

from ipu.dialects import nn
from ipu.frontend.reference import EvaluationError, OpId, erf, evaluate, quantize_fp8

RNG = np.random.default_rng(1234)


def parse(body: str) -> ModuleOp:
    """A module with one function whose body is `body` (nn ops), terminated by func.return."""
    ctx = Context()
    for d in (Builtin, Func, nn.NN):
        ctx.load_dialect(d)
    module = Parser(ctx, f"func.func @f() {{\n{body}\n  func.return\n}}").parse_module()
    module.verify()
    return module


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def t64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def run(
    body: str, inputs: dict, params: dict | None = None, mode: str = "fp64", name: str = "y"
) -> np.ndarray:
    return evaluate(parse(body), inputs, params or {}, mode=mode).outputs[name]


def close(a: np.ndarray, b, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    np.testing.assert_allclose(a, np.asarray(b, dtype=np.float64), rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------------------------------
# Each op against torch (float64) or a hand formula


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_rank3_input(with_bias):
    x, w, b = randn(2, 5, 7), randn(4, 7), randn(4)
    bias = ", %b" if with_bias else ""
    bias_type = ", tensor<4xf32>" if with_bias else ""
    body = f"""
  %x = nn.input "x" : tensor<2x5x7xf32>
  %w = nn.param "w" : tensor<4x7xf32>
  %b = nn.param "b" : tensor<4xf32>
  %y = nn.linear %x, %w{bias} : tensor<2x5x7xf32>, tensor<4x7xf32>{bias_type} -> tensor<2x5x4xf32>
  nn.output "y" %y : tensor<2x5x4xf32>"""
    y = run(body, {"x": x}, {"w": w, "b": b})
    assert y.dtype == np.float64
    close(y, F.linear(t64(x), t64(w), t64(b) if with_bias else None))
    y32 = run(body, {"x": x}, {"w": w, "b": b}, mode="fp32")
    assert y32.dtype == np.float32
    close(y32, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transpose", [False, True])
def test_matmul_batched(transpose):
    a = randn(3, 4, 6)
    b = randn(3, 5, 6) if transpose else randn(3, 6, 5)
    attr = " {transpose_rhs = true}" if transpose else ""
    bt = "3x5x6" if transpose else "3x6x5"
    body = f"""
  %a = nn.input "a" : tensor<3x4x6xf32>
  %b = nn.input "b" : tensor<{bt}xf32>
  %y = nn.matmul %a, %b{attr} : tensor<3x4x6xf32>, tensor<{bt}xf32> -> tensor<3x4x5xf32>
  nn.output "y" %y : tensor<3x4x5xf32>"""
    ref = torch.matmul(t64(a), t64(b).transpose(-1, -2) if transpose else t64(b))
    close(run(body, {"a": a, "b": b}), ref)


@pytest.mark.parametrize("op,fn", [("add", torch.add), ("mul", torch.mul)])
def test_elementwise_broadcasts_trailing_dims(op, fn):
    x, row, same = randn(2, 3, 4), randn(4), randn(2, 3, 4)
    body = f"""
  %x = nn.input "x" : tensor<2x3x4xf32>
  %r = nn.input "r" : tensor<4xf32>
  %s = nn.input "s" : tensor<2x3x4xf32>
  %a = nn.{op} %x, %r : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>
  %y = nn.{op} %a, %s : tensor<2x3x4xf32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  nn.output "y" %y : tensor<2x3x4xf32>"""
    close(run(body, {"x": x, "r": row, "s": same}), fn(fn(t64(x), t64(row)), t64(same)))


def test_scale_uses_the_f32_attribute():
    x = randn(3, 4)
    body = """
  %x = nn.input "x" : tensor<3x4xf32>
  %y = nn.scale %x by 0.1178511307 : tensor<3x4xf32> -> tensor<3x4xf32>
  nn.output "y" %y : tensor<3x4xf32>"""
    close(run(body, {"x": x}), x.astype(np.float64) * float(np.float32(72**-0.5)))


def test_layer_norm_biased_variance_eps_inside_sqrt():
    # A small spread (variance ~1e-4) with eps 1e-3 makes eps placement and the variance estimator visible.
    x = randn(5, 16, scale=1e-2) + 3.0
    w, b = randn(16) + 1.0, randn(16)
    body = """
  %x = nn.input "x" : tensor<5x16xf32>
  %w = nn.param "w" : tensor<16xf32>
  %b = nn.param "b" : tensor<16xf32>
  %y = nn.layer_norm %x, %w, %b eps=1.0e-03 : tensor<5x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<5x16xf32>
  nn.output "y" %y : tensor<5x16xf32>"""
    eps = float(np.float32(1e-3))
    close(
        run(body, {"x": x}, {"w": w, "b": b}),
        F.layer_norm(t64(x), (16,), t64(w), t64(b), eps=eps),
        rtol=1e-10,
    )
    y32 = run(body, {"x": x}, {"w": w, "b": b}, mode="fp32")
    # fp32: x - mean cancels (x ~ 3, ulp 2.4e-7, against a spread of 1e-2), so the normalised values carry ~3e-5
    # absolute error times |w| (the test's draws depend on the order tests run in); a misplaced eps or the
    # unbiased variance is off by over 1e-2.
    close(y32, F.layer_norm(t64(x), (16,), t64(w), t64(b), eps=eps), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu(approximate):
    x = np.concatenate([randn(200, scale=3.0), [0.0, -1e-30, 1e-30, 8.0, -8.0, 30.0, -30.0]]).astype(
        np.float32
    )
    body = f"""
  %x = nn.input "x" : tensor<207xf32>
  %y = nn.gelu %x "{approximate}" : tensor<207xf32> -> tensor<207xf32>
  nn.output "y" %y : tensor<207xf32>"""
    ref = F.gelu(t64(x), approximate=approximate)
    # 1 + tanh (or 1 + erf) cancels for negative x: the error is relative to |x|, not to the tiny result.
    close(run(body, {"x": x}), ref, rtol=1e-13, atol=1e-15)
    close(run(body, {"x": x}, mode="fp32"), ref, rtol=3e-6, atol=1e-6)
    # The two forms differ by up to ~4.7e-4 (SIGLIP.md): a swapped approximation would fail above.
    other = F.gelu(t64(x), approximate="none" if approximate == "tanh" else "tanh")
    assert np.max(np.abs(ref.numpy() - other.numpy())) > 1e-4


def test_erf_against_libm():
    x = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-300, 1.0, 500), [np.inf, -np.inf, 0.0]])
    got = erf(x)
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0)
    assert np.isnan(erf(np.array([np.nan]))[0])


@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_axis_and_large_values(axis):
    x = randn(4, 6, scale=5.0)
    x[1, 2] = 1000.0  # exp(1000) overflows unless the max is subtracted
    body = f"""
  %x = nn.input "x" : tensor<4x6xf32>
  %y = nn.softmax %x axis={axis} : tensor<4x6xf32> -> tensor<4x6xf32>
  nn.output "y" %y : tensor<4x6xf32>"""
    ref = torch.softmax(t64(x), dim=axis)
    close(run(body, {"x": x}), ref)
    y32 = run(body, {"x": x}, mode="fp32")
    assert np.all(np.isfinite(y32))
    close(y32, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("t", [1, 5])
def test_attention_per_head_against_sdpa(t):
    heads, d, s = 3, 4, 7
    q, k, v = randn(t, heads * d), randn(s, heads * d), randn(s, heads * d)
    body = f"""
  %q = nn.input "q" : tensor<{t}x12xf32>
  %k = nn.input "k" : tensor<7x12xf32>
  %v = nn.input "v" : tensor<7x12xf32>
  %y = nn.attention %q, %k, %v heads=3 scale=0.7 : tensor<{t}x12xf32>, tensor<7x12xf32>, tensor<7x12xf32> -> tensor<{t}x12xf32>
  nn.output "y" %y : tensor<{t}x12xf32>"""

    def split(x, n):  # [n, H*D] -> [H, n, D]; head h owns channels [h*D, (h+1)*D)
        return t64(x).reshape(n, heads, d).transpose(0, 1)

    scale = float(np.float32(0.7))
    out = F.scaled_dot_product_attention(split(q, t), split(k, s), split(v, s), scale=scale)
    ref = out.transpose(0, 1).reshape(t, heads * d)
    close(run(body, {"q": q, "k": k, "v": v}), ref)
    close(run(body, {"q": q, "k": k, "v": v}, mode="fp32"), ref, rtol=1e-5, atol=1e-6)


def test_patchify_then_linear_is_a_valid_conv():
    # 17x23 with patch 5: 3x4 patches, the last 2 rows and 3 columns are ignored. Batch 2.
    x, w, b = randn(2, 3, 17, 23), randn(6, 3, 5, 5), randn(6)
    body = """
  %x = nn.input "x" : tensor<2x3x17x23xf32>
  %p = nn.patchify %x patch=5 : tensor<2x3x17x23xf32> -> tensor<24x75xf32>
  %w = nn.param "w" : tensor<6x3x5x5xf32>
  %k = nn.reshape %w : tensor<6x3x5x5xf32> -> tensor<6x75xf32>
  %b = nn.param "b" : tensor<6xf32>
  %y = nn.linear %p, %k, %b : tensor<24x75xf32>, tensor<6x75xf32>, tensor<6xf32> -> tensor<24x6xf32>
  nn.output "y" %y : tensor<24x6xf32>"""
    conv = F.conv2d(t64(x), t64(w), t64(b), stride=5)  # [2, 6, 3, 4]
    ref = conv.flatten(2).transpose(1, 2).reshape(24, 6)  # token = (image, row * 4 + col)
    close(run(body, {"x": x}, {"w": w, "b": b}), ref)
    x2 = x.copy()
    x2[:, :, 15:, :] = 99.0
    x2[:, :, :, 20:] = 99.0
    close(run(body, {"x": x2}, {"w": w, "b": b}), ref)


def test_data_movement():
    x = randn(2, 3, 4)
    body = """
  %x = nn.input "x" : tensor<2x3x4xf32>
  %t = nn.transpose %x perm=[2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %s = nn.slice %t offsets=[1, 0, 1] : tensor<4x2x3xf32> -> tensor<2x2x2xf32>
  %c = nn.concat %s, %s, %s axis=2 : tensor<2x2x2xf32>, tensor<2x2x2xf32>, tensor<2x2x2xf32> -> tensor<2x2x6xf32>
  %y = nn.reshape %c : tensor<2x2x6xf32> -> tensor<4x6xf32>
  nn.output "y" %y : tensor<4x6xf32>"""
    s = np.transpose(x, (2, 0, 1))[1:3, 0:2, 1:3]
    ref = np.concatenate([s, s, s], axis=2).reshape(4, 6)
    for mode in ("fp32", "fp64", "device"):
        np.testing.assert_array_equal(run(body, {"x": x}, mode=mode), ref)


# --------------------------------------------------------------------------------------------------------------
# Precision: casts are identities in fp32/fp64 and round in device mode

CAST_BODY = """
  %x = nn.input "x" : tensor<{n}xf32>
  %y = nn.cast %x {attrs}: tensor<{n}xf32> -> tensor<{n}x{t}>
  %z = nn.cast %y {attrs}: tensor<{n}x{t}> -> tensor<{n}xf32>
  nn.output "y" %z : tensor<{n}xf32>"""


def cast_body(n: int, t: str, scale: int | None = None) -> str:
    attrs = f"{{scale = {scale} : i64}} " if scale is not None else ""
    return CAST_BODY.format(n=n, t=t, attrs=attrs)


@pytest.mark.parametrize("t,scale", [("f16", None), ("f8E4M3FNUZ", -4), ("f8E5M2FNUZ", 2)])
def test_casts_are_identity_in_pure_modes(t, scale):
    x = randn(64, scale=3.0)
    for mode, dtype in (("fp32", np.float32), ("fp64", np.float64)):
        y = run(cast_body(64, t, scale), {"x": x}, mode=mode)
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, x.astype(dtype))


def test_device_f16_cast_rounds_to_nearest_even():
    # 1 + 2^-11 is the tie between 1 and 1 + 2^-10: rounds to the even 1.0; 1 + 3*2^-11 rounds up to 1 + 2^-9.
    x = np.concatenate([[1 + 2.0**-11, 1 + 3 * 2.0**-11, 65504.0, 1e-8], randn(60, scale=100.0)]).astype(
        np.float32
    )
    y = run(cast_body(64, "f16"), {"x": x}, mode="device")
    assert y.dtype == np.float32
    assert y[0] == 1.0 and y[1] == 1 + 2.0**-9 and y[2] == 65504.0
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))


def fnuz_table(exp_bits: int, man_bits: int) -> np.ndarray:
    """All 256 codes of an FNUZ format decoded from its definition: bias 2^(e-1), 0x80 = NaN, no inf, no -0."""
    bias = 2 ** (exp_bits - 1)
    values = []
    for code in range(256):
        sign, e, m = code >> 7, (code >> man_bits) & (2**exp_bits - 1), code & (2**man_bits - 1)
        if code == 0x80:
            values.append(np.nan)
            continue
        mag = (m / 2**man_bits) * 2.0 ** (1 - bias) if e == 0 else (1 + m / 2**man_bits) * 2.0 ** (e - bias)
        values.append(-mag if sign else mag)
    return np.array(values)


def fp8_round_reference(x: np.ndarray, exp_bits: int, man_bits: int, scale: int) -> np.ndarray:
    """Nearest representable value of x * 2^-scale (ties to even code), saturating; times 2^scale."""
    table = fnuz_table(exp_bits, man_bits)
    codes = np.array([c for c in range(256) if c != 0x80])
    vals = table[codes]
    top = np.nanmax(table)
    out = []
    for v in np.asarray(x, dtype=np.float64) * 2.0**-scale:
        v = min(max(v, -top), top)
        dist = np.abs(vals - v)
        best = codes[dist == dist.min()]
        # Ties: the even mantissa (even code), never the larger magnitude by default.
        code = best[0] if len(best) == 1 else next(c for c in best if c % 2 == 0)
        out.append(table[code] * 2.0**scale)
    return np.array(out)


@pytest.mark.parametrize(
    "t,exp_bits,man_bits,top,scale",
    [("f8E4M3FNUZ", 4, 3, 240.0, -4), ("f8E4M3FNUZ", 4, 3, 240.0, 3), ("f8E5M2FNUZ", 5, 2, 57344.0, 0)],
)
def test_device_fp8_cast_rounds_saturates_and_scales(t, exp_bits, man_bits, top, scale):
    assert np.nanmax(fnuz_table(exp_bits, man_bits)) == top
    s = 2.0**scale
    grid = fnuz_table(exp_bits, man_bits)
    grid = grid[np.isfinite(grid)]
    mids = (np.sort(grid)[1:] + np.sort(grid)[:-1]) / 2  # exact ties between neighbours
    special = np.array([top, top * 1.03, top * 1.1, 1e30, -1e30, 0.0, grid[grid > 0].min() / 3])
    x = np.concatenate([randn(200, scale=top / 8), mids, special]) * s
    x = x.astype(np.float32)
    x64 = x.astype(np.float64)
    y = run(cast_body(len(x), t, scale), {"x": x}, mode="device")
    ref = fp8_round_reference(x64, exp_bits, man_bits, scale)
    assert not np.any(np.isnan(y)), "overflow must saturate, not produce NaN"
    np.testing.assert_array_equal(y, ref)
    assert list(y[-6:-2]) == [top * s, top * s, top * s, -top * s], "saturates at the format maximum"


def test_quantize_fp8_keeps_nan():
    x = np.array([np.nan, 1.0], np.float32)
    y = quantize_fp8(x, Float8E4M3FNUZType, 0)
    assert np.isnan(y[0]) and y[1] == 1.0


def test_device_gemm_multiplies_rounded_operands_and_rounds_result():
    # x in f16, w in FP8 (scale -6), f16 result: the device result is the f16 rounding of the float32 sum of
    # exact products of the rounded operands.
    x, w, b = randn(8, 32), randn(16, 32, scale=0.05), randn(16)
    body = """
  %x = nn.input "x" : tensor<8x32xf32>
  %w = nn.param "w" : tensor<16x32xf32>
  %b = nn.param "b" : tensor<16xf32>
  %xh = nn.cast %x : tensor<8x32xf32> -> tensor<8x32xf16>
  %wq = nn.cast %w {scale = -6 : i64} : tensor<16x32xf32> -> tensor<16x32xf8E4M3FNUZ>
  %y = nn.linear %xh, %wq, %b : tensor<8x32xf16>, tensor<16x32xf8E4M3FNUZ>, tensor<16xf32> -> tensor<8x16xf16>
  nn.output "y" %y : tensor<8x16xf16>"""
    y = run(body, {"x": x}, {"w": w, "b": b}, mode="device")
    xh = x.astype(np.float16).astype(np.float64)
    wq = fp8_round_reference(w.ravel(), 4, 3, -6).reshape(w.shape)
    exact = xh @ wq.T + b
    # The f16 rounding of the result dominates: every output is an f16 value within half an f16 ulp (plus the
    # float32 accumulation error) of the exact sum.
    np.testing.assert_array_equal(y, y.astype(np.float16).astype(np.float32))
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y - exact) <= 0.5 * ulp + 1e-5 * np.abs(exact))
    assert np.mean(np.abs(y - run(body, {"x": x}, {"w": w, "b": b}, mode="fp32"))) > 1e-3  # rounding happened


def test_device_f16_results_are_rounded_and_reductions_use_f32():
    x = randn(4, 32, scale=2.0)
    body = """
  %x = nn.input "x" : tensor<4x32xf32>
  %h = nn.cast %x : tensor<4x32xf32> -> tensor<4x32xf16>
  %g = nn.gelu %h "tanh" : tensor<4x32xf16> -> tensor<4x32xf16>
  %y = nn.softmax %g axis=-1 : tensor<4x32xf16> -> tensor<4x32xf16>
  nn.output "y" %y : tensor<4x32xf16>"""
    y = run(body, {"x": x}, mode="device")
    xh = x.astype(np.float16).astype(np.float32)
    g = F.gelu(torch.from_numpy(xh), approximate="tanh").numpy().astype(np.float16).astype(np.float32)
    ref = torch.softmax(torch.from_numpy(g), dim=-1).numpy().astype(np.float16).astype(np.float32)
    # Float32 internals (torch vs numpy differ by float32 ulps) then one f16 rounding: at most one f16 ulp apart.
    np.testing.assert_array_equal(y, y.astype(np.float16).astype(np.float32))
    assert np.all(np.abs(y - ref) <= np.spacing(ref.astype(np.float16)).astype(np.float32))


def test_device_f16_param_is_rounded_where_used():
    w = randn(6, 5)
    body = """
  %x = nn.input "x" : tensor<2x5xf32>
  %w = nn.param "w" : tensor<6x5xf16>
  %y = nn.linear %x, %w : tensor<2x5xf32>, tensor<6x5xf16> -> tensor<2x6xf32>
  nn.output "y" %y : tensor<2x6xf32>"""
    x = randn(2, 5)
    y = run(body, {"x": x}, {"w": w}, mode="device")
    close(y, x.astype(np.float64) @ w.astype(np.float16).astype(np.float64).T, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------------------------------
# nn.repeat and capture

REPEAT = """
  %x = nn.input "x" : tensor<6x8xf32>
  %g = nn.param "shared" : tensor<8xf32>
  %ws = nn.param "layers.w" : tensor<3x8x8xf32>
  %bs = nn.param "layers.b" : tensor<3x8xf32>
  %h, %acc = nn.repeat 3 carried(%x, %x : tensor<6x8xf32>, tensor<6x8xf32>) stacked(%ws, %bs : tensor<3x8x8xf32>, tensor<3x8xf32>) -> tensor<6x8xf32>, tensor<6x8xf32> {
  ^bb0(%hh: tensor<6x8xf32>, %aa: tensor<6x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>):
    %n = nn.layer_norm %hh, %g, %b eps=1.0e-06 : tensor<6x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %l = nn.linear %n, %w, %b : tensor<6x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
    %a = nn.gelu %l "tanh" : tensor<6x8xf32> -> tensor<6x8xf32>
    %h2 = nn.add %hh, %a : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x8xf32>
    %acc2 = nn.mul %aa, %h2 : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x8xf32>
    nn.yield %h2, %acc2 : tensor<6x8xf32>, tensor<6x8xf32>
  }
  nn.output "h" %h : tensor<6x8xf32>
  nn.output "acc" %acc : tensor<6x8xf32>"""


def unrolled(n: int) -> str:
    lines = [
        '  %x = nn.input "x" : tensor<6x8xf32>',
        '  %g = nn.param "shared" : tensor<8xf32>',
        "  %h0 = nn.reshape %x : tensor<6x8xf32> -> tensor<6x8xf32>",
        "  %acc0 = nn.reshape %x : tensor<6x8xf32> -> tensor<6x8xf32>",
    ]
    t = "tensor<6x8xf32>"
    for i in range(n):
        lines += [
            f'  %w{i} = nn.param "w{i}" : tensor<8x8xf32>',
            f'  %b{i} = nn.param "b{i}" : tensor<8xf32>',
            f"  %n{i} = nn.layer_norm %h{i}, %g, %b{i} eps=1.0e-06 : {t}, tensor<8xf32>, tensor<8xf32> -> {t}",
            f"  %l{i} = nn.linear %n{i}, %w{i}, %b{i} : {t}, tensor<8x8xf32>, tensor<8xf32> -> {t}",
            f'  %a{i} = nn.gelu %l{i} "tanh" : {t} -> {t}',
            f"  %h{i + 1} = nn.add %h{i}, %a{i} : {t}, {t} -> {t}",
            f"  %acc{i + 1} = nn.mul %acc{i}, %h{i + 1} : {t}, {t} -> {t}",
        ]
    lines += [f'  nn.output "h" %h{n} : {t}', f'  nn.output "acc" %acc{n} : {t}']
    return "\n".join(lines)


def repeat_params() -> dict[str, np.ndarray]:
    return {"shared": randn(8) + 1.0, "layers.w": randn(3, 8, 8, scale=0.5), "layers.b": randn(3, 8)}


@pytest.mark.parametrize("mode", ["fp32", "fp64", "device"])
def test_repeat_equals_unrolled(mode):
    p = repeat_params()
    flat = {"shared": p["shared"]}
    for i in range(3):
        flat[f"w{i}"], flat[f"b{i}"] = p["layers.w"][i], p["layers.b"][i]
    x = randn(6, 8)
    got = evaluate(parse(REPEAT), {"x": x}, p, mode=mode).outputs
    ref = evaluate(parse(unrolled(3)), {"x": x}, flat, mode=mode).outputs
    for name in ("h", "acc"):
        np.testing.assert_array_equal(got[name], ref[name])  # same ops in the same order: bit-identical
    # And not the same as fewer iterations (the loop really runs 3 times).
    two = evaluate(parse(unrolled(2)), {"x": x}, flat, mode=mode).outputs
    assert not np.allclose(got["h"], two["h"])


def test_capture_returns_every_value_with_stable_ids():
    module = parse(REPEAT)
    p, x = repeat_params(), randn(6, 8)
    r = evaluate(module, {"x": x}, p, mode="fp64", capture=True)
    func = next(iter(module.ops))
    top = list(func.body.block.ops)
    repeat = next(op for op in top if isinstance(op, nn.RepeatOp))
    body = list(repeat.body.block.ops)
    # Top level: every result except nn.param's; body: every result of every iteration.
    n_top = sum(len(op.results) for op in top if not isinstance(op, nn.ParamOp))
    n_body = sum(len(op.results) for op in body)
    assert len(r.values) == n_top + 3 * n_body
    # The repeat results are the last iteration's yielded values.
    h2 = body[3].results[0]
    np.testing.assert_array_equal(r.get(repeat.results[0]), r.get(h2, 2))
    np.testing.assert_array_equal(r.get(repeat.results[1]), r.outputs["acc"])
    # Iteration 0's layer norm sees the input; ids name the op, the position and the iteration.
    ln0 = r.get(body[0].results[0], 0)
    assert ln0.shape == (6, 8)
    key = r.op_id(body[1].results[0], 1)
    assert key == OpId((4, 1), (1,), 0)
    label = str(next(k for k in r.values if k == key))
    assert label == "#4.1 (iteration 1) nn.linear %l"
    # Re-parsing the module gives the same keys: two runs can be compared op by op.
    r2 = evaluate(parse(REPEAT), {"x": x}, p, mode="fp32", capture=True)
    assert list(r2.values) == list(r.values)
    # Without capture nothing is kept.
    assert evaluate(module, {"x": x}, p).values == {}


def test_capture_values_match_the_hand_computation():
    x = randn(3, 4)
    body = """
  %x = nn.input "x" : tensor<3x4xf32>
  %a = nn.scale %x by 2.0 : tensor<3x4xf32> -> tensor<3x4xf32>
  %y = nn.add %a, %x : tensor<3x4xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
  nn.output "y" %y : tensor<3x4xf32>"""
    r = evaluate(parse(body), {"x": x}, {}, mode="fp64", capture=True)
    assert [str(k) for k in r.values] == ["#0 nn.input %x", "#1 nn.scale %a", "#2 nn.add %y"]
    close(list(r.values.values())[1], 2.0 * x.astype(np.float64))
    close(r.outputs["y"], 3.0 * x.astype(np.float64))


# --------------------------------------------------------------------------------------------------------------
# Parameters are read lazily; errors name the op, the name and the shapes


class RecordingParams(Mapping):
    """A lazy mapping that records which names are read and refuses to be listed or copied."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays, self.read = arrays, []

    def __getitem__(self, name):
        self.read.append(name)
        return self.arrays[name]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the evaluator must not iterate over the parameters")

    def __len__(self) -> int:
        raise AssertionError("the evaluator must not size the parameters")


def test_params_are_read_lazily_and_memmaps_not_copied(tmp_path):
    p = repeat_params()
    mm = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.float32, shape=(3, 8, 8))
    mm[:] = p["layers.w"]
    mm.flush()
    stacked = np.load(tmp_path / "w.npy", mmap_mode="r")
    params = RecordingParams({**p, "layers.w": stacked, "unused": np.zeros(1)})
    x = randn(6, 8)
    got = evaluate(parse(REPEAT), {"x": x}, params, mode="fp32").outputs
    assert sorted(params.read) == ["layers.b", "layers.w", "shared"]
    np.testing.assert_array_equal(got["h"], evaluate(parse(REPEAT), {"x": x}, p, mode="fp32").outputs["h"])
    # Half-precision weights work too (converted slice by slice).
    half = {**p, "layers.w": p["layers.w"].astype(np.float16)}
    got_h = evaluate(parse(REPEAT), {"x": x}, half, mode="fp32").outputs["h"]
    assert np.allclose(got_h, got["h"], rtol=1e-2, atol=1e-2)


def test_missing_input_names_op_and_shape():
    with pytest.raises(EvaluationError, match=r"#0 nn.input.*missing input 'x'.*6x8 \(f32\)"):
        evaluate(parse(REPEAT), {}, repeat_params())


def test_wrong_input_shape():
    with pytest.raises(EvaluationError, match=r"input 'x' has shape 8x6 but the IR expects 6x8"):
        evaluate(parse(REPEAT), {"x": randn(8, 6)}, repeat_params())


def test_missing_param_names_op_name_and_shape():
    p = repeat_params()
    p["layers.w_typo"] = p.pop("layers.w")
    with pytest.raises(
        EvaluationError,
        match=r"#2 nn.param %ws: missing parameter 'layers.w': expected shape 3x8x8 .*layers.w_typo",
    ):
        evaluate(parse(REPEAT), {"x": randn(6, 8)}, p)


def test_wrong_param_shape_names_expected_and_found():
    p = repeat_params()
    p["layers.b"] = randn(2, 8)
    with pytest.raises(
        EvaluationError, match=r"parameter 'layers.b' has shape 2x8 but the IR expects 3x8 \(f32\)"
    ):
        evaluate(parse(REPEAT), {"x": randn(6, 8)}, p)


def test_bad_mode_and_bad_module():
    with pytest.raises(ValueError, match="mode"):
        evaluate(parse(REPEAT), {"x": randn(6, 8)}, repeat_params(), mode="bf16")
    with pytest.raises(EvaluationError, match="exactly one func.func"):
        evaluate(ModuleOp([]), {}, {})


def test_evaluate_op_matches_whole_program_evaluation():
    """The public per-op entry point (used by the tile/exchange interpreter) rounds like `evaluate`."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func
    from xdsl.parser import Parser

    from ipu.frontend.reference import evaluate, evaluate_op

    ctx = Context()
    for d in (Builtin, Func, nn.NN):
        ctx.load_dialect(d)
    text = """
    func.func @f() {
      %x = nn.input "x" : tensor<4x8xf16>
      %w = nn.param "w" : tensor<3x8xf32>
      %y = nn.linear %x, %w : tensor<4x8xf16>, tensor<3x8xf32> -> tensor<4x3xf16>
      nn.output "y" %y : tensor<4x3xf16>
      func.return
    }"""
    module = Parser(ctx, text).parse_module()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float16).astype(np.float32)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    whole = evaluate(module, {"x": x}, {"w": w}, mode="device").outputs["y"]
    linear = next(op for op in module.walk() if isinstance(op, nn.LinearOp))
    one = evaluate_op(linear, x, w, mode="device")
    np.testing.assert_array_equal(one, whole)
    assert np.array_equal(one, one.astype(np.float16).astype(np.float32))  # rounded to the f16 result type


# --------------------------------------------------------------------------------------------------------------
# DeviceModel: sources left out (exact) and device kernels modelled (kernels)


def _device(body: str, inputs: dict, params: dict | None = None, name: str = "y", **model) -> np.ndarray:
    from ipu.frontend.reference import DeviceModel

    dm = DeviceModel(**model) if model else None
    return evaluate(parse(body), inputs, params or {}, mode="device", device_model=dm).outputs[name]


def test_round_f16_inplace_matches_the_conversion():
    from ipu.frontend.reference import _round_f16, _round_f16_inplace

    for scale in (1e-7, 1e-5, 1e-3, 1.0, 1e3, 6e4):  # subnormal, normal, overflow ranges
        x = randn(64, 33, scale=scale)
        assert np.array_equal(_round_f16_inplace(x.copy()), _round_f16(x)), scale
    ties = np.array([1 + 2**-11, 1 + 3 * 2**-11, 1.5 * 2**-24, 2.5 * 2**-24, -(2**-25), 65519.0], np.float32)
    assert np.array_equal(_round_f16_inplace(ties.copy()), _round_f16(ties))


def test_device_model_rejects_unknown_names_and_other_modes():
    from ipu.frontend.reference import DeviceModel

    with pytest.raises(ValueError, match="unknown exact fp9"):
        DeviceModel(exact={"fp9"})
    with pytest.raises(ValueError, match="unknown kernels"):
        DeviceModel(kernels={"layer_norm_f8"})
    body = """
  %x = nn.input "x" : tensor<2x4xf32>
  nn.output "y" %x : tensor<2x4xf32>"""
    with pytest.raises(ValueError, match="mode 'device' only"):
        evaluate(parse(body), {"x": randn(2, 4)}, {}, mode="fp32", device_model=DeviceModel(exact={"fp8"}))


CASTS = """
  %x = nn.input "x" : tensor<4x64xf32>
  %w = nn.param "w" : tensor<8x64xf32>
  %v = nn.param "v" : tensor<8x64xf32>
  %w8 = nn.cast %w {scale = -4 : i64} : tensor<8x64xf32> -> tensor<8x64xf8E4M3FNUZ>
  %v16 = nn.cast %v : tensor<8x64xf32> -> tensor<8x64xf16>
  %x16 = nn.cast %x : tensor<4x64xf32> -> tensor<4x64xf16>
  %a = nn.linear %x16, %w8 : tensor<4x64xf16>, tensor<8x64xf8E4M3FNUZ> -> tensor<4x8xf32>
  %b = nn.linear %x16, %v16 : tensor<4x64xf16>, tensor<8x64xf16> -> tensor<4x8xf16>
  nn.output "a" %a : tensor<4x8xf32>
  nn.output "b" %b : tensor<4x8xf16>"""


@pytest.mark.parametrize(
    "exact, exact_a, exact_b",
    [
        ({"fp8"}, False, False),  # a keeps its f16 x; b unchanged
        ({"fp8", "f16_activations"}, True, False),  # a all exact; b's f16 weights and result still round
        ({"fp8", "f16_activations", "f16_weights"}, True, True),
    ],
)
def test_device_model_exact_sources(exact, exact_a, exact_b):
    x, w, v = randn(4, 64), randn(8, 64, scale=0.1), randn(8, 64, scale=0.1)
    inputs, params = {"x": x}, {"w": w, "v": v}
    m = parse(CASTS)
    ref = evaluate(m, inputs, params, mode="fp64").outputs
    dflt = evaluate(m, inputs, params, mode="device").outputs
    from ipu.frontend.reference import DeviceModel

    got = evaluate(m, inputs, params, mode="device", device_model=DeviceModel(exact=exact)).outputs
    for name, exact_one in (("a", exact_a), ("b", exact_b)):
        err, err_dflt = np.abs(got[name] - ref[name]).max(), np.abs(dflt[name] - ref[name]).max()
        if exact_one:
            assert err < 1e-5 < err_dflt, (name, err, err_dflt)
        else:
            assert err > 1e-4, (name, err)
    if "fp8" in exact:
        # FP8 left out: a is the f16-x product with f32 weights (not the FP8 one).
        x16 = x.astype(np.float16).astype(np.float64)
        want = x16 @ w.T.astype(np.float64) if "f16_activations" not in exact else ref["a"]
        close(got["a"], want, rtol=1e-5, atol=1e-5)


def test_device_model_exact_partials():
    body = """
  %x = nn.input "x" : tensor<3x64xf16>
  %w = nn.param "w" : tensor<5x64xf16>
  %p = nn.linear_partials %x, %w k_chunk=16 : tensor<3x64xf16>, tensor<5x64xf16> -> tensor<4x3x5xf16>
  %y = nn.reduce_sum %p : tensor<4x3x5xf16> -> tensor<3x5xf32>
  nn.output "y" %y : tensor<3x5xf32>"""
    x, w = randn(3, 64), randn(5, 64)
    x16, w16 = (a.astype(np.float16).astype(np.float64) for a in (x, w))
    want = x16 @ w16.T
    dflt = _device(body, {"x": x}, {"w": w})
    got = _device(body, {"x": x}, {"w": w}, exact={"f16_partials"})
    close(got, want, rtol=1e-6, atol=1e-6)
    assert np.abs(dflt - want).max() > 1e-4  # the f16 partials and pairwise f16 sums round by default


def test_device_model_amp_f16_accumulates_per_block_of_16():
    # x = ones: block 0 sums to 2048 (f16 spacing 2 there), block 1 adds 16 x 0.0625 = 1: 2049 in float32, but
    # f16(2048 + 1) = 2048 with half partials.
    body = """
  %x = nn.input "x" : tensor<3x32xf16>
  %w = nn.param "w" : tensor<2x32xf16>
  %y = nn.linear %x, %w : tensor<3x32xf16>, tensor<2x32xf16> -> tensor<3x2xf32>
  nn.output "y" %y : tensor<3x2xf32>"""
    w = np.concatenate([np.full((2, 16), 128.0), np.full((2, 16), 0.0625)], axis=1).astype(np.float32)
    x = np.ones((3, 32), np.float32)
    assert np.all(_device(body, {"x": x}, {"w": w}) == 2049.0)
    assert np.all(_device(body, {"x": x}, {"w": w}, kernels={"amp_f16"}) == 2048.0)


def _row_kernel(op: str, x16, w16=None, b16=None):
    from ipu.backend.kernels import rowwise as rw

    rows, n = x16.shape if x16.ndim == 2 else (x16.size // 4, 4)
    return rw.semantics(rw.Rows(op, rows, n), x16, w16, b16)["out"].astype(np.float32)


def test_device_model_layer_norm_f16_is_the_row_kernel():
    body = """
  %x = nn.input "x" : tensor<6x64xf32>
  %w = nn.param "w" : tensor<64xf16>
  %b = nn.param "b" : tensor<64xf16>
  %y = nn.layer_norm %x, %w, %b eps=1.0e-06 : tensor<6x64xf32>, tensor<64xf16>, tensor<64xf16> -> tensor<6x64xf32>
  nn.output "y" %y : tensor<6x64xf32>"""
    x = randn(6, 64, scale=3.0) + 5.0  # a mean far from 0: the f16 input cast shows
    w, b = 1.0 + randn(64, scale=0.1), randn(64, scale=0.1)
    w16, b16 = w.astype(np.float16), b.astype(np.float16)
    kern = _row_kernel("layernorm", x.astype(np.float16), w16, b16)
    got = _device(body, {"x": x}, {"w": w, "b": b}, kernels={"layer_norm_f16"})
    dflt = _device(body, {"x": x}, {"w": w, "b": b})
    assert np.mean(got == kern) > 0.99  # the kernel's sums run in another order: a rare last-bit difference
    assert np.mean(dflt == kern) < 0.9


def test_device_model_gelu_f16_is_the_row_kernel():
    body = """
  %x = nn.input "x" : tensor<8x64xf16>
  %y = nn.gelu %x "tanh" : tensor<8x64xf16> -> tensor<8x64xf16>
  nn.output "y" %y : tensor<8x64xf16>"""
    x = randn(8, 64, scale=2.0)
    kern = _row_kernel("gelu", x.astype(np.float16).reshape(-1))
    got = _device(body, {"x": x}, kernels={"gelu_f16"}).reshape(-1)
    dflt = _device(body, {"x": x}).reshape(-1)
    assert np.array_equal(got, kern)
    assert not np.array_equal(dflt, kern)


def test_device_model_softmax_f16_is_the_split_row_kernel():
    from ipu.backend.kernels import rowwise as rw

    body = """
  %x = nn.input "x" : tensor<6x96xf32>
  %y = nn.softmax %x axis=-1 : tensor<6x96xf32> -> tensor<6x96xf16>
  nn.output "y" %y : tensor<6x96xf16>"""
    x = randn(6, 96, scale=3.0)
    k = rw.Rows("softmax_split", 6, 96)
    kern = rw.semantics(k, x.astype(np.float16))["out"].astype(np.float32)
    got = _device(body, {"x": x}, kernels={"softmax_f16"})
    dflt = _device(body, {"x": x})
    assert np.mean(got == kern) > 0.99
    assert np.mean(dflt == kern) < 0.95
