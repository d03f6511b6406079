// RUN: %roundtrip | filecheck %s
// RUN: %roundtrip-generic | filecheck %s
// RUN: ipu-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every nn op in its custom form; both round trips must reproduce it exactly.

func.func @m() {
  %x = nn.input "pixel_values" : tensor<1x3x32x32xf32>
  %p = nn.patchify %x patch=8 : tensor<1x3x32x32xf32> -> tensor<16x192xf32>
  %w = nn.param "patch.weight" : tensor<64x192xf32>
  %b = nn.param "patch.bias" : tensor<64xf32>
  %wq = nn.cast %w {scale = -4 : i64} : tensor<64x192xf32> -> tensor<64x192xf8E4M3FNUZ>
  %ph = nn.cast %p : tensor<16x192xf32> -> tensor<16x192xf16>
  %e = nn.linear %ph, %wq, %b : tensor<16x192xf16>, tensor<64x192xf8E4M3FNUZ>, tensor<64xf32> -> tensor<16x64xf32>
  %g = nn.param "ln.w" : tensor<64xf32>
  %n = nn.layer_norm %e, %g, %b eps=1.0e-06 : tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %a = nn.attention %n, %n, %n heads=2 scale=0.125 : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  %s = nn.softmax %a axis=-1 : tensor<16x64xf32> -> tensor<16x64xf32>
  %ge = nn.gelu %s "tanh" : tensor<16x64xf32> -> tensor<16x64xf32>
  %sc = nn.scale %ge by 5.000000e-01 : tensor<16x64xf32> -> tensor<16x64xf32>
  %ad = nn.add %sc, %b : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %mm = nn.matmul %ad, %ad {transpose_rhs = true} : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x16xf32>
  %t = nn.transpose %mm perm=[1, 0] : tensor<16x16xf32> -> tensor<16x16xf32>
  %sl = nn.slice %t offsets=[0, 8] : tensor<16x16xf32> -> tensor<16x8xf32>
  %c = nn.concat %sl, %sl axis=1 : tensor<16x8xf32>, tensor<16x8xf32> -> tensor<16x16xf32>
  %r = nn.reshape %c : tensor<16x16xf32> -> tensor<1x16x16xf32>
  %st = nn.param "layers.w" : tensor<2x64x64xf32>
  %h = nn.repeat 2 carried(%ad : tensor<16x64xf32>) stacked(%st : tensor<2x64x64xf32>) -> tensor<16x64xf32> {
  ^bb0(%hh: tensor<16x64xf32>, %wi: tensor<64x64xf32>):
    %y = nn.linear %hh, %wi : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
    nn.yield %y : tensor<16x64xf32>
  }
  nn.output "out" %h : tensor<16x64xf32>
  func.return
}

// CHECK-LABEL: func.func @m() {
// CHECK-NEXT:    %x = nn.input "pixel_values" : tensor<1x3x32x32xf32>
// CHECK-NEXT:    %p = nn.patchify %x patch=8 : tensor<1x3x32x32xf32> -> tensor<16x192xf32>
// CHECK-NEXT:    %w = nn.param "patch.weight" : tensor<64x192xf32>
// CHECK-NEXT:    %b = nn.param "patch.bias" : tensor<64xf32>
// CHECK-NEXT:    %wq = nn.cast %w {scale = -4 : i64} : tensor<64x192xf32> -> tensor<64x192xf8E4M3FNUZ>
// CHECK-NEXT:    %ph = nn.cast %p : tensor<16x192xf32> -> tensor<16x192xf16>
// CHECK-NEXT:    %e = nn.linear %ph, %wq, %b : tensor<16x192xf16>, tensor<64x192xf8E4M3FNUZ>, tensor<64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %g = nn.param "ln.w" : tensor<64xf32>
// CHECK-NEXT:    %n = nn.layer_norm %e, %g, %b eps=1.000000e-06 : tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %a = nn.attention %n, %n, %n heads=2 scale=1.250000e-01 : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %s = nn.softmax %a axis=-1 : tensor<16x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %ge = nn.gelu %s "tanh" : tensor<16x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %sc = nn.scale %ge by 5.000000e-01 : tensor<16x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %ad = nn.add %sc, %b : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %mm = nn.matmul %ad, %ad {transpose_rhs = true} : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x16xf32>
// CHECK-NEXT:    %t = nn.transpose %mm perm=[1, 0] : tensor<16x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT:    %sl = nn.slice %t offsets=[0, 8] : tensor<16x16xf32> -> tensor<16x8xf32>
// CHECK-NEXT:    %c = nn.concat %sl, %sl axis=1 : tensor<16x8xf32>, tensor<16x8xf32> -> tensor<16x16xf32>
// CHECK-NEXT:    %r = nn.reshape %c : tensor<16x16xf32> -> tensor<1x16x16xf32>
// CHECK-NEXT:    %st = nn.param "layers.w" : tensor<2x64x64xf32>
// CHECK-NEXT:    %h = nn.repeat 2 carried(%ad : tensor<16x64xf32>) stacked(%st : tensor<2x64x64xf32>) -> tensor<16x64xf32> {
// CHECK-NEXT:    ^bb0(%hh: tensor<16x64xf32>, %wi: tensor<64x64xf32>):
// CHECK-NEXT:      %y = nn.linear %hh, %wi : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:      nn.yield %y : tensor<16x64xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    nn.output "out" %h : tensor<16x64xf32>
// CHECK-NEXT:    func.return

// GENERIC: "nn.patchify"(%x) <{patch = 8 : i64}>
// GENERIC: "nn.cast"(%w) <{scale = -4 : i64}>
// GENERIC: "nn.repeat"(%ad, %st) <{count = 2 : i64, operandSegmentSizes = array<i32: 1, 1>}> ({
// GENERIC: "nn.yield"(%y)
