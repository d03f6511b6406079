// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624},memory-plan{tiles=4 sram_kib=624}' | filecheck %s --check-prefix=PLAN
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624}' | sed 's/scratch = [0-9]* : i64/scratch = 200000 : i64/' | ipu-opt -p 'memory-plan{tiles=4 sram_kib=624}' | filecheck %s --check-prefix=EDITED
// RUN: ipu-opt %s -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=4 sram_kib=624},lowering-storage{tiles=4 sram_kib=624}' | sed -E 's/tables = [0-9]+ : i64/tables = 4000 : i64/; s/lowering.data = array<i64: 656, 32>/lowering.data = array<i64: 3000, 32>/' | ipu-opt -p 'memory-plan{tiles=4 sram_kib=624}' | filecheck %s --check-prefix=FRAMES

// lowering-storage measures the asm lowering's own storage of the function (code, frames and tables, kernel-format
// data, the kernel scratch elements) by lowering a placed copy, and records it; memory-plan reserves exactly that.
// CHECK: func.func @lin() attributes {{{.*}}lowering.storage = {code = {{[0-9]+}} : i64, tables = {{[0-9]+}} : i64, scratch = {{[0-9]+}} : i64, elements = 98304 : i64}}
// Each op that uses the scratch elements records the bytes of C, A and aux it uses: the GEMM's C block
// [mpad][npad] f16 and its weight panels (A is read in place here).
// Each op that keeps data of its own records its bytes: kernel frames and tables (the exchange phase's copy and
// table rows; the GEMM's frames), and kernel data (the GEMM's f16 bias in the kernel's format).
// CHECK: exchange.phase{{.*}}lowering.data = array<i64: 228, 0>
// CHECK: nn.linear{{.*}}lowering.data = array<i64: 656, 32>, lowering.scratch = array<i64: 17152, 0, 2048>

// Code (at the top, as measured) and tables (below it) share whole 16 KiB elements of region 0; the small data
// (the f16 bias) below the three 32 KiB scratch elements at the top of SRAM, for the whole program; the scratch
// elements reserved per op, at its event only, by the bytes it uses (the GEMM at event 4), and whole at the host
// events (where the package's image initialises them).
// PLAN-DAG: memory.reserve "code" {buffer = #memory.buffer<addr = {{0x7[0-9a-f]+}}, bytes = {{[0-9]+}}, live = [0, 5], region = "r0", align = 16, resident>}
// Each op's own frames and data are resident buffers on the op, packed in event order at the end of the spans
// lowering.storage sized; the reservations keep the data no op owns (the zero constant, at the tables' start).
// PLAN-DAG: exchange.phase{{.*}}memory.lowering_frames = #memory.buffer<addr = 0x7d408, bytes = 228, live = [0, 5], region = "r0", align = 8, resident>
// PLAN-DAG: nn.linear{{.*}}memory.lowering_frames = #memory.buffer<addr = 0x7d4f0, bytes = 656, live = [0, 5], region = "r0", align = 8, resident>, memory.lowering_data = #memory.buffer<addr = 0xcffe0, bytes = 32, live = [0, 5], region = "any", align = 16, resident>
// PLAN-DAG: memory.reserve "lowering_scratch" {buffer = #memory.buffer<addr = 0xcffe0, bytes = 0, live = [0, 5], region = "any", align = 8, resident>}
// PLAN-DAG: memory.reserve "exchange_tables" {buffer = #memory.buffer<addr = 0x7c000, bytes = 5128, live = [0, 5], region = "r0", align = 8, resident>}
// PLAN-DAG: memory.reserve "kernel_scratch" {buffer = #memory.buffer<addr = 0xe0000, bytes = 17152, live = [4, 4], region = "any", align = 16>}
// PLAN-DAG: memory.reserve "kernel_scratch" {buffer = #memory.buffer<addr = 0xd0000, bytes = 2048, live = [4, 4], region = "any", align = 16>}
// PLAN-DAG: memory.reserve "kernel_scratch_upload" {buffer = #memory.buffer<addr = 0xd0000, bytes = 98304, live = [0, 0],
// PLAN-DAG: memory.reserve "kernel_scratch_upload" {buffer = #memory.buffer<addr = 0xd0000, bytes = 98304, live = [5, 5],

// A person may edit the numbers: memory-plan reserves what the attribute says.
// EDITED: memory.reserve "lowering_scratch" {buffer = #memory.buffer<addr = 0x9f2c0, bytes = 199968,
// An op's own part edited: the GEMM's frames grow to 3000 B (tables 4000 B; code and tables still fill one 16 KiB
// element, 6016 B below the code): the op buffers move down, the reservation of the unowned data shrinks.
// FRAMES: memory.reserve "exchange_tables" {buffer = #memory.buffer<addr = 0x7c000, bytes = 2784,
// FRAMES: memory.lowering_frames = #memory.buffer<addr = 0x7cae0, bytes = 228,
// FRAMES: memory.lowering_frames = #memory.buffer<addr = 0x7cbc8, bytes = 3000,

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
