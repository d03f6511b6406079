// nn-fuse-sum-activation: a K split's f16 sum whose only reader is a tanh GELU becomes one nn.reduce_sum
// {activation = "gelu_tanh"}, the GELU's uses reading it. Not fused: an erf GELU, an f32 sum, a sum with a
// second reader, a sum that already has an activation. The fused op prints and parses back.

// RUN: ipu-opt %s -p nn-fuse-sum-activation | filecheck %s
// RUN: ipu-opt %s -p nn-fuse-sum-activation | ipu-opt | filecheck %s

func.func @fused(%p: tensor<3x35x32xf16>, %b: tensor<32xf16>) -> tensor<35x32xf8E4M3FNUZ> {
  %s = nn.reduce_sum %p, %b : tensor<3x35x32xf16>, tensor<32xf16> -> tensor<35x32xf16>
  %g = nn.gelu %s "tanh" : tensor<35x32xf16> -> tensor<35x32xf16>
  %c = nn.cast %g : tensor<35x32xf16> -> tensor<35x32xf8E4M3FNUZ>
  func.return %c : tensor<35x32xf8E4M3FNUZ>
}

// CHECK-LABEL: func.func @fused
// CHECK-NEXT:    %[[G:[^ ]+]] = nn.reduce_sum %p, %b {activation = "gelu_tanh"} : tensor<3x35x32xf16>, tensor<32xf16> -> tensor<35x32xf16>
// CHECK-NEXT:    %[[C:[^ ]+]] = nn.cast %[[G]] : tensor<35x32xf16> -> tensor<35x32xf8E4M3FNUZ>
// CHECK-NEXT:    func.return %[[C]]

func.func @kept(%p: tensor<2x8x16xf16>, %q: tensor<2x8x16xf32>) -> (tensor<8x16xf16>, tensor<8x16xf32>, tensor<8x16xf16>, tensor<8x16xf16>) {
  %s = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf16>
  %e = nn.gelu %s "none" : tensor<8x16xf16> -> tensor<8x16xf16>
  %t = nn.reduce_sum %q : tensor<2x8x16xf32> -> tensor<8x16xf32>
  %f = nn.gelu %t "tanh" : tensor<8x16xf32> -> tensor<8x16xf32>
  %u = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf16>
  %h = nn.gelu %u "tanh" : tensor<8x16xf16> -> tensor<8x16xf16>
  %v = nn.add %u, %h : tensor<8x16xf16>, tensor<8x16xf16> -> tensor<8x16xf16>
  %w = nn.reduce_sum %p {activation = "gelu_tanh"} : tensor<2x8x16xf16> -> tensor<8x16xf16>
  %k = nn.gelu %w "tanh" : tensor<8x16xf16> -> tensor<8x16xf16>
  func.return %e, %f, %v, %k : tensor<8x16xf16>, tensor<8x16xf32>, tensor<8x16xf16>, tensor<8x16xf16>
}

// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %s = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf16>
// CHECK-NEXT:    %e = nn.gelu %s "none"
// CHECK-NEXT:    %t = nn.reduce_sum %q : tensor<2x8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    %f = nn.gelu %t "tanh"
// CHECK-NEXT:    %u = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf16>
// CHECK-NEXT:    %h = nn.gelu %u "tanh"
// CHECK-NEXT:    %v = nn.add %u, %h
// CHECK-NEXT:    %w = nn.reduce_sum %p {activation = "gelu_tanh"}
// CHECK-NEXT:    %k = nn.gelu %w "tanh"
