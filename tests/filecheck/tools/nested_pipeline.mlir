// Nested pass managers as mlir-opt spells them: `func.func(...)` runs its passes on each function alone,
// `any(...)` on the module; the result is the flat pipeline's.

// RUN: ipu-opt %s --pass-pipeline='builtin.module(func.func(nn-canonicalize, cse), canonicalize)' | filecheck %s
// RUN: ipu-opt %s --pass-pipeline='func.func(nn-canonicalize)' | filecheck %s
// RUN: ipu-opt %s --pass-pipeline='builtin.module(any(nn-canonicalize))' | filecheck %s
// RUN: ipu-opt %s -p nn-canonicalize | filecheck %s
// RUN: ipu-opt %s --pass-pipeline='builtin.module(func.func(cse))' | filecheck %s --check-prefix=KEEP

// CHECK:      func.func @first() {
// CHECK-NEXT:   %x = nn.input "x" : tensor<4x8xf32>
// CHECK-NEXT:   nn.output "y" %x : tensor<4x8xf32>
// CHECK:      func.func @second() {
// CHECK-NEXT:   %x{{.*}} = nn.input "x" : tensor<2x2xf32>
// CHECK-NEXT:   nn.output "y" %x{{.*}} : tensor<2x2xf32>

// The functions stay in their order; a pass that does nothing leaves the identity reshape.
// KEEP:      func.func @first() {
// KEEP:        nn.reshape
// KEEP:      func.func @second() {

func.func @first() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "y" %y : tensor<4x8xf32>
  func.return
}

func.func @second() {
  %x = nn.input "x" : tensor<2x2xf32>
  %y = nn.transpose %x perm=[0, 1] : tensor<2x2xf32> -> tensor<2x2xf32>
  nn.output "y" %y : tensor<2x2xf32>
  func.return
}
