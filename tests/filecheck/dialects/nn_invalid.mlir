// RUN: ipu-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @linear_inner_dim() {
  %x = nn.input "x" : tensor<16x48xf32>
  %w = nn.param "w" : tensor<64x32xf32>
  %y = nn.linear %x, %w : tensor<16x48xf32>, tensor<64x32xf32> -> tensor<16x64xf32>
  // expected-error @above {{nn.linear: operand 'weight' has shape 64x32 but operand 'input' has shape 16x48: weight's in-dimension 32 must equal input's last dimension 48}}
  func.return
}
// CHECK: nn.linear: operand 'weight' has shape 64x32 but operand 'input' has shape 16x48: weight's in-dimension 32 must equal input's last dimension 48

// -----

func.func @linear_bias() {
  %x = nn.input "x" : tensor<16x32xf32>
  %w = nn.param "w" : tensor<64x32xf32>
  %b = nn.param "b" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<16x32xf32>, tensor<64x32xf32>, tensor<32xf32> -> tensor<16x64xf32>
  // expected-error @above {{nn.linear: operand 'bias' has shape 32 but operand 'weight' has shape 64x32: expected bias shape 64}}
  func.return
}
// CHECK: nn.linear: operand 'bias' has shape 32 but operand 'weight' has shape 64x32: expected bias shape 64

// -----

func.func @linear_result() {
  %x = nn.input "x" : tensor<16x32xf32>
  %w = nn.param "w" : tensor<64x32xf32>
  %y = nn.linear %x, %w : tensor<16x32xf32>, tensor<64x32xf32> -> tensor<16x32xf32>
  // expected-error @above {{nn.linear: result has shape 16x32 but the operands imply 16x64}}
  func.return
}
// CHECK: nn.linear: result has shape 16x32 but the operands imply 16x64

// -----

func.func @linear_groups_rows() {
  %x = nn.input "x" : tensor<3x32xf32>
  %w = nn.param "w" : tensor<64x32xf32>
  %y = nn.linear %x, %w {row_groups = 2 : i64} : tensor<3x32xf32>, tensor<64x32xf32> -> tensor<1x64xf32>
  // expected-error @above {{nn.linear: row_groups = 2 needs an input of 2 rows and a weight whose 64 rows split into 2 groups, got input 3x32}}
  func.return
}
// CHECK: nn.linear: row_groups = 2 needs an input of 2 rows and a weight whose 64 rows split into 2 groups, got input 3x32

// -----

func.func @linear_groups_result() {
  %x = nn.input "x" : tensor<2x32xf32>
  %w = nn.param "w" : tensor<64x32xf32>
  %y = nn.linear %x, %w {row_groups = 2 : i64} : tensor<2x32xf32>, tensor<64x32xf32> -> tensor<2x64xf32>
  // expected-error @above {{nn.linear: result has shape 2x64 but the operands imply 1x64}}
  func.return
}
// CHECK: nn.linear: result has shape 2x64 but the operands imply 1x64

// -----

func.func @linear_partials_groups() {
  %x = nn.input "x" : tensor<2x32xf16>
  %w = nn.param "w" : tensor<63x32xf16>
  %y = nn.linear_partials %x, %w k_chunk=16 {row_groups = 2 : i64} : tensor<2x32xf16>, tensor<63x32xf16> -> tensor<2x1x63xf32>
  // expected-error @above {{nn.linear_partials: row_groups = 2 needs an input of 2 rows and a weight whose 63 rows split into 2 groups, got input 2x32}}
  func.return
}
// CHECK: nn.linear_partials: row_groups = 2 needs an input of 2 rows and a weight whose 63 rows split into 2 groups, got input 2x32

// -----

func.func @linear_fp8_result() {
  %x = nn.input "x" : tensor<16x32xf16>
  %w = nn.param "w" : tensor<64x32xf32>
  %y = nn.linear %x, %w : tensor<16x32xf16>, tensor<64x32xf32> -> tensor<16x64xf8E4M3FNUZ>
  // expected-error @above {{nn.linear: the result must be f32 or f16 (FP8 is an operand format only)}}
  func.return
}
// CHECK: nn.linear: the result must be f32 or f16 (FP8 is an operand format only)

// -----

