"""`nn-to-exchange-pipeline`: tile-plan, tile-fuse-sum-cast, tile-balance-homes, exchange-lower, exchange-schedule and kernel-select with one set of
target options.

    ipu-opt model.mlir -p 'nn-to-exchange-pipeline{tiles=16 sram_kib=256 mode=compact}'

Run the nn passes (nn-fuse-qkv, nn-quantize-weights, nn-outline-repeat) before it as needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from ipu.passes.exchange_lower import ExchangeLowerPass
from ipu.passes.exchange_schedule import ExchangeSchedulePass
from ipu.passes.kernel_select import KernelSelectPass
from ipu.passes.tile_balance_homes import TileBalanceHomesPass
from ipu.passes.tile_fuse_sum_cast import TileFuseSumCastPass
from ipu.passes.tile_plan import TilePlanPass


@dataclass(frozen=True)
class NNToExchangePipelinePass(ModulePass):
    """nn -> tile -> exchange in one pass, the backend's kernel choices recorded (see the module docstring)."""

    name = "nn-to-exchange-pipeline"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""
    memory_fraction: float = 0.0
    """tile-plan: share of a tile's SRAM one GEMM's operands and result may use (0: derived, `gemm_budget`)."""
    mode: str = "latency"
    """Exchange schedule: "latency" or "compact"."""
    stream_words: int = 256
    """Compact mode: words per stream wave."""
    balance_homes: bool = True
    """tile-balance-homes: spread the resident parameters' homes evenly over the tiles."""
    off_readers: bool = True
    """tile-balance-homes: keep each home block off the tiles that receive it."""
    resident_budget_kib: int = 0
    """tile-balance-homes: per-tile limit of resident parameter bytes, KiB (0: none)."""
    fuse_sum_cast: bool = True
    """tile-fuse-sum-cast: fold an FP8 cast into the planned K-split sum it reads."""
    weights_order: str = "auto"
    """tile-plan: storage order of GEMM weight panels ("auto": `ampw` AMP panels where the kernel reads them in
    place, `tile_plan.ampw_fits`; "row_major", "amp16", "ampw")."""
    carried: str = "auto"
    """tile-plan: the layouts a layer loop carries its values in ("auto": from a trial plan; "entry": as they
    enter the loop)."""
    split_broadcasts: bool = True
    """exchange-schedule: a phase's broadcasts run as a phase of their own where that is shorter."""

    def passes(self) -> tuple[ModulePass, ...]:
        return (
            TilePlanPass(
                tiles=self.tiles,
                sram_kib=self.sram_kib,
                memory_fraction=self.memory_fraction,
                weights_order=self.weights_order,
                carried=self.carried,
            ),
            TileFuseSumCastPass(enable=self.fuse_sum_cast),
            TileBalanceHomesPass(
                tiles=self.tiles,
                sram_kib=self.sram_kib,
                resident_budget_kib=self.resident_budget_kib,
                enable=self.balance_homes,
                off_readers=self.off_readers,
            ),
            ExchangeLowerPass(tiles=self.tiles, sram_kib=self.sram_kib),
            ExchangeSchedulePass(
                mode=self.mode, stream_words=self.stream_words, split_broadcasts=self.split_broadcasts
            ),
            KernelSelectPass(tiles=self.tiles, sram_kib=self.sram_kib),
        )

    def __post_init__(self) -> None:
        self.passes()  # option errors surface while the pipeline is built

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for p in self.passes():
            p.apply(ctx, op)
            op.verify()
