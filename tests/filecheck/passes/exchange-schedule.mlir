// RUN: ipu-opt %s -p 'exchange-schedule' | filecheck %s --check-prefix=LAT
// RUN: ipu-opt %s -p 'exchange-schedule{mode=compact stream_words=2}' | filecheck %s --check-prefix=CMP
// RUN: ipu-opt %s -p 'exchange-schedule{largest=false}' | filecheck %s --check-prefix=LAT

// The phase of exchange-lower.mlir's @move. Latency-first: whole 16-byte segments, rotation order; tile 0 and 1
// each send four 4-word segments back to back, receivers take them 8 cycles (the latency) later (equal sizes: the
// same order with or without `largest`).
// Compact: each sender streams its segments in address order (waves of 2 words): here both shorter (28 cycles)
// and with fewer encoded row bytes on the busiest tile (36 instead of 48), so the phase keeps it.

func.func @move() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<4x8xf32>
  exchange.sync "internal" {cycles = 150 : i64}
  %y = exchange.phase %x {layouts = [#tile.layout<shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32>], sends = dense<[[0, 0, 0, 16, -1], [0, 0, 32, 16, -1], [1, 0, 0, 16, -1], [1, 0, 32, 16, -1], [0, 0, 16, 16, -1], [0, 0, 48, 16, -1], [1, 0, 16, 16, -1], [1, 0, 48, 16, -1]]> : tensor<8x5xi32>, recvs = dense<[[2, 0, 0, 0, -1], [2, 0, 16, 1, -1], [0, 0, 32, 2, -1], [2, 0, 32, 2, -1], [0, 0, 48, 3, -1], [2, 0, 48, 3, -1], [1, 0, 0, 4, -1], [3, 0, 0, 4, -1], [1, 0, 16, 5, -1], [3, 0, 16, 5, -1], [3, 0, 32, 6, -1], [3, 0, 48, 7, -1]]> : tensor<12x5xi32>, copies = dense<[[0, 0, 0, 0, 16], [0, 0, 32, 16, 16], [1, 0, 16, 32, 16], [1, 0, 48, 48, 16]]> : tensor<4x5xi32>, tiles = 4 : i64, latency = 8 : i64, row_budget = 81920 : i64, mode = "none", cycles = 0 : i64} : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = nn.gelu %y "tanh" {tile.plan = #tile.map<kind = "elementwise", cycles = 7>, tile.layout = #tile.layout<shape = [4, 8], block = [4, 4], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f32>} : tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "z" %z : tensor<4x8xf32>
  func.return
}

// LAT:      builtin.module attributes {exchange.compute_cycles = {{[0-9]+}} : i64, exchange.exchange_cycles = 32 : i64, exchange.sync_cycles = 150 : i64}
// LAT:      exchange.phase %x
// LAT-SAME: sends = dense<[[0, 0, 0, 16, 8], [0, 0, 32, 16, 12], [1, 0, 0, 16, 16], [1, 0, 32, 16, 20], [0, 0, 16, 16, 0], [0, 0, 48, 16, 4], [1, 0, 16, 16, 8], [1, 0, 48, 16, 12]]> : tensor<8x5xi32>
// LAT-SAME: recvs = dense<[[2, 0, 0, 0, 16], [2, 0, 16, 1, 20],
// LAT-SAME: mode = "latency", cycles = 32 : i64, row_bytes = dense<[[44], [48], [20], [20]]> : tensor<4x1xi32>, max_row_bytes = 48 : i64

// CMP:      exchange.phase %x
// CMP-SAME: : tensor<8x5xi32>
// CMP-SAME: mode = "compact", cycles = 28 : i64, row_bytes = dense<[[32], [36], [36], [36]]> : tensor<4x1xi32>, max_row_bytes = 36 : i64
