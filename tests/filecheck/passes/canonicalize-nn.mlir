// RUN: ipu-opt %s --pass-pipeline='builtin.module(canonicalize)' | filecheck %s

// xDSL's generic canonicalize applies the nn folds (through the ops' canonicalization trait) and keeps inputs.

func.func @folds() {
  %x = nn.input "x" : tensor<4x8xf32>
  %unused = nn.input "unused" : tensor<2xf32>
  %a = nn.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = nn.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %c = nn.reshape %b : tensor<32xf32> -> tensor<8x4xf32>
  %t = nn.transpose %c perm=[1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %u = nn.transpose %t perm=[1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %s = nn.scale %u by 1.0 : tensor<8x4xf32> -> tensor<8x4xf32>
  %l = nn.slice %s offsets=[0, 0] : tensor<8x4xf32> -> tensor<8x4xf32>
  nn.output "y" %l : tensor<8x4xf32>
  func.return
}

// CHECK-LABEL: func.func @folds() {
// CHECK-NEXT:    %x = nn.input "x" : tensor<4x8xf32>
// CHECK-NEXT:    %unused = nn.input "unused" : tensor<2xf32>
// CHECK-NEXT:    %c = nn.reshape %x : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK-NEXT:    nn.output "y" %c : tensor<8x4xf32>
// CHECK-NEXT:    func.return
