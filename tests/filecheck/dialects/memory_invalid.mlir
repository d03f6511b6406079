// Verifier diagnostics of the memory dialect (attribute errors at the op that carries the attribute).

// RUN: ipu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: memory.reserve: code must be in region r0 (instruction fetch)
// expected-error @below {{memory.reserve: code must be in region r0 (instruction fetch)}}
memory.reserve "code" {buffer = #memory.buffer<addr = 0x80000, bytes = 16384, live = [0, 5], region = "r1", align = 16384, resident>}

// -----

// CHECK: #memory.buffer: addr 0x80004 is not aligned to 16
// expected-error @below {{#memory.buffer: addr 0x80004 is not aligned to 16}}
"test.op"() {memory.buffers = [#memory.buffer<addr = 0x80004, bytes = 16, live = [0, 1], region = "r1", align = 16>]} : () -> ()

// -----

// CHECK: #memory.buffer: live [3, 1] must satisfy 0 <= first <= last
// expected-error @below {{#memory.buffer: live [3, 1] must satisfy 0 <= first <= last}}
"test.op"() {memory.buffers = [#memory.buffer<addr = 0x80000, bytes = 16, live = [3, 1], region = "any", align = 16>]} : () -> ()

// -----

// CHECK: memory.plan: classes table has shape [3, 1], expected [4, 1]
// expected-error @below {{memory.plan: classes table has shape [3, 1], expected [4, 1]}}
memory.plan {tiles = 4, events = 6, host_events = [0, 5], sram = [311296, 524288, 573440], aperture = [327680, 360448], num_classes = 2, classes = dense<[[0], [1], [1]]> : tensor<3x1xi32>, high = 400000}

// -----

// A placement past the SRAM the plan names (issue 24): refused, not lowered into another tile's memory.
// CHECK: 'test.op' op memory.buffers[0]: tile class 0: [0x8a000, 0x8d000) is outside the SRAM [0x4c000, 0x8c000) of the memory plan
func.func @f() {
  memory.plan {tiles = 4, events = 6, host_events = [0, 5], sram = [311296, 524288, 573440], aperture = [327680, 360448], num_classes = 1, classes = dense<[[0], [0], [0], [0]]> : tensor<4x1xi32>, high = 400000}
  // expected-error @below {{'test.op' op memory.buffers[0]: tile class 0: [0x8a000, 0x8d000) is outside the SRAM [0x4c000, 0x8c000) of the memory plan}}
  %w = "test.op"() {memory.buffers = [#memory.buffer<addr = 0x8a000, bytes = 4096, live = [0, 5], region = "any", align = 16, seq = 3, stride = 4096>]} : () -> tensor<3x32x32xf32>
  func.return
}
