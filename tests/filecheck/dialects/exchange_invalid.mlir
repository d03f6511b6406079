// RUN: ipu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Tile 0 holds a [4] f16 vector (8 bytes); tile 1 must receive it as two blocks of 4 bytes.

func.func @send_conflict() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0], [0, 0, 4, 4, 0]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, 8], [1, 0, 4, 1, 8]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "latency", cycles = 9 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: tile 0 sends two words in cycle 0}}
  func.return
}
// CHECK: exchange.phase: tile 0 sends two words in cycle 0

// -----

func.func @recv_conflict_multi_sender() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<0, 2, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0], [2, 0, 0, 4, 0]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, 8], [1, 0, 4, 1, 8]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 3 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "latency", cycles = 9 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: tile 1 receives two words in cycle 8}}
  func.return
}
// CHECK: exchange.phase: tile 1 receives two words in cycle 8

// -----

func.func @no_send() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0], [0, 0, 4, 4, 1]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, 8], [1, 0, 4, 2, 9]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "latency", cycles = 10 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: receive #1 on tile 1 has no send (send index 2)}}
  func.return
}
// CHECK: exchange.phase: receive #1 on tile 1 has no send (send index 2)

// -----

func.func @late_receive() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0], [0, 0, 4, 4, 1]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, 8], [1, 0, 4, 1, 12]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "latency", cycles = 13 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: receive #1 on tile 1 at cycle 12 does not match its send at cycle 1 + latency 8}}
  func.return
}
// CHECK: exchange.phase: receive #1 on tile 1 at cycle 12 does not match its send at cycle 1 + latency 8

// -----

func.func @not_delivered() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0]]> : tensor<1x5xi32>, recvs = dense<[[1, 0, 0, 0, 8]]> : tensor<1x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "latency", cycles = 9 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: tile 1 gets 4 bytes of buffer 0 but its shard has 8: data not delivered}}
  func.return
}
// CHECK: exchange.phase: tile 1 gets 4 bytes of buffer 0 but its shard has 8: data not delivered

// -----

func.func @read_outside_shard() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0], [0, 0, 6, 4, 1]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, 8], [1, 0, 4, 1, 9]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 1024 : i64, mode = "latency", cycles = 10 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: send #1 reads bytes [6, 10) of buffer 0 on tile 0, whose source shard has 8 bytes}}
  func.return
}
// CHECK: exchange.phase: send #1 reads bytes [6, 10) of buffer 0 on tile 0, whose source shard has 8 bytes

// -----

func.func @row_budget() {
  %a = nn.input "a" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f16>} : tensor<4xf16>
  %b = exchange.phase %a {layouts = [#tile.layout<shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 0, 0>, order = "row_major", dtype = f16>], sends = dense<[[0, 0, 0, 4, 0], [0, 0, 4, 4, 2]]> : tensor<2x5xi32>, recvs = dense<[[1, 0, 0, 0, 8], [1, 0, 4, 1, 10]]> : tensor<2x5xi32>, copies = dense<0> : tensor<0x5xi32>, tiles = 2 : i64, latency = 8 : i64, row_budget = 16 : i64, mode = "latency", cycles = 11 : i64} : tensor<4xf16> -> tensor<4xf16>
  // expected-error @above {{exchange.phase: tile 0 needs 20 bytes of exchange rows, over the budget of 16}}
  func.return
}
// CHECK: exchange.phase: tile 0 needs 20 bytes of exchange rows, over the budget of 16
