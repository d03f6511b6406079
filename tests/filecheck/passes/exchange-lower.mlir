// RUN: ipu-opt %s --split-input-file -p 'exchange-lower{tiles=4 sram_kib=256}' | filecheck %s

// x: rows [0, 2) on tile 0, rows [2, 4) on tile 1. y: column blocks [0, 4) on tiles 0 and 2, [4, 8) on tiles 1 and
// 3. Each row segment of 4 floats (16 bytes) is one send, multicast to both replicas of its column block; where
// the sender holds a replica itself, an on-tile copy replaces the receive.

func.func @move() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<4x8xf32>
  %y = tile.relayout %x to <shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32> : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = nn.gelu %y "tanh" {tile.plan = #tile.map<kind = "elementwise", cycles = 7>, tile.layout = #tile.layout<shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32>} : tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "z" %z : tensor<4x8xf32>
  func.return
}
// CHECK-LABEL: func.func @move
// CHECK:      %x = nn.input "x"
// CHECK-NEXT: exchange.sync "internal" {cycles = 150 : i64}
// CHECK-NEXT: %y = exchange.phase %x {layouts = [#tile.layout<shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32>]
// CHECK-SAME: sends = dense<[[0, 0, 0, 16, -1], [0, 0, 32, 16, -1], [1, 0, 0, 16, -1], [1, 0, 32, 16, -1], [0, 0, 16, 16, -1], [0, 0, 48, 16, -1], [1, 0, 16, 16, -1], [1, 0, 48, 16, -1]]> : tensor<8x5xi32>
// CHECK-SAME: recvs = dense<[[2, 0, 0, 0, -1], [2, 0, 16, 1, -1], [0, 0, 32, 2, -1], [2, 0, 32, 2, -1], [0, 0, 48, 3, -1], [2, 0, 48, 3, -1], [1, 0, 0, 4, -1], [3, 0, 0, 4, -1], [1, 0, 16, 5, -1], [3, 0, 16, 5, -1], [3, 0, 32, 6, -1], [3, 0, 48, 7, -1]]> : tensor<12x5xi32>
// CHECK-SAME: copies = dense<[[0, 0, 0, 0, 16], [0, 0, 32, 16, 16], [1, 0, 16, 32, 16], [1, 0, 48, 48, 16]]> : tensor<4x5xi32>
// CHECK-SAME: tiles = 4 : i64, latency = 8 : i64, row_budget = 81920 : i64, mode = "none", cycles = 0 : i64}
// CHECK-NEXT: %z = nn.gelu %y

// -----

// Adjacent relayouts share one phase (one buffer each); a compute op between them starts a new superstep.

func.func @grouping() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f32>} : tensor<4xf32>
  %b = nn.input "b" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f32>} : tensor<4xf32>
  %a1 = tile.relayout %a to <shape = [4], block = [2], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32> : tensor<4xf32> -> tensor<4xf32>
  %b1 = tile.relayout %b to <shape = [4], block = [2], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32> : tensor<4xf32> -> tensor<4xf32>
  %s = nn.add %a1, %b1 {tile.plan = #tile.map<kind = "elementwise", cycles = 5>, tile.layout = #tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %s1 = tile.relayout %s to <shape = [4], block = [4], replicas = 1, tiles = #tile.affine<2, 0, 0>, order = "row_major", dtype = f32> : tensor<4xf32> -> tensor<4xf32>
  nn.output "s" %s1 : tensor<4xf32>
  func.return
}
// CHECK-LABEL: func.func @grouping
// CHECK:      exchange.sync
// CHECK-NEXT: %a1, %b1 = exchange.phase %a, %b
// CHECK-NEXT: %s = nn.add %a1, %b1
// CHECK-NEXT: exchange.sync
// CHECK-NEXT: %s1 = exchange.phase %s
// CHECK-NOT:  tile.relayout

// -----

// Column-panel storage (`cols4`): each [2, 4] source block is one contiguous piece of the destination (one send
// of 32 B each), where row-major storage would need one send per row.

func.func @col_panels() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [2, 8], block = [2, 4], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<2x8xf32>
  %y = tile.relayout %x to <shape = [2, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<2, 0, 0>, order = "cols4", dtype = f32> : tensor<2x8xf32> -> tensor<2x8xf32>
  nn.output "y" %y : tensor<2x8xf32>
  func.return
}
// CHECK-LABEL: func.func @col_panels
// CHECK:      sends = dense<[[0, 0, 0, 32, -1], [1, 0, 0, 32, -1]]> : tensor<2x5xi32>
// CHECK-SAME: recvs = dense<[[2, 0, 0, 0, -1], [2, 0, 32, 1, -1]]> : tensor<2x5xi32>
