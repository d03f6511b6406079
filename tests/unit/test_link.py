"""Linking only what is used: `isa_program.reachable` and the lowering's code image (`Lowering._link`)."""

import pytest

from ipu.backend.asm_text import parse_kernels, parse_program
from ipu.backend.isa import OperandError
from ipu.backend.isa_program import reachable

LIB = """
.globl main
.supervisor
main:
    call $lr, a
    br $lr

.globl a
.supervisor
a:
    call $lr, .Lb_inner
    br $lr

.globl b
.supervisor
b:
    nop
.Lb_inner:
    br $lr

.globl first
.supervisor
first:
    sync TEXCH_SYNCZONE_INTERNAL
.globl second
.supervisor
second:
    br $lr

.globl unused
.supervisor
unused:
    call $lr, b
    br $lr

.globl w
.worker
w:
    exitz $mzero
"""


def names(kernels):
    return [k.name for k in kernels]


def test_calls_and_local_labels_of_other_kernels_are_followed():
    ks = parse_kernels(LIB)
    assert names(reachable(ks, ["main"])) == ["main", "a", "b"]


def test_a_kernel_without_a_final_branch_keeps_the_one_after_it():
    ks = parse_kernels(LIB)
    assert names(reachable(ks, ["first"])) == ["first", "second"]
    assert names(reachable(ks, ["second"])) == ["second"]


def test_frame_roots_and_order_kept():
    ks = parse_kernels(LIB)
    assert names(reachable(ks, ["w", "main"])) == ["main", "a", "b", "w"]


def test_a_missing_root_is_named():
    with pytest.raises(OperandError, match="nope"):
        reachable(parse_kernels(LIB), ["main", "nope"])


def test_lowering_links_what_its_frames_name():
    """The lowering's text is the code it laid out (same kernels, labels, size), every routine a frame names is
    in it, and library routines nothing calls are not (no FP8 x FP8 GEMM, no softmax split in the tiny model)."""
    from xdsl.context import Context

    from ipu.backend.lower.lowering import Lowering
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.passes.tile_plan import target_for

    module = build_vision_model(PRESETS["siglip-tiny"])
    IpuCompilePipelinePass(tiles=4).apply(Context(), module)
    f = next(o for o in module.body.block.ops if o.name == "func.func")
    low = Lowering(f, target_for(4, 624))
    pkg = low.run()
    prog = parse_program(low.text, pkg.code_base)
    assert prog.labels == pkg.labels and sorted(prog.kernels) == sorted(pkg.kernels)
    assert prog.end - prog.base == low.code_bytes
    assert {c.entry for c in low.calls} <= set(pkg.kernels)
    assert "gemm_f16_sup_ld128" in pkg.kernels and "rep_patch" in pkg.kernels  # the layer loop's patcher
    assert not any(k.startswith(("gemm_fp8", "rows_sms_")) for k in pkg.kernels)
