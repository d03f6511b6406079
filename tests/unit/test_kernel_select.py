"""kernel-select: the backend's kernel choices are attributes in the IR; the asm lowering honours them and makes
none of its own.

- the pass picks by the kernels' own estimates (the split row kernels win with few rows per tile, lose with many),
  over several shapes;
- a second run keeps edited choices, a run with overwrite replaces them; the recorded IR prints and parses;
- an edited choice changes the program (another kernel, other cycles) but not the numbers beyond the kernels' own
  rounding, through the whole pipeline on the simulator, for two weight seeds;
- a choice that does not fit, or a missing one, is a LoweringError naming the op."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.printer import Printer
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.lower import LoweringError, compile_model
from ipu.backend.lower.lowering import pipeline_spec
from ipu.backend.target import Target
from ipu.dialects import nn
from ipu.dialects.registry import all_dialects
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes import kernel_select as ks
from ipu.passes.registry import all_passes
from ipu.runtime.host import Session

TARGET = Target.small(tiles=16, sram_kib=624)
# A bad choice fails where the lowering first meets it: lowering-storage's measuring lowering, or the lowering.
BAD = (LoweringError, PassFailedException)


def _parse(text: str) -> ModuleOp:
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    return Parser(ctx, text).parse_module()


def _rows_module(rows: int, n: int) -> ModuleOp:
    return _parse(f"""
