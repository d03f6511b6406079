// Parameter weights of nn.linear get an FP8 cast; activations an f16 cast (one per input: %y and %z share it);
// biases and results stay f32.

// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights)' | filecheck %s
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights{format="f152" scale=-6 activations="none"})' | filecheck %s --check-prefix=F152
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights{keep_f16=patch_embedding,q_proj})' | filecheck %s --check-prefix=KEEP
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights, nn-quantize-weights)' | filecheck %s --check-prefix=TWICE

func.func @weights() {
  %x = nn.input "x" : tensor<4x8xf32>
  %w = nn.param "encoder.layers.0.mlp.fc1.weight" : tensor<16x8xf32>
  %b = nn.param "encoder.layers.0.mlp.fc1.bias" : tensor<16xf32>
  %y = nn.linear %x, %w, %b : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  // A weight reshaped from a parameter (the patch kernel) is still a parameter.
  %k = nn.param "embeddings.patch_embedding.weight" : tensor<8x2x2x2xf32>
  %kr = nn.reshape %k : tensor<8x2x2x2xf32> -> tensor<8x8xf32>
  %z = nn.linear %x, %kr : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  // A weight computed from an activation is not.
  %act = nn.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %u = nn.linear %x, %act : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>
  nn.output "y" %y : tensor<4x16xf32>
  nn.output "z" %z : tensor<4x8xf32>
  nn.output "u" %u : tensor<4x4xf32>
  func.return
}

// CHECK-LABEL: func.func @weights()
// CHECK-NEXT:    %x = nn.input "x" : tensor<4x8xf32>
// CHECK-NEXT:    %w = nn.param "encoder.layers.0.mlp.fc1.weight" : tensor<16x8xf32>
// CHECK-NEXT:    %b = nn.param "encoder.layers.0.mlp.fc1.bias" : tensor<16xf32>
// CHECK-NEXT:    %[[W8:[^ ]+]] = nn.cast %w {scale = -4 : i64} : tensor<16x8xf32> -> tensor<16x8xf8E4M3FNUZ>
// CHECK-NEXT:    %[[X16:[^ ]+]] = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
// CHECK-NEXT:    %y = nn.linear %[[X16]], %[[W8]], %b : tensor<4x8xf16>, tensor<16x8xf8E4M3FNUZ>, tensor<16xf32> -> tensor<4x16xf32>
// CHECK-NEXT:    %k = nn.param "embeddings.patch_embedding.weight"
// CHECK-NEXT:    %kr = nn.reshape %k
// CHECK-NEXT:    %[[K8:[^ ]+]] = nn.cast %kr {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
// CHECK-NEXT:    %z = nn.linear %[[X16]], %[[K8]] : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
// CHECK-NEXT:    %act = nn.reshape %x
// CHECK-NEXT:    %u = nn.linear %x, %act : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>

// F152-LABEL: func.func @weights()
// F152:          %[[W8:[^ ]+]] = nn.cast %w {scale = -6 : i64} : tensor<16x8xf32> -> tensor<16x8xf8E5M2FNUZ>
// F152-NEXT:     %y = nn.linear %x, %[[W8]], %b : tensor<4x8xf32>, tensor<16x8xf8E5M2FNUZ>, tensor<16xf32> -> tensor<4x16xf32>
// F152:          %[[K8:[^ ]+]] = nn.cast %kr {scale = -6 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E5M2FNUZ>
// F152-NEXT:     %z = nn.linear %x, %[[K8]]
// F152:          %u = nn.linear %x, %act : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>

// The pass is idempotent: FP8 weights and f16 inputs are left alone the second time.
// TWICE-LABEL: func.func @weights()
// TWICE-COUNT-2: {scale = -4 : i64}
// TWICE-NOT:     {scale = -4 : i64}

// keep_f16: linears whose weight comes from a parameter named with one of the substrings get F16 weights.
// KEEP-LABEL: func.func @weights()
// KEEP:          nn.cast %w {scale = -4 : i64} : tensor<16x8xf32> -> tensor<16x8xf8E4M3FNUZ>
// KEEP-NEXT:     %[[X16:[^ ]+]] = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
// KEEP:          %[[K16:[^ ]+]] = nn.cast %kr : tensor<8x8xf32> -> tensor<8x8xf16>
// KEEP-NEXT:     %z = nn.linear %[[X16]], %[[K16]] : tensor<4x8xf16>, tensor<8x8xf16> -> tensor<4x8xf32>

