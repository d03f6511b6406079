// tile-fuse-sum-cast: after tile-plan, a K split's f16 sum (here with its GELU) whose only reader is an FP8 cast in
// the same layout becomes one nn.reduce_sum with the cast's FP8 result type, scale and layout (result blocks of
// [8, 16]: whole pairs of units). Kept: a sum with a second reader; everything with enable=false. The fused op
// prints and parses back.

// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=16 sram_kib=624},tile-fuse-sum-cast' | filecheck %s
// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=16 sram_kib=624},tile-fuse-sum-cast' | ipu-opt --split-input-file | filecheck %s
// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=16 sram_kib=624},tile-fuse-sum-cast{enable=false}' | filecheck %s --check-prefix=OFF

func.func @fused() {
  %x = nn.input "x" : tensor<32x256xf16>
  %w = nn.param "w" : tensor<64x256xf16>
  %b = nn.param "b" : tensor<64xf32>
  %p = nn.linear_partials %x, %w k_chunk=64 : tensor<32x256xf16>, tensor<64x256xf16> -> tensor<4x32x64xf16>
  %s = nn.reduce_sum %p, %b {activation = "gelu_tanh"} : tensor<4x32x64xf16>, tensor<64xf32> -> tensor<32x64xf16>
  %c = nn.cast %s {scale = -2 : i64} : tensor<32x64xf16> -> tensor<32x64xf8E4M3FNUZ>
  nn.output "c" %c : tensor<32x64xf8E4M3FNUZ>
  func.return
}

// CHECK-LABEL: func.func @fused
// CHECK-NOT:     nn.cast
// CHECK:         %c = nn.reduce_sum %{{[^ ]+}}, %{{[^ ]+}} {tile.plan = #tile.map<kind = "reduce", {{.*}}block = [8, 16]{{.*}}dtype = f8E4M3FNUZ, scale = -2>, activation = "gelu_tanh", scale = -2 : i64} : tensor<4x32x64xf16>, tensor<64xf32> -> tensor<32x64xf8E4M3FNUZ>
// CHECK-NEXT:    nn.output "c" %c

// OFF-LABEL: func.func @fused
// OFF:         %s = nn.reduce_sum
// OFF:         %c = nn.cast %s

// -----

func.func @second_reader() {
  %x = nn.input "x" : tensor<32x256xf16>
  %w = nn.param "w" : tensor<64x256xf16>
  %p = nn.linear_partials %x, %w k_chunk=64 : tensor<32x256xf16>, tensor<64x256xf16> -> tensor<4x32x64xf16>
  %s = nn.reduce_sum %p : tensor<4x32x64xf16> -> tensor<32x64xf16>
  %c = nn.cast %s : tensor<32x64xf16> -> tensor<32x64xf8E4M3FNUZ>
  nn.output "c" %c : tensor<32x64xf8E4M3FNUZ>
  nn.output "s" %s : tensor<32x64xf16>
  func.return
}

// CHECK-LABEL: func.func @second_reader
// CHECK:         %s = nn.reduce_sum
// CHECK:         %c = nn.cast %s
