// RUN: ipu-opt %s --pass-pipeline='builtin.module(ipu-compile-pipeline{tiles=4})' -o %t.named.mlir
// RUN: filecheck %s --input-file %t.named.mlir
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 scratch=false}' | filecheck %s --check-prefix=NOSCRATCH
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 sram_kib=256}' | filecheck %s --check-prefix=SMALL
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 stop_after=nn-to-exchange-pipeline}' | filecheck %s --check-prefix=STOP
// The named pass is the pipeline it spells out (`pipeline_spec`; update this line when that changes): the same IR.
// RUN: ipu-opt %s -p 'nn-fold-probe-attention{tiles=4},nn-split-mlp,nn-outline-repeat,nn-quantize-weights{format=f143 scale=-4 activations=f16 keep_f16=patch_embedding,q_proj,k_proj,head attention_f16=true},nn-split-attention-keys{tiles=4},nn-hoist-stacked,nn-split-k{tiles=4},nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624},memory-plan{tiles=4 sram_kib=624}' -o %t.spelled.mlir
// RUN: diff %t.named.mlir %t.spelled.mlir

// nn IR -> placed IR in one pass: the default precision policy (FP8 weights), tile plans, one exchange phase
// and memory placement with the lowering's scratch and exchange-table reservations, sized by lowering-storage.

func.func @mlp() {
  %x = nn.input "x" : tensor<24x64xf32>
  %w = nn.param "w" : tensor<32x64xf32>
  %b = nn.param "b" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<24x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<24x32xf32>
  %g = nn.gelu %y "tanh" : tensor<24x32xf32> -> tensor<24x32xf32>
  nn.output "g" %g : tensor<24x32xf32>
  func.return
}

// stop_after: the IR with the kernel choices, before lowering-storage and memory-plan (to edit them).
// STOP-NOT:   lowering.storage
// STOP:       nn.linear {{.*}}kernel = {a_operand =
// STOP-NOT:   memory.plan

// CHECK:      builtin.module attributes {exchange.compute_cycles = {{[0-9]+}} : i64, exchange.exchange_cycles = {{[0-9]+}} : i64, exchange.sync_cycles = 150 : i64}
// CHECK:      memory.plan {tiles = 4 : i64, {{.*}}sram = [311296 : i64, 524288 : i64, 950272 : i64]
// CHECK:      memory.reserve "lowering_scratch"
// CHECK:      memory.reserve "exchange_tables"
// CHECK:      exchange.sync "internal"
// CHECK-NEXT: exchange.phase
// CHECK:      nn.linear {{.*}}tile.plan = #tile.gemm<{{.*}}precision = "fp8"
// CHECK-SAME: memory.buffers
// CHECK:      nn.gelu {{.*}}tile.plan = #tile.map<kind = "elementwise"

// NOSCRATCH:     memory.plan {tiles = 4 : i64
// NOSCRATCH-NOT: memory.reserve "lowering_scratch"
// NOSCRATCH:     nn.linear

// 256 KiB: no room for the scratch reservation in region 1 (pipeline_spec keeps it only with room for two).
// SMALL:     memory.plan {tiles = 4 : i64, {{.*}}sram = [311296 : i64, 524288 : i64, 573440 : i64]
// SMALL-NOT: memory.reserve "lowering_scratch"
