// Identity data movement folds away, chains compose, dead ops go (model inputs stay).

// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-canonicalize)' | filecheck %s

func.func @folds() {
  %x = nn.input "x" : tensor<4x8xf32>
  %unused = nn.input "unused" : tensor<2xf32>
  %a = nn.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %b = nn.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %c = nn.reshape %b : tensor<32xf32> -> tensor<8x4xf32>
  %d = nn.transpose %c perm=[1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %e = nn.transpose %d perm=[1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %f = nn.transpose %e perm=[0, 1] : tensor<8x4xf32> -> tensor<8x4xf32>
  %g = nn.cast %f : tensor<8x4xf32> -> tensor<8x4xf32>
  %h = nn.slice %g offsets=[0, 0] : tensor<8x4xf32> -> tensor<8x4xf32>
  %i = nn.scale %h by 1.000000e+00 : tensor<8x4xf32> -> tensor<8x4xf32>
  %j = nn.slice %i offsets=[1, 0] : tensor<8x4xf32> -> tensor<7x4xf32>
  %k = nn.scale %j by 2.000000e+00 : tensor<7x4xf32> -> tensor<7x4xf32>
  %dead = nn.param "dead" : tensor<4xf32>
  nn.output "y" %k : tensor<7x4xf32>
  func.return
}

// CHECK-LABEL: func.func @folds()
// CHECK-NEXT:    %x = nn.input "x" : tensor<4x8xf32>
// CHECK-NEXT:    %unused = nn.input "unused" : tensor<2xf32>
// CHECK-NEXT:    %[[R:[^ ]+]] = nn.reshape %x : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK-NEXT:    %j = nn.slice %[[R]] offsets=[1, 0] : tensor<8x4xf32> -> tensor<7x4xf32>
// CHECK-NEXT:    %k = nn.scale %j by 2.000000e+00
// CHECK-NEXT:    nn.output "y" %k
// CHECK-NEXT:    func.return

// -----

func.func @compose() {
  %x = nn.input "x" : tensor<2x3x4xf32>
  %t1 = nn.transpose %x perm=[1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %t2 = nn.transpose %t1 perm=[2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
  %t3 = nn.transpose %t2 perm=[1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %t4 = nn.transpose %t3 perm=[1, 0, 2] : tensor<3x4x2xf32> -> tensor<4x3x2xf32>
  %r1 = nn.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %r2 = nn.reshape %r1 : tensor<6x4xf32> -> tensor<2x3x4xf32>
  %w = nn.param "w" : tensor<8x4xf32>
  %w8 = nn.cast %w {scale = -4 : i64} : tensor<8x4xf32> -> tensor<8x4xf8E4M3FNUZ>
  %same = nn.cast %w8 {scale = -4 : i64} : tensor<8x4xf8E4M3FNUZ> -> tensor<8x4xf8E4M3FNUZ>
  %w16 = nn.cast %w : tensor<8x4xf32> -> tensor<8x4xf16>
  nn.output "t" %t4 : tensor<4x3x2xf32>
  nn.output "r" %r2 : tensor<2x3x4xf32>
  nn.output "w8" %same : tensor<8x4xf8E4M3FNUZ>
  nn.output "w16" %w16 : tensor<8x4xf16>
  func.return
}

// t1 then t2 is the identity; t3 then t4 composes to x[perm = [2, 1, 0]] (t3[i] = x[[1,2,0][i]], t4 = t3[[1,0,2]]).
// CHECK-LABEL: func.func @compose()
// CHECK-NEXT:    %x = nn.input "x" : tensor<2x3x4xf32>
// CHECK-NEXT:    %[[T:[^ ]+]] = nn.transpose %x perm=[2, 1, 0] : tensor<2x3x4xf32> -> tensor<4x3x2xf32>
// CHECK-NEXT:    %w = nn.param "w" : tensor<8x4xf32>
// CHECK-NEXT:    %w8 = nn.cast %w {scale = -4 : i64} : tensor<8x4xf32> -> tensor<8x4xf8E4M3FNUZ>
// CHECK-NEXT:    %w16 = nn.cast %w : tensor<8x4xf32> -> tensor<8x4xf16>
// CHECK-NEXT:    nn.output "t" %[[T]] : tensor<4x3x2xf32>
// CHECK-NEXT:    nn.output "r" %x : tensor<2x3x4xf32>
// CHECK-NEXT:    nn.output "w8" %w8 : tensor<8x4xf8E4M3FNUZ>
// CHECK-NEXT:    nn.output "w16" %w16

// -----

// Inside nn.repeat bodies too; the loop itself is kept.
func.func @in_repeat() {
  %h = nn.input "h" : tensor<4x8xf32>
  %s = nn.param "encoder.layers.*.w" : tensor<2x8xf32>
  %out = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%s : tensor<2x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %w: tensor<8xf32>):
    %r = nn.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
    %y = nn.add %r, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %z = nn.scale %y by 1.000000e+00 : tensor<4x8xf32> -> tensor<4x8xf32>
    nn.yield %z : tensor<4x8xf32>
  }
  nn.output "out" %out : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @in_repeat()
// CHECK:         ^{{.*}}(%x: tensor<4x8xf32>, %w: tensor<8xf32>):
// CHECK-NEXT:      %y = nn.add %x, %w
// CHECK-NEXT:      nn.yield %y
