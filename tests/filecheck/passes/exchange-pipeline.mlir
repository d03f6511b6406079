// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=4 sram_kib=256}' | filecheck %s
// RUN: not ipu-opt %s -p 'nn-to-exchange-pipeline{mode=slow}' 2>&1 | filecheck %s --check-prefix=BAD

// The whole nn -> exchange lowering of a linear + GELU on 4 tiles.

func.func @mlp() {
  %x = nn.input "x" : tensor<8x16xf32>
  %w = nn.param "w" : tensor<32x16xf32>
  %y = nn.linear %x, %w : tensor<8x16xf32>, tensor<32x16xf32> -> tensor<8x32xf32>
  %g = nn.gelu %y "tanh" : tensor<8x32xf32> -> tensor<8x32xf32>
  nn.output "g" %g : tensor<8x32xf32>
  func.return
}
// CHECK:      builtin.module attributes {exchange.compute_cycles = {{[0-9]+}} : i64, exchange.exchange_cycles = {{[1-9][0-9]*}} : i64, exchange.sync_cycles = 150 : i64}
// CHECK:      exchange.sync "internal"
// CHECK-NEXT: exchange.phase %x{{.*}} mode = "latency"
// CHECK:      nn.linear {{.*}}tile.plan = #tile.gemm
// CHECK:      nn.gelu {{.*}}tile.plan = #tile.map<kind = "elementwise"
// CHECK-NOT:  tile.relayout
// BAD: ipu-opt: error: bad pass pipeline: exchange-schedule: option 'mode' must be one of latency, compact, got 'slow'
