// RUN: not ipu-opt %s -p 'nn-quantize-weights,tile-plan{tiles=4},tile-balance-homes{tiles=4 resident_budget_kib=1}' 2>&1 | filecheck %s
// CHECK: tile-balance-homes: @lin: tile {{[0-9]+}} holds {{[0-9]+}} B of resident parameters, over the budget of 1024 B ({{[0-9]+}} tiles over; resident min / median / max {{[0-9]+}} / {{[0-9]+}} / {{[0-9]+}} B); largest there: nn.cast of 'w' 2048 B.
// CHECK-NOT: Traceback

// RUN: not ipu-opt %s -p 'tile-balance-homes{resident_budget_kib=-1}' 2>&1 | filecheck %s --check-prefix=NEG
// NEG: ipu-opt: error: bad pass pipeline: tile-balance-homes: option 'resident_budget_kib' must be 0 (none) or positive, got -1

// RUN: not ipu-opt %s -p 'tile-balance-homes{off_readers=maybe}' 2>&1 | filecheck %s --check-prefix=BOOL
// BOOL: ipu-opt: error: bad pass pipeline: tile-balance-homes: option 'off_readers' = 'maybe' has the wrong type
// BOOL-NOT: Traceback

builtin.module {
  func.func @lin() {
    %0 = nn.input "x" : tensor<24x64xf32>
    %1 = nn.param "w" : tensor<128x64xf32>
    %2 = nn.linear %0, %1 : tensor<24x64xf32>, tensor<128x64xf32> -> tensor<24x128xf32>
    nn.output "y" %2 : tensor<24x128xf32>
    func.return
  }
}
