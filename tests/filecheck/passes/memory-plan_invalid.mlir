// memory-plan diagnostics: a model that does not fit (which tile, which event, which request, what is live, the
// largest hole), options that cannot work, layouts beyond the target.

// RUN: not ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=64 reserve-code-bytes=0}' 2>&1 | filecheck %s --check-prefix=OOM
// RUN: not ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=256 reserve-code-bytes=1000000}' 2>&1 | filecheck %s --check-prefix=CODE
// RUN: not ipu-opt %s -p 'memory-plan{reserve-code-bytes=-2}' 2>&1 | filecheck %s --check-prefix=NEG
// RUN: not ipu-opt %s -p 'memory-plan{exchange-table-bytes=-5}' 2>&1 | filecheck %s --check-prefix=XNEG
// RUN: not ipu-opt %s -p 'memory-plan{tiles=4 sram_kib=20}' 2>&1 | filecheck %s --check-prefix=SRAM
// RUN: not ipu-opt %s -p 'memory-plan{colour=red}' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},memory-plan{tiles=2 sram_kib=256}' 2>&1 | filecheck %s --check-prefix=TILES
// RUN: not ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},memory-plan{tiles=4 sram_kib=256},memory-plan{tiles=4 sram_kib=256}' 2>&1 | filecheck %s --check-prefix=TWICE

func.func @mlp() {
  %x = nn.input "x" : tensor<16x64xf32>
  %w1 = nn.param "fc1.weight" : tensor<128x64xf32>
  %b1 = nn.param "fc1.bias" : tensor<128xf32>
  %h = nn.linear %x, %w1, %b1 : tensor<16x64xf32>, tensor<128x64xf32>, tensor<128xf32> -> tensor<16x128xf32>
  %g = nn.gelu %h "tanh" : tensor<16x128xf32> -> tensor<16x128xf32>
  %w2 = nn.param "fc2.weight" : tensor<64x128xf32>
  %b2 = nn.param "fc2.bias" : tensor<64xf32>
  %y = nn.linear %g, %w2, %b2 : tensor<16x128xf32>, tensor<64x128xf32>, tensor<64xf32> -> tensor<16x64xf32>
  nn.output "y" %y : tensor<16x64xf32>
  func.return
}

// OOM: ipu-opt: error: memory-plan: @mlp: tile 0 (and 1 other tiles of its class), event 0 (host input): cannot place '%w2' of nn.param %w2 (8192 B, align 8, any, live [0, 6], resident): no hole fits; live: exchange_tables (support, 16384 B at 0x58000), %w1 (nn.param %w1, 8192 B at 0x4e000), runtime_state (support, 1760 B at 0x4c000), host_descriptors (support, 256 B at 0x4c6e0) (26592 B); usable free in [0x4c000, 0x5c000): 6176 B, largest hole 6176 B at 0x4c7e0
// OOM-SAME: ; the region is 2016 B short. What would help: fewer resident parameter bytes per tile
// OOM-NOT: Traceback
// CODE: ipu-opt: error: memory-plan: code (1000000 B) and exchange tables (64 B) need 1015808 B of whole 16 KiB elements in region 0 above 0x58000, the target has 163840 B there
// NEG: ipu-opt: error: bad pass pipeline: memory-plan: option 'reserve_code_bytes' must be at least -1, got -2
// XNEG: ipu-opt: error: bad pass pipeline: memory-plan: option 'exchange_table_bytes' must be at least -1
// SRAM: ipu-opt: error: memory-plan: sram_kib must be a multiple of 16 in [48, 624], got 20
// UNKNOWN: ipu-opt: error: bad pass pipeline: Provided arguments ["colour"] not found
// TILES: ipu-opt: error: memory-plan: nn.param %w1: layout of %w1 names tile 3, the target has 2
// TWICE: ipu-opt: error: memory-plan: @mlp already has a memory.plan
// RUN: not ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=256 reserve-scratch-bytes=-2}' 2>&1 | filecheck %s --check-prefix=SNEG
// SNEG: ipu-opt: error: bad pass pipeline: memory-plan: option 'reserve_scratch_bytes' must be at least -1, got -2
