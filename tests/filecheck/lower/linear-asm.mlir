// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},memory-plan{tiles=4 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s
// RUN: not python -m ipu.backend.lower %s 2>&1 | filecheck %s --check-prefix=UNPLACED

// The supervisor program of one nn.linear on 4 tiles: the exchange phase (rounds, then on-tile copies), then per
// kernel call a frame whose first word says whether this tile has work. Each call site and sync starts with a
// profile label `.Lsite<i>:` (ipu.backend.lower.sites; the simulator records every tile's clock there).

// CHECK:      .globl main
// CHECK-NEXT: .supervisor
// CHECK-NEXT: main:
// CHECK-NEXT:     add $m9, $lr, 0
// The phase's exchange.sync is the timed exchange's opening sync (inside xch_timed).
// CHECK-NEXT: .Lsite0:
// CHECK-NEXT:     setzi $m0, 0x70100  // exchange timed ({{[0-9]+}} rounds)
// CHECK-NEXT:     call $lr, xch_timed
// CHECK-NEXT: .Lsite1:
// CHECK-NEXT:     setzi $m0, [[COPIES:0x[0-9a-f]+]]  // exchange copies
// CHECK-NEXT:     call $lr, copy_sup
// CHECK-NEXT: .Lsite2:
// The FP8 weight rows become the F16 AMP weight panels in one pass (converted and reordered, N padding zeroed).
// CHECK-NEXT:     setzi $m0, {{0x[0-9a-f]+}}  // nn.linear (unnamed): weight panels f8e4m3fnuz -> f16
// CHECK-NEXT:     ld32 $m1, $m0, $mzero, 0
// CHECK-NEXT:     brz $m1, .Lskip0
// CHECK-NEXT:     add $m0, $m0, 8
// CHECK-NEXT:     call $lr, rows_sup
// CHECK-NEXT: .Lskip0:
// CHECK-NEXT: .Lsite3:
// CHECK-NEXT:     setzi $m0, [[GEMM:0x[0-9a-f]+]]  // nn.linear (unnamed): GEMM
// CHECK-NEXT:     ld32 $m1, $m0, $mzero, 0
// CHECK-NEXT:     brz $m1, .Lskip1
// CHECK-NEXT:     add $m0, $m0, 8
// The weight panels are staged in interleaved memory: the supervisor loads two coefficient slots at a time.
// CHECK-NEXT:     call $lr, gemm_f16_sup_ld128
// CHECK-NEXT: .Lskip1:
// CHECK-NEXT: .Lsite4:
// CHECK-NEXT:     setzi $m0, {{0x[0-9a-f]+}}  // nn.linear (unnamed): bias
// CHECK-NEXT:     ld32 $m1, $m0, $mzero, 0
// CHECK-NEXT:     brz $m1, .Lskip2
// CHECK-NEXT:     add $m0, $m0, 8
// CHECK-NEXT:     call $lr, ew_sup
// CHECK-NEXT: .Lskip2:
// CHECK-NEXT: .Lsite5:
// CHECK-NEXT:     setzi $m0, {{0x[0-9a-f]+}}  // nn.linear (unnamed): cast to f32
// CHECK-NEXT:     ld32 $m1, $m0, $mzero, 0
// CHECK-NEXT:     brz $m1, .Lskip3
// CHECK-NEXT:     add $m0, $m0, 8
// CHECK-NEXT:     call $lr, ew_sup
// CHECK-NEXT: .Lskip3:
// CHECK-NEXT: .Lsite6:
// CHECK-NEXT:     br $m9
// CHECK-NOT:  {{.}}

// UNPLACED: error: @lin: no memory.plan: run memory-plan first

builtin.module {
  func.func @lin() {
    %0 = nn.input "x" : tensor<24x64xf32>
    %1 = nn.param "w" : tensor<32x64xf32>
    %2 = nn.param "b" : tensor<32xf32>
    %3 = nn.linear %0, %1, %2 : tensor<24x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<24x32xf32>
    nn.output "y" %3 : tensor<24x32xf32>
    func.return
  }
}
