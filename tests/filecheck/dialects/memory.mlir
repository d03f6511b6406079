// Round trip of the memory dialect: plan, reservations, buffer placements (uniform and per-class tables).

// RUN: ipu-opt %s --split-input-file | filecheck %s
// RUN: %roundtrip | filecheck %s
// RUN: %roundtrip-generic | filecheck %s

func.func @placed() {
  memory.plan {tiles = 4, events = 6, host_events = [0, 5], sram = [311296, 524288, 573440], aperture = [327680, 360448], num_classes = 2, classes = dense<[[0], [1], [1], [0]]> : tensor<4x1xi32>, high = dense<[[400000], [410000]]> : tensor<2x1xi32>}
  memory.reserve "runtime_state" {buffer = #memory.buffer<addr = 0x4c000, bytes = 1760, live = [0, 5], region = "r0", align = 8, resident>}
  memory.reserve "code" {buffer = #memory.buffer<addr = 0x58000, bytes = 16384, live = [0, 5], region = "r0", align = 16384, resident>}
  memory.reserve "host_aperture" {buffer = #memory.buffer<addr = 0x50000, bytes = 32768, live = [0, 5], region = "r0", align = 8>}
  %w = "test.op"() {memory.buffers = [#memory.buffer<addr = 0x70000, bytes = 3072, live = [0, 5], region = "any", align = 16, seq = 27, stride = 3072, resident, host>]} : () -> tensor<27x32x24xf32>
  %x = "test.op"() {memory.buffers = [#memory.buffer<addr = dense<[[524288], [-1]]> : tensor<2x1xi32>, bytes = dense<[[4096], [0]]> : tensor<2x1xi32>, live = [1, 3], region = "r1", align = 16>]} : () -> tensor<16x64xf32>
  func.return
}

// CHECK-LABEL: func.func @placed
// CHECK-NEXT:    memory.plan {tiles = 4 : i64, events = 6 : i64, host_events = [0 : i64, 5 : i64]
// CHECK-SAME:      classes = dense<{{\[}}[0], [1], [1], [0]]> : tensor<4x1xi32>
// CHECK-NEXT:    memory.reserve "runtime_state" {buffer = #memory.buffer<addr = 0x4c000, bytes = 1760, live = [0, 5], region = "r0", align = 8, resident>}
// CHECK-NEXT:    memory.reserve "code"
// CHECK-NEXT:    memory.reserve "host_aperture" {buffer = #memory.buffer<addr = 0x50000, bytes = 32768, live = [0, 5], region = "r0", align = 8>}
// CHECK-NEXT:    "test.op"() {memory.buffers = [#memory.buffer<addr = 0x70000, bytes = 3072, live = [0, 5], region = "any", align = 16, seq = 27, stride = 3072, resident, host>]}
// CHECK-NEXT:    "test.op"() {memory.buffers = [#memory.buffer<addr = dense<{{\[}}[524288], [-1]]> : tensor<2x1xi32>, bytes = dense<{{\[}}[4096], [0]]> : tensor<2x1xi32>, live = [1, 3], region = "r1", align = 16>]}