// -----

// In an nn.repeat body the weight is a slice of a stacked parameter: the cast goes inside the body.
func.func @repeat_body() {
  %h = nn.input "h" : tensor<4x8xf32>
  %ws = nn.param "encoder.layers.*.self_attn.out_proj.weight" : tensor<2x8x8xf32>
  %bs = nn.param "encoder.layers.*.self_attn.out_proj.bias" : tensor<2x8xf32>
  %out = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%ws, %bs : tensor<2x8x8xf32>, tensor<2x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>):
    %y = nn.linear %x, %w, %b : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    // The carried value is an activation, not a weight.
    %s = nn.linear %y, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>
    nn.yield %y : tensor<4x8xf32>
  }
  nn.output "out" %out : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @repeat_body()
// CHECK:         ^{{.*}}(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>):
// CHECK-NEXT:      %[[W8:[^ ]+]] = nn.cast %w {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
// CHECK-NEXT:      %[[X16:[^ ]+]] = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
// CHECK-NEXT:      %y = nn.linear %[[X16]], %[[W8]], %b : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:      %s = nn.linear %y, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x4xf32>

// TWICE-LABEL: func.func @repeat_body()
// TWICE-COUNT-1: {scale = -4 : i64}
// TWICE-NOT:     {scale = -4 : i64}

// -----

// attention_f16: the f32 query, key and value of nn.attention are cast to f16; without it they stay f32.
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights{attention_f16=true})' | filecheck %s --check-prefix=ATT
func.func @attention() {
  %q = nn.input "q" : tensor<4x8xf32>
  %k = nn.input "k" : tensor<6x8xf32>
  %v = nn.input "v" : tensor<6x8xf32>
  %o = nn.attention %q, %k, %v heads=2 scale=0.5 : tensor<4x8xf32>, tensor<6x8xf32>, tensor<6x8xf32> -> tensor<4x8xf32>
  nn.output "o" %o : tensor<4x8xf32>
  func.return
}
// ATT-LABEL: func.func @attention()
// ATT:         %[[Q:[^ ]+]] = nn.cast %q : tensor<4x8xf32> -> tensor<4x8xf16>
// ATT-NEXT:    %[[K:[^ ]+]] = nn.cast %k : tensor<6x8xf32> -> tensor<6x8xf16>
// ATT-NEXT:    %[[V:[^ ]+]] = nn.cast %v : tensor<6x8xf32> -> tensor<6x8xf16>
// ATT-NEXT:    %o = nn.attention %[[Q]], %[[K]], %[[V]]
// CHECK-LABEL: func.func @attention()
// CHECK-NOT:     nn.cast
// CHECK:         %o = nn.attention %q, %k, %v

// -----

// attention_f16 with linear operands read only by the attention: the linears produce f16 themselves (no cast); a
// linear result with another use keeps f32 and gets the cast.
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights{attention_f16=true})' | filecheck %s --check-prefix=FUSE
func.func @attention_of_linears() {
  %x = nn.input "x" : tensor<4x8xf32>
  %wq = nn.param "wq" : tensor<8x8xf32>
  %wk = nn.param "wk" : tensor<8x8xf32>
  %bk = nn.param "bk" : tensor<8xf32>
  %q = nn.linear %x, %wq : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %k = nn.linear %x, %wk, %bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %o = nn.attention %q, %k, %x heads=2 scale=0.5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "o" %o : tensor<4x8xf32>
  nn.output "k" %k : tensor<4x8xf32>
  func.return
}
// TWICE-LABEL: func.func @attention_of_linears()
// FUSE-LABEL: func.func @attention_of_linears()
// FUSE:         %q = nn.linear %{{[^ ]+}}, %{{[^ ]+}} : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf16>
// FUSE:         %k = nn.linear %{{[^ ]+}}, %{{[^ ]+}}, %bk : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ>, tensor<8xf32> -> tensor<4x8xf32>
// FUSE-NEXT:    %[[K16:[^ ]+]] = nn.cast %k : tensor<4x8xf32> -> tensor<4x8xf16>
// FUSE-NEXT:    %[[V16:[^ ]+]] = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
// FUSE-NEXT:    %o = nn.attention %q, %[[K16]], %[[V16]]

