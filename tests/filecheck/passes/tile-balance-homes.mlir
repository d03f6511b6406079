// tile-balance-homes: the resident home blocks (parameters read only by the exchange) move to the least-loaded
// tiles, counting each tile's working set; the per-tile resident bytes are recorded on the function. Here the
// layer norm's g and b and w3 (one tile each under tile-plan) move off the fullest tile: 3200 -> 3072 B.
// RUN: ipu-opt %s -p 'nn-quantize-weights,tile-plan{tiles=4},tile-balance-homes{tiles=4 enable=false}' | filecheck %s --check-prefix=KEPT
// RUN: ipu-opt %s -p 'nn-quantize-weights,tile-plan{tiles=4},tile-balance-homes{tiles=4}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-quantize-weights,tile-plan{tiles=4},tile-balance-homes{tiles=4}' | ipu-opt -p 'exchange-lower{tiles=4}' | filecheck %s --check-prefix=LOWERED

// KEPT: func.func @mlp() attributes {{{.*}}tile.resident_bytes = {min = 2048 : i64, median = 2112 : i64, max = 3200 : i64}}
// CHECK: func.func @mlp() attributes {{{.*}}tile.resident_bytes = {min = 2048 : i64, median = 2176 : i64, max = 3072 : i64}}
// The moved homes still feed their consumers through the exchange.
// LOWERED: exchange.phase
// LOWERED: nn.linear

builtin.module {
  func.func @mlp() {
    %x = nn.input "x" : tensor<64x64xf32>
    %w1 = nn.param "w1" : tensor<64x64xf32>
    %w2 = nn.param "w2" : tensor<64x64xf32>
    %w3 = nn.param "w3" : tensor<16x64xf32>
    %g = nn.param "g" : tensor<64xf32>
    %b = nn.param "b" : tensor<64xf32>
    %l = nn.layer_norm %x, %g, %b eps=1.0e-06 : tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %h = nn.linear %l, %w1 : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    %h2 = nn.linear %h, %w2 : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    %y = nn.linear %h2, %w3 : tensor<64x64xf32>, tensor<16x64xf32> -> tensor<64x16xf32>
    nn.output "y" %y : tensor<64x16xf32>
    func.return
  }
}
