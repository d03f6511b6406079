"""The backend as passes over `asm` IR (ipu.backend.lower.program, ipu.passes.asm_passes): the placed function ->
`asm.program` -> loop code, calls, link -> the package printed from the IR.

- the package through the passes, with the IR printed and parsed back between every two of them, is byte for
  byte the package of `lower_to_package` (several models, tile counts, both activation precisions);
- the loop's patch tables are built from the `asm.repeat` attributes (an edited stride changes the table);
- frames name routines through relocations that `asm-link` resolves to the linked code's labels;
- `main` holds one copy of the loop body whatever the layer count."""

from __future__ import annotations

from io import StringIO

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.printer import Printer

from ipu.backend.lower.lowering import lower_to_package, lower_to_program, pipeline_spec
from ipu.backend.lower.program import (
    ProgramError,
    StandInLabels,
    link,
    lower_calls,
    lower_repeats,
    package_of,
    relocations,
    target_of_program,
)
from ipu.backend.target import Target
from ipu.dialects import asm
from ipu.dialects.registry import all_dialects
from ipu.frontend.siglip import PRESETS, SiglipVisionConfig, build_vision_model
from ipu.passes.registry import all_passes

ODD = SiglipVisionConfig(
    hidden_size=48,
    intermediate_size=96,
    num_attention_heads=2,
    num_hidden_layers=3,
    image_size=36,
    patch_size=6,
)
CASES = [
    (PRESETS["tiny"], 16, "f16"),
    (PRESETS["tiny"].with_layers(3), 8, "fp8"),
    (ODD, 12, "f16"),
]


def _placed(cfg, tiles: int, activations: str = "f16") -> ModuleOp:
    target = Target.small(tiles=tiles, sram_kib=624)
    module = build_vision_model(cfg)
    spec = pipeline_spec(target, outline_repeat=True, activations=activations)
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return module


def _roundtrip(module: ModuleOp) -> ModuleOp:
    out = StringIO()
    Printer(stream=out).print_op(module)
    ctx = Context()
    for name, factory in all_dialects():
        ctx.register_dialect(name, factory)
    return Parser(ctx, out.getvalue()).parse_module()


@pytest.mark.parametrize("cfg,tiles,activations", CASES)
def test_the_passes_print_the_same_package(cfg, tiles, activations):
    module = _placed(cfg, tiles, activations)
    want = lower_to_package(module.clone()).to_bytes()
    staged = module.clone()
    for name in ("asm-lower", "asm-lower-repeat", "asm-lower-calls", "asm-link"):
        PassPipeline.parse_spec(dict(all_passes()), name).apply(Context(), staged)
        staged = _roundtrip(staged)  # each stage is textual IR a person can read and edit
    program = asm.program_of(staged)
    assert program is not None and program.linked
    assert not [o for o in staged.ops if o.name == "func.func"]
    pkg = package_of(program, target_of_program(program))
    pkg.validate()
    assert pkg.to_bytes() == want


def _table(program: asm.ProgramOp, address: int) -> np.ndarray:
    (d,) = [
        o for o in program.body.block.ops if isinstance(o, asm.DataOp) and o.address.value.data == address
    ]
    return d.rows().view("<u4")


def test_the_loop_tables_follow_the_repeat_attributes():
    program = lower_to_program(_placed(PRESETS["tiny"].with_layers(4), 8))
    (rep,) = [o for o in program.main().body.block.ops if isinstance(o, asm.RepeatOp)]
    assert rep.count.value.data == 4
    words, strides = rep.patches()
    assert len(words) and strides.shape == (8, len(words)) and strides.any()
    # Edit one tile's stride of the first word it patches: the forward table carries it, the reset table undoes
    # three of them.
    t, j = (int(x[0]) for x in np.nonzero(strides))
    edited = strides.copy()
    edited[t, j] = 0x1234
    rep.attributes["patch_strides"] = asm.dense_of(edited)
    fwd, rst = (int(rep.attributes[k].value.data) for k in ("forward_table", "reset_table"))
    lower_repeats(program)
    forward, reset = _table(program, fwd), _table(program, rst)
    n = int((edited[t] != 0).sum())
    assert forward[t, 0] == n == reset[t, 0]
    pairs = forward[t, 1 : 1 + 2 * n].reshape(n, 2)
    row = {int(a): int(s) for a, s in pairs}
    assert row[int(words[j])] == 0x1234
    back = {int(a): int(s) for a, s in reset[t, 1 : 1 + 2 * n].reshape(n, 2)}
    assert back[int(words[j])] == (-3 * 0x1234) % (1 << 32)
    for k in np.nonzero(edited[t])[0]:  # every other word as the lowering derived it
        assert row[int(words[k])] == int(edited[t, k])
    record = _table(program, int(rep.record.value.data))
    assert record[0].tolist() == [0, fwd, rst, 0]


def test_frames_name_routines_through_relocations():
    program = lower_to_program(_placed(PRESETS["tiny"], 16))
    frames = {
        int(o.address.value.data): o
        for o in program.body.block.ops
        if isinstance(o, asm.DataOp) and o.label.data.startswith("frame ")
    }
    calls = [o for o in program.walk() if isinstance(o, asm.KernelCallOp) and o.header]
    assert calls and all(int(c.frame.value.data) in frames for c in calls)  # every frame is data
    before = {a: (d.rows().view("<u4").copy(), *d.relocs()) for a, d in frames.items()}
    assert any(len(r) for _, r, _ in before.values())
    lower_repeats(program)
    lower_calls(program)
    laid = link(program, target_of_program(program))
    after = {
        int(o.address.value.data): o.rows().view("<u4")
        for o in program.body.block.ops
        if isinstance(o, asm.DataOp) and o.label.data.startswith("frame ")
    }
    for a, (words, r, names) in before.items():
        moved = np.zeros(words.shape, bool)
        moved[r[:, 0], r[:, 1]] = True
        assert np.array_equal(after[a][~moved], words[~moved])  # only the relocated words change
        for row, w, k in r.tolist():
            assert after[a][row, w] == words[row, w] + laid.labels[names[k]]
    # A routine no frame and no call names is not linked.
    linked = {k.sym_name.data for k in program.kernels()}
    assert "gemm_fp8_sup_ld128" not in linked and "rep_patch" in linked


def test_relocations_refuse_a_word_that_is_not_an_address_plus_a_constant():
    names: dict[str, int] = {}
    a_labels, b_labels = StandInLabels(0x6000_0000, names), StandInLabels(0x7000_0000, names)
    a = np.array([[7, a_labels["x"] + 16, a_labels["y"]]], np.uint32)
    b = np.array([[7, b_labels["x"] + 16, b_labels["y"]]], np.uint32)
    words, rel = relocations(a, b, names, "frame")
    assert words.tolist() == [[7, 16, 0]] and rel.tolist() == [[0, 1, 0], [0, 2, 1]]
    with pytest.raises(ProgramError, match="not a code address plus a constant"):
        relocations(a // 4, b // 4, names, "frame")


def test_one_copy_of_the_loop_body_whatever_the_layer_count():
    sizes = []
    for layers in (2, 5):
        program = lower_to_program(_placed(PRESETS["tiny"].with_layers(layers), 8))
        (rep,) = [o for o in program.main().body.block.ops if isinstance(o, asm.RepeatOp)]
        assert rep.count.value.data == layers
        sizes.append(len(list(program.main().walk())))
    # The plans of 2 and 5 layers differ a little (a copy more or less), an unrolled body would be 2.5x.
    assert abs(sizes[1] - sizes[0]) < 0.1 * sizes[0]