builtin.module {{
  func.func @rows() {{
    %x = nn.input "x" : tensor<{rows}x{n}xf32>
    %g = nn.param "g" : tensor<{n}xf32>
    %b = nn.param "b" : tensor<{n}xf32>
    %l = nn.layer_norm %x, %g, %b eps=1.0e-06 : tensor<{rows}x{n}xf32>, tensor<{n}xf32>, tensor<{n}xf32> -> tensor<{rows}x{n}xf32>
    %s = nn.softmax %l axis=-1 : tensor<{rows}x{n}xf32> -> tensor<{rows}x{n}xf32>
    nn.output "y" %s : tensor<{rows}x{n}xf32>
    func.return
  }}
}}""")


def _planned(module: ModuleOp, target: Target = TARGET) -> ModuleOp:
    spec = pipeline_spec(target, outline_repeat=True).split(",lowering-storage")[0]
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return module


def _placed(module: ModuleOp, target: Target = TARGET) -> ModuleOp:
    """The rest of the pipeline after `_planned` (lowering-storage, memory-plan): the choices as they are now."""
    spec = pipeline_spec(target, outline_repeat=True)
    PassPipeline.parse_spec(dict(all_passes()), spec[spec.index("lowering-storage") :]).apply(
        Context(), module
    )
    return module


def _op(module, cls):
    return next(o for o in module.walk() if isinstance(o, cls))


@pytest.mark.parametrize(
    "rows,n,split", [(16, 1152, True), (64, 768, True), (2048, 64, False), (16, 16, False)]
)
def test_row_kernels_chosen_by_estimate(rows, n, split):
    """Few rows per tile and long rows: every row split across the six workers; many short rows (or rows too short
    for one atom per worker): the whole-row kernels. The recorded choice equals the estimate's comparison."""
    from ipu.backend.kernels import rowwise as rw

    module = _planned(_rows_module(rows, n))
    ln, sm = _op(module, nn.LayerNormOp), _op(module, nn.SoftmaxOp)
    assert ks.choices(ln)["rows"] == ("layernorm_split" if split else "layernorm")
    assert ks.choices(sm)["rows"] == ("softmax_split" if split else "softmax")
    # The choice is the cheaper kernel on the slowest tile, by the kernels' own estimates.
    per_tile = ks._rows_per_tile(sm.attributes["tile.layout"])
    most = max(per_tile.values())
    p = -(-n // 4) * 4
    if n >= rw.SMS_MIN_VALID:
        whole = rw.cycles(rw.Rows("softmax", most, p, in0=0, out=0, valid=n))
        parted = rw.cycles(rw.Rows("softmax_split", most, p, in0=0, out=0, valid=n, st0=0))
        assert (parted < whole) == split


def test_choices_survive_a_second_run_and_print():
    module = _planned(_rows_module(16, 1152))
    sm = _op(module, nn.SoftmaxOp)
    ks.record(sm, {"rows": "softmax"}, overwrite=True)
    ks.KernelSelectPass(tiles=16).apply(Context(), module)
    assert ks.choices(sm)["rows"] == "softmax"  # kept
    ks.KernelSelectPass(tiles=16, overwrite=True).apply(Context(), module)
    assert ks.choices(sm)["rows"] == "softmax_split"  # replaced by the estimate's choice
    # Round trip through text: the attribute is plain MLIR.
    from io import StringIO

    out = StringIO()
    Printer(stream=out).print_op(module)
    assert 'kernel = {rows = "softmax_split"}' in out.getvalue()
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    again = Parser(ctx, out.getvalue()).parse_module()
    assert ks.choices(_op(again, nn.SoftmaxOp)) == ks.choices(sm)


def _compile_with(cfg, edits: dict[type, dict] | None = None, edit=None):
    module = _planned(build_vision_model(cfg))
    for cls, values in (edits or {}).items():
        assert ks.override(module, cls, **values) > 0
    if edit is not None:
        edit(module)
    _placed(module)
    return compile_model(module, TARGET)


def _run(pkg, cfg, seed):
    session = Session(pkg)
    session.upload_parameters(random_weights(cfg, seed=seed))
    x = (
        np.random.default_rng(seed + 7)
        .standard_normal((1, 3, cfg.image_size, cfg.image_size))
        .astype(np.float32)
    )
    return session.run({"pixel_values": x})


@pytest.mark.parametrize("seed", [0, 3])
def test_edited_choices_change_the_program_not_the_numbers(seed):
    """The tiny SigLIP with the row kernel of every layer norm and softmax with rows long enough for both forms
    flipped: other kernels run (other cycles) and every embedding stays within the kernels' rounding of the
    selected program's."""
    from ipu.backend.kernels import rowwise as rw

    cfg = PRESETS["tiny"]
    base = _compile_with(cfg)
    flipped = []

    def flip(module):
        for o in module.walk():
            kinds = next((v for c, v in ks.ROWS.items() if isinstance(o, c)), None)
            if kinds is None or ks.KERNEL_ATTR not in o.attributes:
                continue
            if o.results[0].type.get_shape()[-1] < max(rw.SMS_MIN_VALID, rw.LNS_MIN_N):
                continue
            now = ks.choices(o)["rows"]
            ks.record(o, {"rows": kinds[1] if now == kinds[0] else kinds[0]}, overwrite=True)
            flipped.append(o.name)

    edited = _compile_with(cfg, edit=flip)
    assert "nn.layer_norm" in flipped, flipped  # (tiny's softmaxes are 16 keys or fewer: too short to split)
    ref, got = _run(base, cfg, seed), _run(edited, cfg, seed)
    assert got.cycles != ref.cycles
    for name in ("last_hidden_state", "pooler_output"):
        a = ref.outputs[name].reshape(-1, ref.outputs[name].shape[-1]).astype(np.float64)
        b = got.outputs[name].reshape(a.shape).astype(np.float64)
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cos.min() > 0.999, (name, cos.min())


def test_gemm_chunks_and_coef_are_honoured():
    """k_chunks of 16 and ld64: one GEMM call per 16 columns of K, the ld64 supervisor; the same bits (the GEMM
    rounds per 16-deep block either way)."""
    cfg = PRESETS["tiny"]
    module = _planned(build_vision_model(cfg))
    assert any(isinstance(o, nn.LinearOp) and ks.KERNEL_ATTR in o.attributes for o in module.walk())
    base = _compile_with(cfg)

    def chunk16(module):  # every planned linear: K in chunks of 16; every GEMM ld64
        for o in module.walk():
            if isinstance(o, nn.LinearOp) and ks.KERNEL_ATTR in o.attributes:
                blocks = -(-o.operands[0].type.get_shape()[-1] // 16)
                ks.record(o, {"k_chunks": [16] * blocks}, overwrite=True)
            if "coef" in ks.choices(o):
                ks.record(o, {"coef": "ld64"}, overwrite=True)

    edited = _compile_with(cfg, edit=chunk16)
    kernels = {s["kernel"] for s in edited.metadata["profile_sites"]}
    assert "gemm_f16_sup_ld64" in kernels and "gemm_f16_sup_ld128" not in {
        s["kernel"] for s in edited.metadata["profile_sites"] if s["what"].startswith("nn.linear")
    }
    assert len(edited.metadata["profile_sites"]) > len(base.metadata["profile_sites"])
    a, b = _run(base, cfg, 1), _run(edited, cfg, 1)
    for name in a.outputs:
        np.testing.assert_array_equal(a.outputs[name], b.outputs[name])


def test_bad_choices_are_named_errors():
    cfg = PRESETS["tiny"]
    module = _planned(build_vision_model(cfg))
    lin = next(o for o in module.walk() if isinstance(o, nn.LinearOp) and ks.KERNEL_ATTR in o.attributes)
    kpad = -(-lin.operands[0].type.get_shape()[-1] // 16) * 16
    with pytest.raises(BAD, match=rf"k_chunks = \({kpad + 16},\): positive multiples of 16 summing to K"):
        _compile_with(cfg, {nn.LinearOp: {"k_chunks": [kpad + 16]}})
    with pytest.raises(BAD, match="a_operand = 'panels' does not fit this A"):
        _compile_with(cfg, {nn.LinearOp: {"a_operand": "panels"}})
    # Without kernel-select the lowering refuses to guess.
    module = _planned(build_vision_model(cfg))
    for o in module.walk():
        o.attributes.pop(ks.KERNEL_ATTR, None)
    with pytest.raises(BAD, match="no kernel choice .*run kernel-select"):
        _placed(module)
        compile_model(module, TARGET)


def test_transposed_scores_that_do_not_fit_are_refused():
    """Query blocks of 40 rows: S^T has at most 32 columns, so scores = "transposed" is refused, naming the sizes."""
    module = _planned(
        _parse("""
builtin.module {
  func.func @att() {
    %x = nn.input "x" : tensor<160x64xf32>
    %a = nn.attention %x, %x, %x heads=4 scale=0.125 : tensor<160x64xf32>, tensor<160x64xf32>, tensor<160x64xf32> -> tensor<160x64xf32>
    nn.output "y" %a : tensor<160x64xf32>
    func.return
  }
}""")
    )
    att = _op(module, nn.AttentionOp)
    assert ks.choices(att)["scores"] == "direct"
    ks.record(att, {"scores": "transposed", "pv": "direct"}, overwrite=True)
    with pytest.raises(BAD, match=r"nn.attention \(a\): tile \d+: transposed scores .* 32 query rows"):
        _placed(module)
        compile_model(module, TARGET)


@pytest.mark.parametrize("rows,n", [(16, 1152), (40, 200)])
def test_flipped_row_kernels_compute_the_same_rows(rows, n):
    """A layer norm and a softmax with either row kernel (whole rows per worker, or every row split across the six
    workers), each flipped on its own: other cycles, the same rows up to f16 rounding."""
    results = []
    for flipped in (None, nn.LayerNormOp, nn.SoftmaxOp):
        module = _planned(_rows_module(rows, n))
        if flipped is not None:
            o = _op(module, flipped)
            kinds, now = ks.ROWS[flipped], ks.choices(o)["rows"]
            ks.record(o, {"rows": kinds[1] if now == kinds[0] else kinds[0]}, overwrite=True)
        _placed(module)
        pkg = compile_model(module, TARGET)
        session = Session(pkg)
        rng = np.random.default_rng(rows + n)
        session.upload_parameters({"g": 1 + 0.1 * rng.standard_normal(n), "b": 0.1 * rng.standard_normal(n)})
        results.append(session.run({"x": rng.standard_normal((rows, n)).astype(np.float32)}))
    assert len({r.cycles for r in results}) == 3, [r.cycles for r in results]
    a = results[0].outputs["y"].astype(np.float64)
    for r in results[1:]:
        np.testing.assert_allclose(r.outputs["y"].astype(np.float64), a, rtol=0, atol=2e-3 * np.abs(a).max())
