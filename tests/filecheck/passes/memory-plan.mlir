// memory-plan on a two-GEMM MLP lowered to the exchange level on a 4-tile, 256 KiB target: support reservations
// at fixed places (runtime state at the SRAM base, code and exchange tables in whole 16 KiB elements at the top
// of region 0, the host aperture at the host events), parameters resident and host-visible, the input live from
// event 0, the output until the last event, GEMM results interleaved (region r1, 16-byte aligned), per-class
// address tables where tile classes differ (here two: the input's spread home, 4 KB in pieces of at least 2 KiB,
// sits on tiles 0 and 1 only).

// RUN: ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=256 reserve-code-bytes=16384}' | filecheck %s
// RUN: ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=256 reserve-code-bytes=16384}' | ipu-opt | filecheck %s
// RUN: ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=256 reserve-code-bytes=0 exchange-table-bytes=40000 aperture-reuse=false gemm-interleaved=false}' | filecheck %s --check-prefix=OPTS
// The lowering's scratch: its bytes at the top of SRAM (384 KiB: end 0xac000), every buffer below it.
// RUN: ipu-opt %s -p 'tile-plan{tiles=4 sram_kib=384},exchange-lower{tiles=4 sram_kib=384},exchange-schedule,memory-plan{tiles=4 sram_kib=384 reserve-code-bytes=16384 reserve-scratch-bytes=30000}' | filecheck %s --check-prefix=SCRATCH

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

// CHECK-LABEL: func.func @mlp
// CHECK-NEXT:    memory.plan {tiles = 4 : i64, events = 7 : i64, host_events = [0 : i64, 6 : i64], sram = [311296 : i64, 524288 : i64, 573440 : i64], aperture = [327680 : i64, 360448 : i64], num_classes = 2 : i64, classes = dense<[[0], [0], [1], [1]]> : tensor<4x1xi32>, high = dense<{{\[\[[0-9]+\], \[[0-9]+\]\]}}> : tensor<2x1xi32>}
// CHECK-NEXT:    memory.reserve "runtime_state" {buffer = #memory.buffer<addr = 0x4c000, bytes = 1760, live = [0, 6], region = "r0", align = 8, resident>}
// CHECK-NEXT:    memory.reserve "host_descriptors" {buffer = #memory.buffer<addr = 0x4c6e0, bytes = 256, live = [0, 6], region = "r0", align = 8, resident>}
// CHECK-NEXT:    memory.reserve "code" {buffer = #memory.buffer<addr = 0x7c000, bytes = 16384, live = [0, 6], region = "r0", align = 16, resident>}
// CHECK-NEXT:    memory.reserve "exchange_tables" {buffer = #memory.buffer<addr = 0x78000, bytes = 16384, live = [0, 6], region = "r0", align = 16384, resident>}
// CHECK-NEXT:    memory.reserve "host_aperture" {buffer = #memory.buffer<addr = 0x50000, bytes = 32768, live = [0, 0], region = "r0", align = 8>}
// CHECK-NEXT:    memory.reserve "host_aperture" {buffer = #memory.buffer<addr = 0x50000, bytes = 32768, live = [6, 6], region = "r0", align = 8>}
// CHECK-NEXT:    %x = nn.input "x" {{.*}}memory.buffers = [#memory.buffer<addr = {{.*}}, bytes = dense<{{\[\[}}2048], [0]]> : tensor<2x1xi32>, live = [0, 1], region = "any", align = 8, host>]
// CHECK-NEXT:    %w1 = nn.param "fc1.weight" {{.*}}memory.buffers = [#memory.buffer<addr = {{.*}}, bytes = 8192, live = [0, 6], region = "any", align = 8, resident, host>]
// CHECK-NEXT:    %b1 = nn.param "fc1.bias" {{.*}}memory.buffers = [#memory.buffer<addr = {{.*}}, bytes = 128, live = [0, 6], region = "any", align = 8, resident, host>]
// CHECK-NEXT:    exchange.sync
// CHECK-NEXT:    %0 = exchange.phase %x {memory.buffers = [#memory.buffer<addr = dense<{{\[\[[0-9]+\], \[[0-9]+\]\]}}> : tensor<2x1xi32>, bytes = 4096, live = [1, 2], region = "any", align = 8>]
// CHECK-NEXT:    %h = nn.linear %0, %w1, %b1 {{.*}}memory.buffers = [#memory.buffer<addr = {{.*}}, bytes = 2048, live = [2, 3], region = "r1", align = 16>]
// CHECK-NEXT:    %g = nn.gelu %h {{.*}}memory.buffers = [#memory.buffer<addr = {{.*}}, bytes = 2048, live = [3, 4], region = "any", align = 8>]
// CHECK:         %y = nn.linear {{.*}}memory.buffers = [#memory.buffer<addr = {{.*}}, bytes = 1024, live = [5, 6], region = "r1", align = 16, host>]

// OPTS-NOT:      memory.reserve "code"
// OPTS:          memory.reserve "exchange_tables" {buffer = #memory.buffer<addr = 0x74000, bytes = 49152, live = [0, 6], region = "r0", align = 16384, resident>}
// OPTS-NEXT:     memory.reserve "host_aperture" {buffer = #memory.buffer<addr = 0x50000, bytes = 32768, live = [0, 6], region = "r0", align = 8>}
// OPTS-NOT:      memory.reserve
// OPTS:          %h = nn.linear {{.*}}region = "any", align = 8>]

// The plan's high-water mark does not count the reservation (0x88400 = the last GEMM result's end; the lowering's
// data starts there).
// SCRATCH:     memory.plan {{.*}}high = dense<{{\[\[[0-9]+\], \[}}558080]]> : tensor<2x1xi32>}
// SCRATCH:     memory.reserve "lowering_scratch" {buffer = #memory.buffer<addr = 0xa4ad0, bytes = 30000, live = [0, 6], region = "any"
// SCRATCH-NOT: addr = 0xa{{[4-9a-f][0-9a-f]{3}}},
