// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=16 sram_kib=624}' -o %t.exchange.mlir
// RUN: ipu-opt %t.exchange.mlir -p 'memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s
// RUN: sed 's/coef = "ld128"/coef = "ld64"/' %t.exchange.mlir | ipu-opt -p 'memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=LD64
// RUN: sed 's/k_chunks = array<i64: 64>/k_chunks = array<i64: 32, 32>/' %t.exchange.mlir | ipu-opt -p 'memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=CHUNKS
// RUN: sed 's/a_operand = "in_place"/a_operand = "padded"/' %t.exchange.mlir | ipu-opt -p 'memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=PADDED
// RUN: sed 's/key_chunk = 96 : i64, pv = "transposed", q_scale = "program", score_chunk = 96 : i64, scores = "transposed", softmax = "softmax_split"/key_chunk = 32 : i64, pv = "direct", q_scale = "program", scores = "direct", softmax = "softmax"/' %t.exchange.mlir | ipu-opt -p 'memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=KEYS
// RUN: sed 's/k_operand = "rows"/k_operand = "in_place"/' %t.exchange.mlir | ipu-opt -p 'memory-plan{tiles=16 sram_kib=624}' | not python -m ipu.backend.lower - --print-asm 2>&1 | filecheck %s --check-prefix=KIN

// The asm lowering does what the `kernel` attributes say (kernel-select wrote them; here sed edits them as a
// person would) and nothing else.

// As selected: one GEMM over K = 64 with ld128 coefficient loads, A read in place; the attention's keys in one
// chunk, blocks of 24 query rows on the transposed path (S^T with two 16-column blocks of queries).
// CHECK-NOT:  A padding
// CHECK:      // nn.linear (y): GEMM
// CHECK:      call $lr, gemm_f16_sup_ld128
// CHECK:      // nn.attention (a): K to f16
// CHECK-NOT:  keys 32..
// CHECK:      // nn.attention (a): S^T = K Q^T
// CHECK:      // nn.attention (a): softmax

// coef = "ld64": the GEMM's other supervisor.
// LD64:       // nn.linear (y): GEMM
// LD64-NEXT:  ld32 $m1, $m0, $mzero, 0
// LD64-NEXT:  brz $m1, .Lskip{{[0-9]+}}
// LD64-NEXT:  add $m0, $m0, 8
// LD64-NEXT:  call $lr, gemm_f16_sup_ld64

// k_chunks = [32, 32]: a GEMM per K chunk (init, then acc).
// CHUNKS:     // nn.linear (y) [K 0:32]: GEMM
// CHUNKS:     // nn.linear (y) [K 32:64]: GEMM

// a_operand = "padded": A copied into the scratch first.
// PADDED:     // nn.linear (y): A padding
// PADDED:     // nn.linear (y): GEMM

// key_chunk = 32, scores and output direct (with the softmax that fits it): K and V packed in three chunks.
// KEYS:       // nn.attention (a): keys 0..32: K to f16
// KEYS:       // nn.attention (a): keys 32..64: K to f16
// KEYS:       // nn.attention (a): keys 64..96: K to f16

// k_operand = "in_place" where K is not in f16 column panels (row-major f32 here): refused by name.
// KIN: python -m ipu.backend.lower: error: nn.attention (a): tile {{[0-9]+}}: kernel choice k_operand = 'in_place' needs f16 Q and K in column panels

builtin.module {
  func.func @block() {
    %x = nn.input "x" : tensor<96x64xf32>
    %w = nn.param "w" : tensor<64x64xf32>
    %wb = nn.param "wb" : tensor<64xf32>
    %y = nn.linear %x, %w, %wb : tensor<96x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<96x64xf32>
    %a = nn.attention %y, %y, %y heads=4 scale=0.125 : tensor<96x64xf32>, tensor<96x64xf32>, tensor<96x64xf32> -> tensor<96x64xf32>
    nn.output "y" %a : tensor<96x64xf32>
    func.return
  }
}