func.func @bad_dtype() {
  %x = nn.input "x" : tensor<16x32xi32>
  // expected-error @above {{nn.input: result has element type i32; expected one of f32, f16, f8E4M3FNUZ, f8E5M2FNUZ}}
  func.return
}
// CHECK: nn.input: result has element type i32; expected one of f32, f16, f8E4M3FNUZ, f8E5M2FNUZ

// -----

func.func @matmul_contraction() {
  %a = nn.input "a" : tensor<4x8x16xf32>
  %b = nn.input "b" : tensor<4x8x16xf32>
  %c = nn.matmul %a, %b : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x16xf32>
  // expected-error @above {{nn.matmul: contraction mismatch: 'lhs' has shape 4x8x16 and 'rhs' has shape 4x8x16: 16 != 8}}
  func.return
}
// CHECK: nn.matmul: contraction mismatch: 'lhs' has shape 4x8x16 and 'rhs' has shape 4x8x16: 16 != 8

// -----

func.func @add_broadcast() {
  %a = nn.input "a" : tensor<4x8xf32>
  %b = nn.input "b" : tensor<4xf32>
  %c = nn.add %a, %b : tensor<4x8xf32>, tensor<4xf32> -> tensor<4x8xf32>
  // expected-error @above {{nn.add: operand 'rhs' has shape 4, which does not broadcast to operand 'lhs' shape 4x8}}
  func.return
}
// CHECK: nn.add: operand 'rhs' has shape 4, which does not broadcast to operand 'lhs' shape 4x8

// -----

func.func @layer_norm_weight() {
  %x = nn.input "x" : tensor<4x8xf32>
  %g = nn.param "g" : tensor<4xf32>
  %b = nn.param "b" : tensor<8xf32>
  %y = nn.layer_norm %x, %g, %b eps=1.0e-06 : tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // expected-error @above {{nn.layer_norm: operand 'weight' has shape 4 but operand 'input' has shape 4x8: expected 8}}
  func.return
}
// CHECK: nn.layer_norm: operand 'weight' has shape 4 but operand 'input' has shape 4x8: expected 8

// -----

func.func @gelu_kind() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.gelu %x "sigmoid" : tensor<4x8xf32> -> tensor<4x8xf32>
  // expected-error @above {{nn.gelu: approximate must be "tanh" or "none", got "sigmoid"}}
  func.return
}
// CHECK: nn.gelu: approximate must be "tanh" or "none", got "sigmoid"

// -----

func.func @softmax_axis() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.softmax %x axis=2 : tensor<4x8xf32> -> tensor<4x8xf32>
  // expected-error @above {{nn.softmax: axis 2 is out of range for operand 'input' shape 4x8}}
  func.return
}
// CHECK: nn.softmax: axis 2 is out of range for operand 'input' shape 4x8

// -----

func.func @attention_heads() {
  %q = nn.input "q" : tensor<4x8xf32>
  %y = nn.attention %q, %q, %q heads=3 scale=0.5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // expected-error @above {{nn.attention: heads = 3 does not divide the 8 channels of 'query'}}
  func.return
}
// CHECK: nn.attention: heads = 3 does not divide the 8 channels of 'query'

// -----

func.func @attention_kv() {
  %q = nn.input "q" : tensor<4x8xf32>
  %k = nn.input "k" : tensor<5x8xf32>
  %v = nn.input "v" : tensor<6x8xf32>
  %y = nn.attention %q, %k, %v heads=2 scale=0.5 : tensor<4x8xf32>, tensor<5x8xf32>, tensor<6x8xf32> -> tensor<4x8xf32>
  // expected-error @above {{nn.attention: operand 'key' has shape 5x8 but 'value' has shape 6x8}}
  func.return
}
// CHECK: nn.attention: operand 'key' has shape 5x8 but 'value' has shape 6x8

// -----

func.func @patchify_shape() {
  %x = nn.input "x" : tensor<1x3x30x30xf32>
  %p = nn.patchify %x patch=8 : tensor<1x3x30x30xf32> -> tensor<16x192xf32>
  // expected-error @above {{nn.patchify: result has shape 16x192 but the operands imply 9x192}}
  func.return
}
// CHECK: nn.patchify: result has shape 16x192 but the operands imply 9x192

// -----

func.func @reshape_count() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  // expected-error @above {{nn.reshape: operand 'input' shape 4x8 and result shape 4x4 have different element counts}}
  func.return
}
// CHECK: nn.reshape: operand 'input' shape 4x8 and result shape 4x4 have different element counts

// -----

func.func @transpose_perm() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.transpose %x perm=[0, 0] : tensor<4x8xf32> -> tensor<4x4xf32>
  // expected-error @above {{nn.transpose: perm [0, 0] is not a permutation of the 2 dimensions}}
  func.return
}
// CHECK: nn.transpose: perm [0, 0] is not a permutation of the 2 dimensions

// -----

func.func @slice_bounds() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.slice %x offsets=[0, 6] : tensor<4x8xf32> -> tensor<4x4xf32>
  // expected-error @above {{nn.slice: dimension 1: [6, 10) is outside operand 'input' shape 4x8}}
  func.return
}
// CHECK: nn.slice: dimension 1: [6, 10) is outside operand 'input' shape 4x8

// -----

func.func @concat_shape() {
  %a = nn.input "a" : tensor<4x8xf32>
  %b = nn.input "b" : tensor<5x8xf32>
  %y = nn.concat %a, %b axis=1 : tensor<4x8xf32>, tensor<5x8xf32> -> tensor<4x16xf32>
  // expected-error @above {{nn.concat: operand #1 has shape 5x8, which does not match operand #0 shape 4x8 outside axis 1}}
  func.return
}
// CHECK: nn.concat: operand #1 has shape 5x8, which does not match operand #0 shape 4x8 outside axis 1

// -----

func.func @cast_scale_range() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.cast %x {scale = 40 : i64} : tensor<4x8xf32> -> tensor<4x8xf8E4M3FNUZ>
  // expected-error @above {{nn.cast: FP8 scale 40 is outside the metadata range [-32, 31]}}
  func.return
}
// CHECK: nn.cast: FP8 scale 40 is outside the metadata range [-32, 31]

// -----

func.func @cast_scale_not_fp8() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.cast %x {scale = 2 : i64} : tensor<4x8xf32> -> tensor<4x8xf16>
  // expected-error @above {{nn.cast: scale is only meaningful for FP8, but the cast is f32 -> f16}}
  func.return
}
// CHECK: nn.cast: scale is only meaningful for FP8, but the cast is f32 -> f16

// -----

func.func @repeat_stacked() {
  %h = nn.input "h" : tensor<4x8xf32>
  %w = nn.param "w" : tensor<3x8x8xf32>
  %r = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%w : tensor<3x8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @above {{nn.repeat: stacked operand #0 has shape 3x8x8; its leading dimension must be the count 2}}
  ^bb0(%a: tensor<4x8xf32>, %wi: tensor<8x8xf32>):
    nn.yield %a : tensor<4x8xf32>
  }
  func.return
}
// CHECK: nn.repeat: stacked operand #0 has shape 3x8x8; its leading dimension must be the count 2

// -----

func.func @repeat_args() {
  %h = nn.input "h" : tensor<4x8xf32>
  %w = nn.param "w" : tensor<2x8x8xf32>
  %r = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%w : tensor<2x8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @above {{nn.repeat: body arguments are (tensor<4x8xf32>, tensor<2x8x8xf32>) but carried values and stacked slices imply (tensor<4x8xf32>, tensor<8x8xf32>)}}
  ^bb0(%a: tensor<4x8xf32>, %wi: tensor<2x8x8xf32>):
    nn.yield %a : tensor<4x8xf32>
  }
  func.return
}
// CHECK: nn.repeat: body arguments are (tensor<4x8xf32>, tensor<2x8x8xf32>) but carried values and stacked slices imply (tensor<4x8xf32>, tensor<8x8xf32>)

// -----

func.func @repeat_yield() {
  %h = nn.input "h" : tensor<4x8xf32>
  %r = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked( : ) -> tensor<4x8xf32> {
  // expected-error @above {{nn.repeat: nn.yield gives (tensor<8x4xf32>) but the carried values are (tensor<4x8xf32>)}}
  ^bb0(%a: tensor<4x8xf32>):
    %t = nn.transpose %a perm=[1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
    nn.yield %t : tensor<8x4xf32>
  }
  func.return
}
// CHECK: nn.repeat: nn.yield gives (tensor<8x4xf32>) but the carried values are (tensor<4x8xf32>)

// -----

func.func @fp8_arith() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.gelu %x "tanh" : tensor<4x8xf32> -> tensor<4x8xf8E4M3FNUZ>
  // expected-error @above {{nn.gelu: result element type f8E4M3FNUZ is not allowed; arithmetic results are f32 or f16 (produce FP8 with nn.cast, which carries the scale)}}
  func.return
}
// CHECK: nn.gelu: result element type f8E4M3FNUZ is not allowed; arithmetic results are f32 or f16 (produce FP8 with nn.cast, which carries the scale)

// -----

func.func @linear_partials_chunks() {
  %x = nn.input "x" : tensor<2x64xf16>
  %w = nn.param "w" : tensor<16x64xf16>
  %p = nn.linear_partials %x, %w k_chunk=16 : tensor<2x64xf16>, tensor<16x64xf16> -> tensor<3x2x16xf32>
  // expected-error @above {{nn.linear_partials: result has shape 3x2x16 but the operands imply 4x2x16}}
  func.return
}
// CHECK: nn.linear_partials: result has shape 3x2x16 but the operands imply 4x2x16

// -----

func.func @linear_partials_k() {
  %x = nn.input "x" : tensor<2x64xf16>
  %w = nn.param "w" : tensor<16x48xf16>
  %p = nn.linear_partials %x, %w k_chunk=16 : tensor<2x64xf16>, tensor<16x48xf16> -> tensor<4x2x16xf32>
  // expected-error @above {{nn.linear_partials: operand 'weight' has shape 16x48 but operand 'input' has shape 2x64: their K differ}}
  func.return
}
// CHECK: nn.linear_partials: operand 'weight' has shape 16x48 but operand 'input' has shape 2x64: their K differ

// -----

func.func @reduce_sum_shape() {
  %x = nn.input "x" : tensor<4x2x16xf32>
  %s = nn.reduce_sum %x : tensor<4x2x16xf32> -> tensor<4x16xf32>
  // expected-error @above {{nn.reduce_sum: result has shape 4x16 but the operands imply 2x16}}
  func.return
}
// CHECK: nn.reduce_sum: result has shape 4x16 but the operands imply 2x16

// -----

func.func @reduce_sum_bias() {
  %x = nn.input "x" : tensor<4x2x16xf16>
  %b = nn.param "b" : tensor<2xf32>
  %s = nn.reduce_sum %x, %b : tensor<4x2x16xf16>, tensor<2xf32> -> tensor<2x16xf16>
  // expected-error @above {{nn.reduce_sum: operand 'bias' has shape 2, expected [16] (the last dimension)}}
  func.return
}
// CHECK: nn.reduce_sum: operand 'bias' has shape 2, expected [16] (the last dimension)

// -----

func.func @reduce_sum_addend_f16() {
  %x = nn.input "x" : tensor<4x2x16xf16>
  %a = nn.input "a" : tensor<2x16xf16>
  %s = nn.reduce_sum %x addends(%a : tensor<2x16xf16>) : tensor<4x2x16xf16> -> tensor<2x16xf16>
  // expected-error @above {{nn.reduce_sum: addends need an f32 result}}
  func.return
}
// CHECK: nn.reduce_sum: addends need an f32 result

// -----

func.func @reduce_sum_addend_shape() {
  %x = nn.input "x" : tensor<4x2x16xf16>
  %a = nn.input "a" : tensor<16xf32>
  %s = nn.reduce_sum %x addends(%a : tensor<16xf32>) : tensor<4x2x16xf16> -> tensor<2x16xf32>
  // expected-error @above {{nn.reduce_sum: addend #0 has type tensor<16xf32>, expected the result's tensor<2x16xf32>}}
  func.return
}
// CHECK: nn.reduce_sum: addend #0 has type tensor<16xf32>, expected the result's tensor<2x16xf32>

// -----

func.func @reduce_sum_addend_activation() {
  %x = nn.input "x" : tensor<4x2x16xf16>
  %a = nn.input "a" : tensor<2x16xf32>
  %s = nn.reduce_sum %x addends(%a : tensor<2x16xf32>) {activation = "gelu_tanh"} : tensor<4x2x16xf16> -> tensor<2x16xf32>
  // expected-error @above {{nn.reduce_sum: addends and an activation together are not defined}}
  func.return
}
// CHECK: nn.reduce_sum: addends and an activation together are not defined

// -----

func.func @reduce_sum_scale_f32() {
  %x = nn.input "x" : tensor<4x2x16xf16>
  %s = nn.reduce_sum %x {scale = 1 : i64} : tensor<4x2x16xf16> -> tensor<2x16xf32>
  // expected-error @above {{nn.reduce_sum: scale is only meaningful for an FP8 result, got tensor<2x16xf32>}}
  func.return
}
// CHECK: nn.reduce_sum: scale is only meaningful for an FP8 result, got tensor<2x16xf32>

// -----

func.func @reduce_sum_fp8_scale_range() {
  %x = nn.input "x" : tensor<4x2x16xf16>
  %s = nn.reduce_sum %x {scale = 40 : i64} : tensor<4x2x16xf16> -> tensor<2x16xf8E4M3FNUZ>
  // expected-error @above {{nn.reduce_sum: FP8 scale 40 is outside the metadata range [-32, 31]}}
  func.return
}
// CHECK: nn.reduce_sum: FP8 scale 40 is outside the metadata range [-32, 31]

// -----

func.func @attention_partial_chunks() {
  %q = nn.input "q" : tensor<4x8xf32>
  %y = nn.attention_partial %q, %q, %q heads=2 scale=0.5 chunks=3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<3x4x12xf32>
  // expected-error @above {{nn.attention_partial: chunks = 3 does not split 4 keys into non-empty ranges}}
  func.return
}
// CHECK: nn.attention_partial: chunks = 3 does not split 4 keys into non-empty ranges

// -----

func.func @attention_partial_result() {
  %q = nn.input "q" : tensor<4x8xf32>
  %y = nn.attention_partial %q, %q, %q heads=2 scale=0.5 chunks=2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
  // expected-error @above {{nn.attention_partial: result has shape 2x4x8 but the operands imply 2x4x12}}
  func.return
}
// CHECK: nn.attention_partial: result has shape 2x4x8 but the operands imply 2x4x12

// -----

func.func @attention_merge_result() {
  %p = nn.input "p" : tensor<2x4x12xf32>
  %y = nn.attention_merge %p heads=2 : tensor<2x4x12xf32> -> tensor<4x12xf32>
  // expected-error @above {{nn.attention_merge: result has shape 4x12 but the operands imply 4x8}}
  func.return
}
// CHECK: nn.attention_merge: result has shape 4x12 but the operands imply 4x8

// -----

func.func @matmul_partials_shapes() {
  %a = nn.input "a" : tensor<4x40xf32>
  %b = nn.input "b" : tensor<40x8xf16>
  %y = nn.matmul_partials %a, %b k_chunk=16 : tensor<4x40xf32>, tensor<40x8xf16> -> tensor<2x4x8xf32>
  // expected-error @above {{nn.matmul_partials: result has shape 2x4x8 but the operands imply 3x4x8}}
  func.return
}
// CHECK: nn.matmul_partials: result has shape 2x4x8 but the operands imply 3x4x8

// -----

// Issue 24: values that cannot be meant.
func.func @eps_overflows_f32(%e: tensor<16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) {
  %n = nn.layer_norm %e, %g, %b eps=1.0e+300 : tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  // expected-error @above {{cannot parse this value (OverflowError: float too large to pack with f format)}}
  func.return
}
// CHECK: error: cannot parse this value (OverflowError: float too large to pack with f format)

// -----

func.func @nan_attention_scale(%n: tensor<16x64xf32>) {
  %a = "nn.attention"(%n, %n, %n) <{heads = 2 : i64, scale = 0x7FC00000 : f32}> : (tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf32>
  // expected-error @above {{'nn.attention' op property 'scale': nan is not finite}}
  func.return
}
// CHECK: error: 'nn.attention' op property 'scale': nan is not finite

// -----

func.func @derived_heads() {
  %u = nn.param "head.attention.probe_key_scores" {derived = {recipe = "probe_key_scores", query = "head.probe", wq = "q", wk = "k", heads = -2 : i64, scale = 0.125 : f32}} : tensor<2x64xf32>
  // expected-error @above {{nn.param 'head.attention.probe_key_scores': derived: 'heads' must be a positive integer, got -2 : i64}}
  func.return
}
// CHECK: nn.param 'head.attention.probe_key_scores': derived: 'heads' must be a positive integer, got -2 : i64

// -----

func.func @use_before_def(%x: tensor<16x64xf32>) {
  %y = nn.add %z, %x : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  // expected-error @above {{'nn.add' op operand #0 (%z) is used before its definition ('nn.add' below)}}
  %z = nn.add %x, %x : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  func.return
}
// CHECK: error: 'nn.add' op operand #0 (%z) is used before its definition ('nn.add' below)