// -----

// An MLP's hidden activation read only by the next linear: fc1 and the GELU produce f16 (the values the f32 pair
// then a cast to f16 gives), fc2 reads it without a cast.
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights)' | filecheck %s --check-prefix=MLP
func.func @mlp() {
  %x = nn.input "x" : tensor<4x8xf32>
  %w1 = nn.param "w1" : tensor<16x8xf32>
  %w2 = nn.param "w2" : tensor<8x16xf32>
  %h = nn.linear %x, %w1 : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x16xf32>
  %g = nn.gelu %h "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %y = nn.linear %g, %w2 : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
  nn.output "y" %y : tensor<4x8xf32>
  func.return
}
// TWICE-LABEL: func.func @mlp()
// MLP-LABEL: func.func @mlp()
// MLP:         %h = nn.linear %{{[^ ]+}}, %{{[^ ]+}} : tensor<4x8xf16>, tensor<16x8xf8E4M3FNUZ> -> tensor<4x16xf16>
// MLP-NEXT:    %g = nn.gelu %h "tanh" : tensor<4x16xf16> -> tensor<4x16xf16>
// MLP-NEXT:    %[[W2:[^ ]+]] = nn.cast %w2 {scale = -4 : i64}
// MLP-NEXT:    %y = nn.linear %g, %[[W2]] : tensor<4x16xf16>, tensor<8x16xf8E4M3FNUZ> -> tensor<4x8xf32>

// -----

// A layer norm read only as linears' inputs produces f16 itself (one rounding of its f32 result either way); one
// with another use (an output) keeps f32 and gets the shared cast. Layer-norm weights and biases from parameters
// become f16 (one cast each, shared by the layer norms that read them); with activations="none" they stay f32.
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights)' | filecheck %s --check-prefix=LN
func.func @layer_norms() {
  %x = nn.input "x" : tensor<4x8xf32>
  %g = nn.param "g" : tensor<8xf32>
  %b = nn.param "b" : tensor<8xf32>
  %wq = nn.param "wq" : tensor<8x8xf32>
  %wk = nn.param "wk" : tensor<8x8xf32>
  %n1 = nn.layer_norm %x, %g, %b eps=1.0e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %q = nn.linear %n1, %wq : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %k = nn.linear %n1, %wk : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %n2 = nn.layer_norm %q, %g, %b eps=1.0e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %y = nn.linear %n2, %wk : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  nn.output "n2" %n2 : tensor<4x8xf32>
  nn.output "k" %k : tensor<4x8xf32>
  nn.output "y" %y : tensor<4x8xf32>
  func.return
}
// TWICE-LABEL: func.func @layer_norms()
// LN-LABEL: func.func @layer_norms()
// LN:         %[[G16:[^ ]+]] = nn.cast %g : tensor<8xf32> -> tensor<8xf16>
// LN-NEXT:    %[[B16:[^ ]+]] = nn.cast %b : tensor<8xf32> -> tensor<8xf16>
// LN-NEXT:    %n1 = nn.layer_norm %x, %[[G16]], %[[B16]] eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf16>, tensor<8xf16> -> tensor<4x8xf16>
// LN-NEXT:    %[[WQ:[^ ]+]] = nn.cast %wq
// LN-NEXT:    %q = nn.linear %n1, %[[WQ]] : tensor<4x8xf16>
// LN:         %k = nn.linear %n1,
// LN:         %n2 = nn.layer_norm %q, %[[G16]], %[[B16]] eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf16>, tensor<8xf16> -> tensor<4x8xf32>
// LN:         %[[N16:[^ ]+]] = nn.cast %n2 : tensor<4x8xf32> -> tensor<4x8xf16>
// LN-NEXT:    %y = nn.linear %[[N16]],
