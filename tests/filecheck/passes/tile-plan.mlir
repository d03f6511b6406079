// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=4 sram_kib=256}' | filecheck %s
// RUN: xdsl-opt %s --split-input-file -p "tile-plan{tiles=4 sram_kib=256}" | filecheck %s

// A GEMM on all 4 tiles: x row panels and w column panels replicated over the grid (multicast relayouts), the
// parameters' resident homes unreplicated; GELU in the GEMM's layout; layer norm needs whole rows.

func.func @mlp() {
  %x = nn.input "x" : tensor<8x16xf32>
  %w = nn.param "w" : tensor<32x16xf32>
  %b = nn.param "b" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32> -> tensor<8x32xf32>
  %g = nn.gelu %y "tanh" : tensor<8x32xf32> -> tensor<8x32xf32>
  %lw = nn.param "ln.w" : tensor<32xf32>
  %lb = nn.param "ln.b" : tensor<32xf32>
  %n = nn.layer_norm %g, %lw, %lb eps=1.000000e-06 : tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x32xf32>
  nn.output "n" %n : tensor<8x32xf32>
  func.return
}
// CHECK-LABEL: func.func @mlp
// CHECK:      %x = nn.input "x" {tile.layout = #tile.layout<shape = [8, 16], block = [{{[0-9]+}}, 16], replicas = 1
// CHECK:      %w = nn.param "w" {tile.layout = #tile.layout<shape = [32, 16], block = [{{[0-9]+}}, 16], replicas = 1
// CHECK:      tile.relayout %x to <shape = [8, 16], block = [{{[0-9]+}}, 16], replicas = {{[2-4]}}
// CHECK:      nn.linear {{.*}} {tile.plan = #tile.gemm<grid = [{{[0-9]+}}, {{[0-9]+}}], panel = [{{[0-9]+}}, 16, {{[0-9]+}}], base = 0, precision = "f32", cast = "late", worder = "row_major", cycles = {{[0-9]+}}>, tile.layout = #tile.layout<shape = [8, 32]
// CHECK-SAME: tiles = #tile.affine<0, 1, 0>
// CHECK:      nn.gelu {{.*}} {tile.plan = #tile.map<kind = "elementwise", cycles = {{[0-9]+}}>
// CHECK:      tile.relayout %{{.*}} to <shape = [8, 32], block = [2, 32], replicas = 1, tiles = #tile.affine<0, 1, 0>
// CHECK:      tile.relayout %lw to <shape = [32], block = [32], replicas = 4, tiles = #tile.affine<0, 0, 1>
// CHECK:      nn.layer_norm {{.*}} {tile.plan = #tile.map<kind = "rows", cycles = {{[0-9]+}}>, tile.layout = #tile.layout<shape = [8, 32], block = [2, 32]
// CHECK:      nn.output "n"

// -----

// A plan already present is honoured (here: a 1 x 2 grid from tile 2 with amp16 weight panels), and so is a
// parameter's layout: w is already where the GEMM wants it, so no relayout of w is inserted.

