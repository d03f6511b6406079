// RUN: not ipu-opt %s -p 'tile-plan{weights_order=col_major}' 2>&1 | filecheck %s --check-prefix=ORDER
// RUN: not ipu-opt %s -p 'tile-plan{tiles=2000}' 2>&1 | filecheck %s --check-prefix=TILES
// RUN: not ipu-opt %s -p 'tile-plan{memory_fraction=1.5}' 2>&1 | filecheck %s --check-prefix=MEM
// RUN: not ipu-opt %s -p 'tile-plan{carried=yield}' 2>&1 | filecheck %s --check-prefix=CARRIED
// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=4 sram_kib=256}' --verify-diagnostics 2>&1 | filecheck %s

// ORDER: ipu-opt: error: bad pass pipeline: tile-plan: option 'weights_order' must be one of auto, row_major, amp16, ampw, got 'col_major'
// TILES: ipu-opt: error: bad pass pipeline: tiles must be in [1, 1472], got 2000
// MEM: ipu-opt: error: bad pass pipeline: tile-plan: option 'memory_fraction' must be in [0, 1] (0: derived), got 1.5
// CARRIED: ipu-opt: error: bad pass pipeline: tile-plan: option 'carried' must be one of auto, entry, got 'yield'

func.func @grid_does_not_cover() {
  %x = nn.input "x" : tensor<8x16xf32>
  %w = nn.param "w" : tensor<32x16xf32>
  %y = nn.linear %x, %w {tile.plan = #tile.gemm<grid = [2, 2], panel = [4, 16, 8], base = 0, precision = "f32", cast = "late", worder = "row_major", cycles = 0>} : tensor<8x16xf32>, tensor<32x16xf32> -> tensor<8x32xf32>
  func.return
}
// CHECK: tile-plan: nn.linear (%y): GEMM plan grid 2x2 with panels [4, 8] does not cover the [8, 32] result on 4 tiles

// -----

func.func @flash() {
  %q = nn.input "q" : tensor<8x16xf32>
  %a = nn.attention %q, %q, %q heads=2 scale=0.25 {tile.plan = #tile.attention<kind = "flash", grid = [2, 2], qblock = 4, kblock = 64, base = 0, precision = "f32", cycles = 0>} : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  func.return
}
// CHECK: tile-plan: nn.attention (%a): attention kind 'flash' is not implemented (materialized only)

// -----

func.func @foreign_op() {
  %x = nn.input "x" : tensor<8x16xf32>
  %y = "test.op"(%x) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return
}
// CHECK: tile-plan: test.op (%y): cannot plan an op of dialect 'test'

// -----

// More K chunks than tiles: no panel width helps (4 chunks on 4 tiles plan: one 32-column panel, few_rows_panel).
func.func @partials_need_more_tiles() {
  %x = nn.input "x" : tensor<1x128xf16>
  %w = nn.param "w" : tensor<32x128xf16>
  %p = nn.linear_partials %x, %w k_chunk=16 : tensor<1x128xf16>, tensor<32x128xf16> -> tensor<8x1x32xf32>
  func.return
}
// CHECK: tile-plan: nn.linear_partials (%p): 8 K chunks x 2 column panels need 16 tiles, the target has 4

// -----

func.func @partials_plan_does_not_cover() {
  %x = nn.input "x" : tensor<1x64xf16>
  %w = nn.param "w" : tensor<32x64xf16>
  %p = nn.linear_partials %x, %w k_chunk=32 {tile.plan = #tile.gemm<grid = [2, 1], panel = [1, 32, 16], base = 0, precision = "f16", cast = "early", worder = "row_major", cycles = 0>} : tensor<1x64xf16>, tensor<32x64xf16> -> tensor<2x1x32xf32>
  func.return
}
// CHECK: tile-plan: nn.linear_partials (%p): partials plan grid 2x1 with panels [1, 32, 16] at base 0 does not cover [1, 64] x [32, 64] on 4 tiles

// -----

// A grouped linear is planned as nn-split-k's partials only.
func.func @grouped_unsplit() {
  %x = nn.input "x" : tensor<2x32xf16>
  %w = nn.param "w" : tensor<64x32xf16>
  %y = nn.linear %x, %w {row_groups = 2 : i64} : tensor<2x32xf16>, tensor<64x32xf16> -> tensor<1x64xf32>
  nn.output "y" %y : tensor<1x64xf32>
  func.return
}
// CHECK: tile-plan: nn.linear (%y): a grouped linear (row_groups = 2) is planned as its K-split partials: run nn-split-k first

// -----

// A GEMM budget no grid fits (here a person's).
func.func @budget_too_small() attributes {tile.gemm_budget = 1000 : i64} {
  %x = nn.input "x" : tensor<64x64xf32>
  %w = nn.param "w" : tensor<64x64xf32>
  %y = nn.linear %x, %w : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  nn.output "y" %y : tensor<64x64xf32>
  func.return
}
// CHECK: tile-plan: nn.linear (%y): no GEMM grid for [64, 64] x [64, 64] fits on 4 tiles: 7 over the GEMM budget of 1000 B per tile (tile.gemm_budget on the function; the least: 20608 B for [32, 64] x [64, 32] blocks)

// -----

// Blocks whose C (f16 + f32 staging) does not fit the lowering's scratch element on so few tiles.
func.func @scratch_too_small() {
  %x = nn.input "x" : tensor<49x160xf32>
  %w = nn.param "w" : tensor<544x160xf32>
  %y = nn.linear %x, %w : tensor<49x160xf32>, tensor<544x160xf32> -> tensor<49x544xf32>
  nn.output "y" %y : tensor<49x544xf32>
  func.return
}
// CHECK: tile-plan: nn.linear (%y): no GEMM grid for [49, 160] x [160, 544] fits on 4 tiles: 8 over the lowering's 32768-byte C / A scratch elements (the least: a [49, 136] block, whose C takes 6 B per padded element)

// -----

func.func @budget_not_bytes() attributes {tile.gemm_budget = "a lot"} {
  %x = nn.input "x" : tensor<64x64xf32>
  func.return
}
// CHECK: tile-plan: @budget_not_bytes: tile.gemm_budget = "a lot": a positive byte count expected

// -----

func.func @merge_heads_not_dividing() {
  %q = nn.input "q" : tensor<8x48xf16>
  %p = nn.attention_partial %q, %q, %q heads=2 scale=0.2 chunks=2 : tensor<8x48xf16>, tensor<8x48xf16>, tensor<8x48xf16> -> tensor<2x8x52xf32>
  %m = nn.attention_merge %p heads=2 {tile.plan = #tile.attention<kind = "merge", grid = [1, 2, 2], qblock = 8, kblock = 3, base = 0, precision = "f32", cycles = 0>} : tensor<2x8x52xf32> -> tensor<8x48xf32>
  func.return
}
// CHECK: tile-plan: nn.attention_merge (%m): merge blocks of 3 heads (plan kblock) need a divisor of the 2 heads whose row blocks split the 8-row query blocks over 2 chunks each

// -----

func.func @carried_count() {
  %h = nn.input "h" : tensor<8x16xf32>
  %ws = nn.param "encoder.layers.*.w" : tensor<2x16x16xf32>
  %r = nn.repeat 2 carried(%h : tensor<8x16xf32>) stacked(%ws : tensor<2x16x16xf32>) attributes {tile.carried_layouts = []} -> tensor<8x16xf32> {
  ^bb0(%a: tensor<8x16xf32>, %w: tensor<16x16xf32>):
    %y = nn.linear %a, %w : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
    nn.yield %y : tensor<8x16xf32>
  }
  nn.output "r" %r : tensor<8x16xf32>
  func.return
}
// CHECK: tile-plan: nn.repeat (%r): tile.carried_layouts must be an array of 1 #tile.layout (one per carried value), got []

// -----

func.func @carried_shape() {
  %h = nn.input "h" : tensor<8x16xf32>
  %ws = nn.param "encoder.layers.*.w" : tensor<2x16x16xf32>
  %r = nn.repeat 2 carried(%h : tensor<8x16xf32>) stacked(%ws : tensor<2x16x16xf32>) attributes {tile.carried_layouts = [#tile.layout<shape = [16, 16], block = [4, 16], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>]} -> tensor<8x16xf32> {
  ^bb0(%a: tensor<8x16xf32>, %w: tensor<16x16xf32>):
    %y = nn.linear %a, %w : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
    nn.yield %y : tensor<8x16xf32>
  }
  nn.output "r" %r : tensor<8x16xf32>
  func.return
}
// CHECK: tile-plan: nn.repeat (%r): tile.carried_layouts:
