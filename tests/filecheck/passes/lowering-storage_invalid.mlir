// RUN: not ipu-opt %s -p 'lowering-storage{tiles=4 sram_kib=100}' 2>&1 | filecheck %s --check-prefix=SRAM
// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4}' -o %t.stored.mlir
// RUN: sed 's/tables = [0-9]* : i64/tables = -5 : i64/' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=NEG
// RUN: sed 's/, tables = [0-9]* : i64//' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=KEYS
// RUN: sed 's/scratch = [0-9]* : i64/scratch = 700000 : i64/' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=BIG
// RUN: sed 's/lowering.scratch = array<i64: [0-9, ]*>/lowering.scratch = array<i64: 1, 2>/' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=SCR
// RUN: sed 's/lowering.scratch = array<i64: [0-9]*,/lowering.scratch = array<i64: 40000,/' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=SCRBIG
// RUN: not ipu-opt %s -p 'memory-plan{tiles=4 reserve-scratch-bytes=-2}' 2>&1 | filecheck %s --check-prefix=OPT
// RUN: sed -E 's/lowering.data = array<i64: [0-9]+, [0-9]+>/lowering.data = array<i64: 7>/' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=DATA
// RUN: sed -E 's/lowering.data = array<i64: [0-9]+,/lowering.data = array<i64: 20000,/' %t.stored.mlir | not ipu-opt -p 'memory-plan{tiles=4}' 2>&1 | filecheck %s --check-prefix=DATABIG

// SRAM: ipu-opt: error: lowering-storage: sram_kib must be a multiple of 16
// NEG: ipu-opt: error: @rows: lowering.storage tables = -5 : i64: a byte count >= 0 expected
// KEYS: ipu-opt: error: @rows: 'lowering.storage' must be a dictionary of ['code', 'tables', 'scratch'] (bytes)
// BIG: ipu-opt: error: memory-plan: the lowering's scratch (700000 B) exceeds the tile's SRAM
// SCR: ipu-opt: error: nn.softmax: 'lowering.scratch' must be array<i64: C, A, AUX> (bytes >= 0), got array<i64: 1, 2>
// SCRBIG: ipu-opt: error: memory-plan: nn.softmax{{.*}}: lowering.scratch C = 40000 B exceeds the 32768-B scratch element
// DATA: ipu-opt: error: nn.softmax: 'lowering.data' must be array<i64: FRAMES, DATA> (bytes >= 0), got array<i64: 7>
// An op's own frames edited beyond the span lowering.storage sized (and the element it rounds up to):
// DATABIG: ipu-opt: error: memory-plan: @rows: the ops' own frames and tables (lowering.data: 20000 B) exceed the exchange_tables span of {{[0-9]+}} B (lowering.storage); run lowering-storage again after editing either
// OPT: ipu-opt: error: bad pass pipeline: memory-plan: option 'reserve_scratch_bytes' must be at least -1, got -2

builtin.module {
  func.func @rows() {
    %x = nn.input "x" : tensor<8x64xf32>
    %s = nn.softmax %x axis=-1 : tensor<8x64xf32> -> tensor<8x64xf32>
    nn.output "y" %s : tensor<8x64xf32>
    func.return
  }
}
