// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=16 sram_kib=624}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=16 sram_kib=624},kernel-select{tiles=16 overwrite=true max_key_chunk=48}' | filecheck %s --check-prefix=CHUNK
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=16 sram_kib=624}' | sed 's/rows = "layernorm"/rows = "layernorm_split"/' | ipu-opt -p 'kernel-select{tiles=16}' | filecheck %s --check-prefix=KEPT

// kernel-select (the last pass of nn-to-exchange-pipeline) records how the backend computes each op, from the
// kernels' estimates and fit checks, in the op's `kernel` dictionary.

// 96 rows of 64 on 16 tiles: 6 rows per tile, too short for the split form's gain.
// CHECK: %n = nn.layer_norm {{.*}}kernel = {rows = "layernorm"}
// One K chunk of the 64 columns; the weight panels in interleaved memory; A read where the exchange puts it.
// CHECK: %y = nn.linear {{.*}}kernel = {a_operand = "in_place", coef = "ld128", k_chunks = array<i64: 64>}
// Query blocks of 24 rows: S^T = K Q^T and O^T = V^T P^T with 32 query columns (two weight blocks); all 96 keys
// in one chunk (key_chunk for the K / V packing steps, score_chunk for S^T's K rows); the few rows per tile of a
// block's scores: every row split across the six workers.
// CHECK: %a = nn.attention {{.*}}kernel = {k_operand = "rows", key_chunk = 96 : i64, pv = "transposed", q_scale = "program", score_chunk = 96 : i64, scores = "transposed", softmax = "softmax_split"}
// CHECK: %s = nn.softmax {{.*}}kernel = {rows = "softmax"}
// Four rows of 512 on 16 tiles: one row per tile, split across the workers.
// CHECK: %p = nn.softmax {{.*}}kernel = {rows = "softmax_split"}

// A second run with options replaces the recorded choices (overwrite=true): keys in chunks of 48, and the softmax
// that fits them (the split form's partials live where one chunk's K^T panels do).
// CHUNK: %a = nn.attention {{.*}}kernel = {k_operand = "rows", key_chunk = 48 : i64, pv = "transposed", q_scale = "program", score_chunk = 48 : i64, scores = "transposed", softmax = "softmax"}

// Without overwrite a second run keeps what a person wrote into the IR.
// KEPT: %n = nn.layer_norm {{.*}}kernel = {rows = "layernorm_split"}

builtin.module {
  func.func @block() {
    %x = nn.input "x" : tensor<96x64xf32>
    %g = nn.param "g" : tensor<64xf32>
    %b = nn.param "b" : tensor<64xf32>
    %w = nn.param "w" : tensor<64x64xf32>
    %wb = nn.param "wb" : tensor<64xf32>
    %r = nn.input "r" : tensor<4x512xf32>
    %n = nn.layer_norm %x, %g, %b eps=1.0e-06 : tensor<96x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<96x64xf32>
    %y = nn.linear %n, %w, %wb : tensor<96x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<96x64xf32>
    %a = nn.attention %y, %y, %y heads=4 scale=0.125 : tensor<96x64xf32>, tensor<96x64xf32>, tensor<96x64xf32> -> tensor<96x64xf32>
    %s = nn.softmax %a axis=-1 : tensor<96x64xf32> -> tensor<96x64xf32>
    %p = nn.softmax %r axis=-1 : tensor<4x512xf32> -> tensor<4x512xf32>
    nn.output "y" %s : tensor<96x64xf32>
    nn.output "p" %p : tensor<4x512xf32>
    func.return
  }
}
