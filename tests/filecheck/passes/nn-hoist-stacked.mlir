// Casts and slices of a repeat's stacked slices move out of the body onto the stacked operands; the f32 stacked
// operands they came from are dropped when nothing else in the body uses them.

// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-hoist-stacked)' | filecheck %s

func.func @cast_and_slice() {
  %h = nn.input "h" : tensor<4x8xf32>
  %w = nn.param "encoder.layers.*.q.weight" : tensor<2x8x8xf32>
  %b = nn.param "encoder.layers.*.q.bias" : tensor<2x8xf32>
  %w1 = nn.param "encoder.layers.*.fc1.weight" : tensor<2x16x8xf32>
  %r = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%w, %b, %w1 : tensor<2x8x8xf32>, tensor<2x8xf32>, tensor<2x16x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %wi: tensor<8x8xf32>, %bi: tensor<8xf32>, %w1i: tensor<16x8xf32>):
    %c = nn.cast %wi {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
    %x16 = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
    %y = nn.linear %x16, %c, %bi : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ>, tensor<8xf32> -> tensor<4x8xf32>
    %s = nn.slice %w1i offsets=[8, 0] : tensor<16x8xf32> -> tensor<8x8xf32>
    %s16 = nn.cast %s : tensor<8x8xf32> -> tensor<8x8xf16>
    %z = nn.linear %x16, %s16 : tensor<4x8xf16>, tensor<8x8xf16> -> tensor<4x8xf32>
    %o = nn.add %y, %z : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    nn.yield %o : tensor<4x8xf32>
  }
  nn.output "out" %r : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @cast_and_slice
// CHECK:       %[[W:.*]] = nn.param "encoder.layers.*.q.weight" : tensor<2x8x8xf32>
// CHECK:       %[[B:.*]] = nn.param "encoder.layers.*.q.bias" : tensor<2x8xf32>
// CHECK:       %[[W1:.*]] = nn.param "encoder.layers.*.fc1.weight" : tensor<2x16x8xf32>
// CHECK:       %[[C:.*]] = nn.cast %[[W]] {scale = -4 : i64} : tensor<2x8x8xf32> -> tensor<2x8x8xf8E4M3FNUZ>
// CHECK:       %[[S:.*]] = nn.slice %[[W1]] offsets=[0, 8, 0] : tensor<2x16x8xf32> -> tensor<2x8x8xf32>
// CHECK:       %[[S16:.*]] = nn.cast %[[S]] : tensor<2x8x8xf32> -> tensor<2x8x8xf16>
// CHECK:       nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%[[B]], %[[C]], %[[S16]] : tensor<2x8xf32>, tensor<2x8x8xf8E4M3FNUZ>, tensor<2x8x8xf16>)
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: tensor<4x8xf32>, %[[BI:.*]]: tensor<8xf32>, %[[CI:.*]]: tensor<8x8xf8E4M3FNUZ>, %[[SI:.*]]: tensor<8x8xf16>):
// CHECK-NEXT:    %[[X16:.*]] = nn.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xf16>
// CHECK-NEXT:    nn.linear %[[X16]], %[[CI]], %[[BI]]
// CHECK-NEXT:    nn.linear %[[X16]], %[[SI]] :
// CHECK-NOT:     nn.slice
// CHECK:         nn.yield

// -----

// Nothing to hoist: a body that only uses its stacked slices directly is left alone.
func.func @nothing() {
  %h = nn.input "h" : tensor<4x8xf32>
  %g = nn.param "encoder.layers.*.ln.weight" : tensor<2x8xf32>
  %r = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%g : tensor<2x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %gi: tensor<8xf32>):
    %y = nn.layer_norm %x, %gi, %gi eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    nn.yield %y : tensor<4x8xf32>
  }
  nn.output "out" %r : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @nothing
// CHECK:       nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%g : tensor<2x8xf32>)
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: tensor<4x8xf32>, %{{.*}}: tensor<8xf32>):
