// RUN: ipu-opt %s --split-input-file | ipu-opt --split-input-file | filecheck %s
// RUN: ipu-opt %s --split-input-file --print-op-generic | ipu-opt --split-input-file | filecheck %s

// A scheduled phase: rows 0, 2 (sends) multicast to two tiles; copies for the replicas already in place.

func.func @move() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<4x8xf32>
  exchange.sync "internal" {cycles = 150 : i64}
  %y = exchange.phase %x {layouts = [#tile.layout<shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32>], sends = dense<[[0, 0, 0, 16, 8], [0, 0, 32, 16, 12], [1, 0, 0, 16, 16], [1, 0, 32, 16, 20], [0, 0, 16, 16, 0], [0, 0, 48, 16, 4], [1, 0, 16, 16, 8], [1, 0, 48, 16, 12]]> : tensor<8x5xi32>, recvs = dense<[[2, 0, 0, 0, 16], [2, 0, 16, 1, 20], [0, 0, 32, 2, 24], [2, 0, 32, 2, 24], [0, 0, 48, 3, 28], [2, 0, 48, 3, 28], [1, 0, 0, 4, 8], [3, 0, 0, 4, 8], [1, 0, 16, 5, 12], [3, 0, 16, 5, 12], [3, 0, 32, 6, 16], [3, 0, 48, 7, 20]]> : tensor<12x5xi32>, copies = dense<[[0, 0, 0, 0, 16], [0, 0, 32, 16, 16], [1, 0, 16, 32, 16], [1, 0, 48, 48, 16]]> : tensor<4x5xi32>, tiles = 4 : i64, latency = 8 : i64, row_budget = 81920 : i64, mode = "latency", cycles = 32 : i64, row_bytes = dense<[[44], [48], [20], [20]]> : tensor<4x1xi32>, max_row_bytes = 48 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = nn.gelu %y "tanh" {tile.plan = #tile.map<kind = "elementwise", cycles = 7>, tile.layout = #tile.layout<shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32>} : tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "z" %z : tensor<4x8xf32>
  func.return
}
// CHECK-LABEL: func.func @move
// CHECK: exchange.sync "internal" {cycles = 150 : i64}
// CHECK: %y = exchange.phase %x {layouts = [#tile.layout<shape = [4, 8], block = [4, 4], replicas = 2
// CHECK-SAME: sends = dense<[[0, 0, 0, 16, 8], [0, 0, 32, 16, 12]
// CHECK-SAME: recvs = dense<[[2, 0, 0, 0, 16]
// CHECK-SAME: copies = dense<[[0, 0, 0, 0, 16]
// CHECK-SAME: mode = "latency", cycles = 32 : i64, row_bytes = dense<[[44], [48], [20], [20]]> : tensor<4x1xi32>, max_row_bytes = 48 : i64

// -----

// An unscheduled phase with two buffers and no copies.

func.func @two() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = nn.input "b" {tile.layout = #tile.layout<shape = [2], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f32>} : tensor<2xf32>
  exchange.sync "internal" {cycles = 150 : i64}
  %a2, %b2 = exchange.phase %a, %b {layouts = [#tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>, #tile.layout<shape = [2], block = [2], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f32>], sends = dense<[[0, 0, 0, 8, -1], [1, 1, 0, 8, -1]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, -1], [0, 1, 0, 1, -1]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "none", cycles = 0 : i64} : tensor<4xf16>, tensor<2xf32> -> tensor<4xf16>, tensor<2xf32>
  func.return
}
// CHECK-LABEL: func.func @two
// CHECK: %{{.*}}, %{{.*}} = exchange.phase %{{.*}}, %{{.*}} {layouts = [
// CHECK-SAME: mode = "none"
