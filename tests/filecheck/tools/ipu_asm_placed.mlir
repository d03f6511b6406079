// `-t ipu-asm` on placed IR: the package's supervisor program `main` (what `python -m ipu.backend.lower
// placed.mlir --print-asm` prints; tests/unit/test_ipu_opt_package.py compares the two), and with full=true the
// whole code image's source: main, the loop patcher, the exchange routines, the kernel library.

// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4}' -t ipu-asm | filecheck %s
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4}' -t 'ipu-asm{full=true}' | filecheck %s --check-prefix=FULL

func.func @mlp() {
  %x = nn.input "x" : tensor<24x64xf32>
  %w = nn.param "w" : tensor<32x64xf32>
  %b = nn.param "b" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<24x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<24x32xf32>
  %g = nn.gelu %y "tanh" : tensor<24x32xf32> -> tensor<24x32xf32>
  nn.output "g" %g : tensor<24x32xf32>
  func.return
}

// CHECK:      .globl main
// CHECK-NEXT: .supervisor
// CHECK-NEXT: main:
// CHECK-NEXT:     add $m9, $lr, 0
// The phase's exchange.sync is the timed exchange's opening sync (inside xch_timed).
// CHECK-NEXT: .Lsite0:
// CHECK-NEXT:     setzi $m0, {{0x[0-9a-f]+}}  // exchange timed ({{[0-9]+}} rounds)
// CHECK-NEXT:     call $lr, xch_timed
// CHECK:          setzi $m0, {{0x[0-9a-f]+}}  // nn.linear (y): weight panels f8e4m3fnuz -> f16
// CHECK:          call $lr, gemm_f16_sup_ld128
// CHECK:          setzi $m0, {{0x[0-9a-f]+}}  // nn.gelu (g): tanh GELU
// CHECK:          br $m9
// CHECK-NOT:  xch_timed:

// Only the routines the program uses are linked: no layer loop here (no `rep_patch`), no softmax, no FP8 GEMM.
// FULL:     main:
// FULL:     br $m9
// FULL-NOT: rep_patch:
// FULL:     xch_timed:
// FULL:     gemm_f16_sup_ld128:
// FULL:     ew_sup:
// FULL-NOT: rows_softmax:
// FULL-NOT: gemm_fp8_
