// RUN: not ipu-opt %s -p 'exchange-schedule{mode=fastest}' 2>&1 | filecheck %s --check-prefix=MODE
// RUN: not ipu-opt %s -p 'exchange-schedule{mode=compact stream_words=0}' 2>&1 | filecheck %s --check-prefix=WORDS
// RUN: ipu-opt %s -p 'exchange-schedule' --verify-diagnostics 2>&1 | filecheck %s

// MODE: ipu-opt: error: bad pass pipeline: exchange-schedule: option 'mode' must be one of latency, compact, got 'fastest'
// WORDS: ipu-opt: error: bad pass pipeline: exchange-schedule: option 'stream_words' must be positive, got 0

// Two sends from tile 0 to tile 1 with an 8-byte row budget: the receiving tile needs a receive row (8 bytes)
// plus a delay row (4 bytes) until the data arrives, so it exceeds the budget.

func.func @budget() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 4, 4, -1], [0, 0, 0, 4, -1]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 1, -1], [1, 0, 4, 0, -1]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 8 : i64, mode = "none", cycles = 0 : i64} : tensor<4xf16> -> tensor<4xf16>
  func.return
}
// CHECK: exchange-schedule: exchange.phase: tile {{[01]}} needs {{[0-9]+}} bytes of exchange rows in latency mode, over the budget of 8