func.func @override() {
  %x = nn.input "x" : tensor<8x16xf32>
  %w = nn.param "w" {tile.layout = #tile.layout<shape = [32, 16], block = [16, 16], replicas = 1, tiles = #tile.affine<2, 1, 0>, order = "amp16", dtype = f32>} : tensor<32x16xf32>
  %y = nn.linear %x, %w {tile.plan = #tile.gemm<grid = [1, 2], panel = [8, 16, 16], base = 2, precision = "f32", cast = "late", worder = "amp16", cycles = 0>} : tensor<8x16xf32>, tensor<32x16xf32> -> tensor<8x32xf32>
  func.return
}
// CHECK-LABEL: func.func @override
// CHECK:      %x = nn.input "x" {tile.layout = #tile.layout<shape = [8, 16], block = [8, 16], replicas = 1, tiles = #tile.affine<2, 0, 0>
// CHECK-NEXT: %w = nn.param "w" {tile.layout = #tile.layout<shape = [32, 16], block = [16, 16], replicas = 1, tiles = #tile.affine<2, 1, 0>, order = "amp16"
// CHECK-NEXT: %{{.*}} = tile.relayout %x to <shape = [8, 16], block = [8, 16], replicas = 2, tiles = #tile.affine<2, 0, 1>
// CHECK-NEXT: nn.linear %{{.*}}, %w {tile.plan = #tile.gemm<grid = [1, 2], panel = [8, 16, 16], base = 2
// CHECK-SAME: tile.layout = #tile.layout<shape = [8, 32], block = [8, 16], replicas = 1, tiles = #tile.affine<2, 1, 0>

// -----

// Weight casts and parameter slices are folded by the host (`#tile.map<kind = "host">`); the FP8 layout keeps
// the cast's scale; the f32 parameter itself stays on the host (no layout).

func.func @host_cast() {
  %x = nn.input "x" : tensor<8x16xf16>
  %w = nn.param "w" : tensor<32x16xf32>
  %wq = nn.cast %w {scale = -4 : i64} : tensor<32x16xf32> -> tensor<32x16xf8E4M3FNUZ>
  %y = nn.linear %x, %wq : tensor<8x16xf16>, tensor<32x16xf8E4M3FNUZ> -> tensor<8x32xf16>
  func.return
}
// CHECK-LABEL: func.func @host_cast
// CHECK:      %w = nn.param "w" : tensor<32x16xf32>
// CHECK-NEXT: %wq = nn.cast %w {tile.plan = #tile.map<kind = "host", cycles = 0>, tile.layout = #tile.layout<{{.*}}dtype = f8E4M3FNUZ, scale = -4>, scale = -4 : i64}
// CHECK:      precision = "fp8"

// -----

// nn.repeat becomes tile.repeat: the body is planned once, the stacked parameter gets its slice's home with
// stack = 2, and the carried value (kept whole on tile 3 by its given layout) is relayouted back to its loop layout
// before the yield.

func.func @loop() {
  %h = nn.input "h" {tile.layout = #tile.layout<shape = [8, 16], block = [8, 16], replicas = 1, tiles = #tile.affine<3, 0, 0>, order = "row_major", dtype = f32>} : tensor<8x16xf32>
  %ws = nn.param "encoder.layers.*.w" : tensor<2x16x16xf32>
  %r = nn.repeat 2 carried(%h : tensor<8x16xf32>) stacked(%ws : tensor<2x16x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%a: tensor<8x16xf32>, %w: tensor<16x16xf32>):
    %y = nn.linear %a, %w : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
    nn.yield %y : tensor<8x16xf32>
  }
  nn.output "r" %r : tensor<8x16xf32>
  func.return
}
// CHECK-LABEL: func.func @loop
// CHECK:      nn.param "encoder.layers.*.w" {tile.layout = #tile.layout<shape = [16, 16], {{.*}}, stack = 2>}
// CHECK:      tile.repeat 2 carried
// CHECK:      nn.linear
// CHECK:      tile.relayout
// CHECK-NEXT: tile.yield

// -----

// A GEMM whose A rows are gathered from a producer's narrower column blocks gets them in column panels of that
// width (`cols16`): each producer block then arrives as one piece, not one piece per row.

func.func @gathered_rows() {
  %x = nn.input "x" : tensor<8x16xf16>
  %w1 = nn.param "w1" : tensor<32x16xf16>
  %w2 = nn.param "w2" : tensor<16x32xf16>
  %h = nn.linear %x, %w1 {tile.plan = #tile.gemm<grid = [2, 2], panel = [4, 16, 16], base = 0, precision = "f16", cast = "late", worder = "row_major", cycles = 0>} : tensor<8x16xf16>, tensor<32x16xf16> -> tensor<8x32xf16>
  %y = nn.linear %h, %w2 {tile.plan = #tile.gemm<grid = [2, 1], panel = [4, 32, 16], base = 0, precision = "f16", cast = "late", worder = "row_major", cycles = 0>} : tensor<8x32xf16>, tensor<16x32xf16> -> tensor<8x16xf16>
  nn.output "y" %y : tensor<8x16xf16>
  func.return
}
// CHECK-LABEL: func.func @gathered_rows
// CHECK:      tile.relayout %x to <shape = [8, 16], block = [4, 16], replicas = 2, {{.*}} order = "row_major"
// CHECK:      %h = nn.linear
// CHECK-NEXT: tile.relayout %h to <shape = [8, 32], block = [4, 32], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "cols16", dtype = f16>

// -----

// The GEMM budget (bytes of a tile for one GEMM's operands and result) is derived and recorded on the function:
// 256 KiB less the runtime state, the host descriptors, memory-plan's 48 KiB code estimate, the three 32-KiB
// kernel scratch elements (112 KiB from the lowest to the end of SRAM here) and the resident w's share (4 KiB).
// Under it the cheapest grid is 1 x 4 (24.6 KB a tile).

func.func @budget_derived() {
  %x = nn.input "x" : tensor<64x64xf32>
  %w = nn.param "w" : tensor<64x64xf32>
  %y = nn.linear %x, %w : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  nn.output "y" %y : tensor<64x64xf32>
  func.return
}
// CHECK-LABEL: func.func @budget_derived() attributes {tile.gemm_budget = 92192 : i64}
// CHECK:       nn.linear {{.*}}tile.plan = #tile.gemm<grid = [1, 4], panel = [64, 64, 16]

// -----

// A budget a person wrote is kept: 21,000 B leave only the 2 x 2 grid (20.6 KB a tile).

func.func @budget_given() attributes {tile.gemm_budget = 21000 : i64} {
  %x = nn.input "x" : tensor<64x64xf32>
  %w = nn.param "w" : tensor<64x64xf32>
  %y = nn.linear %x, %w : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  nn.output "y" %y : tensor<64x64xf32>
  func.return
}
// CHECK-LABEL: func.func @budget_given() attributes {tile.gemm_budget = 21000 : i64}
// CHECK:       nn.linear {{.*}}tile.plan = #tile.gemm<grid = [2, 2], panel = [32, 64, 32]

// -----

// A key-split attention's merge read as a GEMM's x in K chunks of two heads (d = 24: not whole 16-column K
// blocks): result blocks of two heads side by side (kblock = 2), [qblock / (chunks x 2), 48] = [2, 48], so the
// x blocks arrive row-major and the GEMM reads them in place. The merge of rows 2r.. runs on cell (0, r / 2,
// r % 2): tile r.

func.func @merge_two_heads() {
  %q = nn.input "q" : tensor<8x48xf16>
  %w = nn.param "w" : tensor<32x48xf16>
  %p = nn.attention_partial %q, %q, %q heads=2 scale=0.2 chunks=2 : tensor<8x48xf16>, tensor<8x48xf16>, tensor<8x48xf16> -> tensor<2x8x52xf32>
  %m = nn.attention_merge %p heads=2 : tensor<2x8x52xf32> -> tensor<8x48xf32>
  %c = nn.cast %m : tensor<8x48xf32> -> tensor<8x48xf16>
  %y = nn.linear_partials %c, %w k_chunk=48 : tensor<8x48xf16>, tensor<32x48xf16> -> tensor<1x8x32xf16>
  func.return
}
// CHECK-LABEL: func.func @merge_two_heads()
// CHECK:       nn.attention_merge {{.*}}kind = "merge", grid = [1, 2, 2], qblock = 8, kblock = 2,
// CHECK-SAME:  tile.layout = #tile.layout<shape = [8, 48], block = [2, 48], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major"
// CHECK:       nn.cast {{.*}}block = [2, 48]{{.*}}order = "row_major", dtype = f16

// -----

// One head per block when the GEMM's chunks are one head (kblock = 0).

func.func @merge_one_head() {
  %q = nn.input "q" : tensor<8x48xf16>
  %w = nn.param "w" : tensor<32x48xf16>
  %p = nn.attention_partial %q, %q, %q heads=2 scale=0.2 chunks=2 : tensor<8x48xf16>, tensor<8x48xf16>, tensor<8x48xf16> -> tensor<2x8x52xf32>
  %m = nn.attention_merge %p heads=2 : tensor<2x8x52xf32> -> tensor<8x48xf32>
  %c = nn.cast %m : tensor<8x48xf32> -> tensor<8x48xf16>
  %y = nn.linear_partials %c, %w k_chunk=24 : tensor<8x48xf16>, tensor<32x48xf16> -> tensor<2x8x32xf16>
  func.return
}
// CHECK-LABEL: func.func @merge_one_head()
// CHECK:       nn.attention_merge {{.*}}kind = "merge", grid = [1, 2, 2], qblock = 8, kblock = 0,
// CHECK-SAME:  block = [4, 24]
