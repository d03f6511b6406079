// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624},memory-plan{tiles=4 sram_kib=624}' | filecheck %s --check-prefix=PLAN
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624}' | sed 's/scratch = [0-9]* : i64/scratch = 200000 : i64/' | ipu-opt -p 'memory-plan{tiles=4 sram_kib=624}' | filecheck %s --check-prefix=EDITED

// lowering-storage measures the asm lowering's own storage of the function (code, frames and tables, scratch and
// kernel-format data) by lowering a placed copy, and records it; memory-plan reserves exactly that.
// CHECK: func.func @lin() attributes {{{.*}}lowering.storage = {code = {{[0-9]+}} : i64, tables = {{[0-9]+}} : i64, scratch = {{[0-9]+}} : i64}}

// Code (at the top, as measured) and tables (below it) share whole 16 KiB elements of region 0; the scratch (three 32 KiB elements for the GEMM's C, A and
// weight staging, and the f16 bias) at the top of SRAM, 16-byte aligned.
// PLAN-DAG: memory.reserve "code" {buffer = #memory.buffer<addr = 0x7c180, bytes = 16000, live = [0, 5], region = "r0", align = 16, resident>}
// PLAN-DAG: memory.reserve "exchange_tables" {buffer = #memory.buffer<addr = 0x78000, bytes = 16768, live = [0, 5], region = "r0", align = 16384, resident>}
// PLAN-DAG: memory.reserve "lowering_scratch" {buffer = #memory.buffer<addr = 0xcffe0, bytes = 98336, live = [0, 5], region = "any", align = 8, resident>}

// A person may edit the numbers: memory-plan reserves what the attribute says.
// EDITED: memory.reserve "lowering_scratch" {buffer = #memory.buffer<addr = 0xb72c0, bytes = 200000,

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
