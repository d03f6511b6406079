"""Random SigLIP-shaped models through the whole pipeline (`ipu.tools.random_models`): compiled with the default
pipeline, run on the simulator and compared per embedding with the device-precision reference; and the shapes a
sweep (bench/bench_random_models.py) once found refused."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.frontend.siglip import SiglipVisionConfig
from ipu.tools.random_models import COSINE_BOUND, draw, run_case


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_random_model_runs_as_the_reference_says(seed):
    cfg, tiles, kib = draw(np.random.default_rng([7, seed]))
    outcome, detail = run_case(cfg, tiles, kib, seed)
    # a named refusal is allowed for a shape the planner cannot place; a wrong result or a traceback is not
    assert outcome in ("ok", "diagnostic", "fallback"), (cfg, tiles, detail)


@pytest.mark.parametrize(
    "width, heads, tiles",
    [
        (128, 2, 4),  # the MAP head's value linear grouped by 2 heads of 64: 8 panels of 16 on 4 tiles
        (256, 4, 8),  # 4 heads of 64: 16 panels of 16 on 8 tiles
    ],
)
def test_grouped_head_linear_widens_its_panels_on_few_tiles(width, heads, tiles):
    """tile-plan widens a few-row K split's column panels (a divisor of the head) when 16-column panels need more
    tiles than the target has (`tile_plan.few_rows_panel`); these were "need 8 tiles, the target has 4"."""
    cfg = SiglipVisionConfig(
        hidden_size=width, intermediate_size=144, num_attention_heads=heads, num_hidden_layers=1,
        image_size=8, patch_size=4, vision_use_head=True,
    )  # fmt: skip
    outcome, detail = run_case(cfg, tiles, 624, 1)
    assert outcome == "ok", detail
    assert float(detail.rsplit(" ", 1)[1]) >= COSINE_BOUND


def test_few_rows_panel():
    from ipu.passes.tile_plan import few_rows_panel

    assert few_rows_panel(1152, 16, 9, 1472) == 24  # So400m's heads of 72: group_panel's 24, it fits
    assert few_rows_panel(256, 4, 1, 8) == 32  # 8 panels of 32 stay inside the heads of 64
    assert few_rows_panel(256, 4, 2, 8) == 64  # one panel per head
    assert few_rows_panel(256, 4, 4, 8) == 16  # nothing fits: the narrowest (tile-plan reports the cells)
    assert few_rows_panel(512, 0, 1, 8) == 64  # ungrouped: multiples of 16


def test_measuring_lowering_ignores_scratch_overlapping_a_provisional_buffer():
    """Width 168 (K % 16 != 0: weight rows re-strided into the aux scratch), 3 layers on 4 tiles: the measuring
    lowering's provisional plan (no kernel scratch reserved) put a weight block where the re-strided rows go, and
    lowering-storage failed with "a copy destination ... overlaps a copy source"; the final plan keeps them apart."""
    cfg = SiglipVisionConfig(
        hidden_size=168, intermediate_size=272, num_attention_heads=3, num_hidden_layers=3,
        image_size=16, patch_size=4, vision_use_head=True,
    )  # fmt: skip
    outcome, detail = run_case(cfg, 4, 624, 2002)
    assert outcome == "ok", detail


def test_column_panel_a_chunks_fit_the_a_scratch():
    """fc2 of width-352 x on 8 tiles (64 rows a tile, x from fc1's column panels): its K chunk of 352 gathered
    into the A scratch needed 45 KB of a 32 KB element ("a 64-row K chunk of the column-panel A exceeds the
    scratch element"); kernel-select now cuts such chunks to fit (`gathered_a_chunks`)."""
    from ipu.passes.kernel_select import gathered_a_chunks

    assert gathered_a_chunks([352], 352, 32, "cols_gather", 64, 32768) == [176, 176]
    assert gathered_a_chunks([352], 352, 32, "cols_gather", 32, 32768) == [352]  # fits: unchanged
    assert gathered_a_chunks([320], 320, 32, "cols_in_place", 64, 32768) == [320]  # read in place: unchanged
    cfg = SiglipVisionConfig(
        hidden_size=120, intermediate_size=352, num_attention_heads=5, num_hidden_layers=1,
        image_size=65, patch_size=8, vision_use_head=True,
    )  # fmt: skip
    outcome, detail = run_case(cfg, 8, 624, 3020)
    assert outcome == "ok", detail
