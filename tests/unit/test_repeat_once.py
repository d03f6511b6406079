"""The layer loop's body is lowered at a fixed number of iterations (0, 1 and the last), whatever the layer count:
the package is byte-identical to the reference path that lowers every iteration (`per_iteration=True`), and a
word, binding or per-iteration segment that is not an arithmetic progression over the iterations is refused."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, i64
from xdsl.passes import PassPipeline

from ipu.backend.lower import lowering as lw
from ipu.backend.target import Target
from ipu.dialects import tile as tl
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.registry import all_passes

TARGET = Target.small(tiles=16, sram_kib=624)


def _placed(layers: int, extra_scratch: int = 0):
    """The placed tiny model; extra_scratch: bytes more than lowering-storage measured for the lowering's data (a
    test that allocates more than the real lowering does)."""
    module = build_vision_model(PRESETS["tiny"].with_layers(layers))
    spec = lw.pipeline_spec(TARGET, outline_repeat=True)
    if extra_scratch:
        n, kib = TARGET.num_tiles, TARGET.sram_bytes // 1024
        head, tail = spec.split(",lowering-storage")
        PassPipeline.parse_spec(dict(all_passes()), head).apply(Context(), module)
        PassPipeline.parse_spec(dict(all_passes()), f"lowering-storage{{tiles={n} sram_kib={kib}}}").apply(
            Context(), module
        )
        f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
        storage = dict(f.attributes["lowering.storage"].data)
        storage["scratch"] = IntegerAttr(storage["scratch"].value.data + extra_scratch, i64)
        f.attributes["lowering.storage"] = DictionaryAttr(storage)
        spec = f"memory-plan{{tiles={n} sram_kib={kib}}}"
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return module


def _count_body_lowerings(monkeypatch) -> list[int]:
    """Patches Lowering.block to record the iteration of every lowering of a tile.repeat body."""
    seen: list[int] = []
    block = lw.Lowering.block

    def counting(self, b):
        if isinstance(b.parent_op(), tl.RepeatOp):
            seen.append(self.layer)
        return block(self, b)

    monkeypatch.setattr(lw.Lowering, "block", counting)
    return seen


def _bytes(pkg, path) -> bytes:
    return pkg.save(path).read_bytes()


@pytest.mark.parametrize("layers", [3, 5])
def test_sampled_lowering_is_byte_identical_to_per_iteration(layers, tmp_path, monkeypatch):
    module = _placed(layers)
    seen = _count_body_lowerings(monkeypatch)
    ref = lw.lower_to_package(module, TARGET, per_iteration=True)
    assert seen == list(range(layers))
    seen.clear()
    pkg = lw.lower_to_package(module, TARGET)
    assert seen == [0, 1, layers - 1]  # three lowerings of the body, whatever the layer count
    assert any(f"tile.repeat x{layers}" in n for n in pkg.metadata["notes"])
    # Every layer's bindings (per-iteration biases, the stacked parameters' members) are there, in order.
    assert [b.name for b in pkg.parameters] == [b.name for b in ref.parameters]
    for a, b in zip(pkg.parameters, ref.parameters):
        assert np.array_equal(a.chunks, b.chunks), a.name
    assert _bytes(pkg, tmp_path / "sampled.ipupkg") == _bytes(ref, tmp_path / "reference.ipupkg")


def test_repeat_samples_do_not_grow_with_the_count():
    assert [len(lw.repeat_samples(c)) for c in (1, 2, 3, 8, 27, 100)] == [1, 2, 3, 3, 3, 3]
    assert lw.repeat_samples(27) == [0, 1, 26]
    assert lw.repeat_samples(4, per_iteration=True) == [0, 1, 2, 3]


def test_a_word_that_is_not_a_progression_is_refused(monkeypatch):
    """One kernel frame word of the last iteration moved by 8 bytes: iterations 0 and 1 agree with a stride, the
    last one does not, and the word, its tile and its frame are named."""
    module = _placed(3)
    call = lw.Lowering.call
    moved = []

    def call_moving_a_word(self, entry, words, build, all_active=False, what=""):
        if self.layer == self.layers - 1 and not moved and self.layers > 2:
            moved.append(what)

            def build_moved(labels, build=build):
                active, frames = build(labels)
                frames = frames.copy()
                frames[:, 0] += 8
                return active, frames

            return call(self, entry, words, build_moved, all_active, what)
        return call(self, entry, words, build, all_active, what)

    monkeypatch.setattr(lw.Lowering, "call", call_moving_a_word)
    with pytest.raises(
        lw.LoweringError, match=r"tile.repeat x3: the word at 0x[0-9a-f]+ on tile \d+ \(frame of "
    ) as e:
        lw.lower_to_package(module, TARGET)
    assert moved and moved[0] in str(e.value) and "not an arithmetic progression" in str(e.value)


def test_per_iteration_storage_that_is_not_a_progression_is_refused(monkeypatch):
    """Per-iteration storage (the GEMM biases' kernel-format copies) at member i * i: the bindings and data of the
    last iteration are not the progression of iterations 0 and 1."""
    module = _placed(3, extra_scratch=4096)  # room for the layers * layers members below

    def layer_alloc(self, nbytes, align=8):
        if self.layer is None:
            return self.image.alloc(nbytes, align, "high")
        size = -(-max(int(nbytes), 1) // align) * align
        base = self.image.alloc(size * self.layers * self.layers, align, "high")
        self.layer_ranges.append((base, base + size * self.layers * self.layers))
        return base + self.layer * self.layer * size

    monkeypatch.setattr(lw.Lowering, "layer_alloc", layer_alloc)
    with pytest.raises(lw.LoweringError, match=r"tile.repeat x3: .*not (the progression|an arithmetic)"):
        lw.lower_to_package(module, TARGET)
