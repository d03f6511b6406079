// The q/k/v projections of an attention become one linear over concatenated weights, and slices.

// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-fuse-qkv)' | filecheck %s
// RUN: xdsl-opt %s --split-input-file -p nn-fuse-qkv | filecheck %s
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-fuse-qkv{fuse-kv=true})' | filecheck %s --check-prefix=KV
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-fuse-qkv{require-attention=false})' | filecheck %s --check-prefix=ANY

// An encoder layer's self-attention (width 8, as the builder emits it): k and v's parameters, defined after q's
// linear, move up to where the fused linear goes.
func.func @self_attention() {
  %x = nn.input "x" : tensor<4x8xf32>
  %wq = nn.param "encoder.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
  %bq = nn.param "encoder.layers.0.self_attn.q_proj.bias" : tensor<8xf32>
  %q = nn.linear %x, %wq, %bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %wk = nn.param "encoder.layers.0.self_attn.k_proj.weight" : tensor<8x8xf32>
  %bk = nn.param "encoder.layers.0.self_attn.k_proj.bias" : tensor<8xf32>
  %k = nn.linear %x, %wk, %bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %wv = nn.param "encoder.layers.0.self_attn.v_proj.weight" : tensor<8x8xf32>
  %bv = nn.param "encoder.layers.0.self_attn.v_proj.bias" : tensor<8xf32>
  %v = nn.linear %x, %wv, %bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %a = nn.attention %q, %k, %v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "a" %a : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @self_attention()
// CHECK-NEXT:    %x = nn.input "x" : tensor<4x8xf32>
// CHECK-NEXT:    %wq = nn.param "encoder.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
// CHECK-NEXT:    %bq = nn.param "encoder.layers.0.self_attn.q_proj.bias" : tensor<8xf32>
// CHECK-NEXT:    %wk = nn.param "encoder.layers.0.self_attn.k_proj.weight" : tensor<8x8xf32>
// CHECK-NEXT:    %bk = nn.param "encoder.layers.0.self_attn.k_proj.bias" : tensor<8xf32>
// CHECK-NEXT:    %wv = nn.param "encoder.layers.0.self_attn.v_proj.weight" : tensor<8x8xf32>
// CHECK-NEXT:    %bv = nn.param "encoder.layers.0.self_attn.v_proj.bias" : tensor<8xf32>
// CHECK-NEXT:    %[[W:[^ ]+]] = nn.concat %wq, %wk, %wv axis=0 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<24x8xf32>
// CHECK-NEXT:    %[[B:[^ ]+]] = nn.concat %bq, %bk, %bv axis=0 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<24xf32>
// CHECK-NEXT:    %[[QKV:[^ ]+]] = nn.linear %x, %[[W]], %[[B]] : tensor<4x8xf32>, tensor<24x8xf32>, tensor<24xf32> -> tensor<4x24xf32>
// CHECK-NEXT:    %q = nn.slice %[[QKV]] offsets=[0, 0] : tensor<4x24xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %k = nn.slice %[[QKV]] offsets=[0, 8] : tensor<4x24xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %v = nn.slice %[[QKV]] offsets=[0, 16] : tensor<4x24xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %a = nn.attention %q, %k, %v heads=2 scale=5.000000e-01
// CHECK-NEXT:    nn.output "a" %a
// CHECK-NEXT:    func.return

// -----

// The MAP head: q projects the probe, k and v the last hidden state. Only k/v share an input, so by default
// nothing is fused; fuse-kv fuses the pair, as does require-attention=false.
func.func @map_head() {
  %probe = nn.input "probe" : tensor<1x8xf32>
  %last = nn.input "last" : tensor<4x8xf32>
  %w = nn.param "head.attention.in_proj_weight" : tensor<24x8xf32>
  %b = nn.param "head.attention.in_proj_bias" : tensor<24xf32>
  %wq = nn.slice %w offsets=[0, 0] : tensor<24x8xf32> -> tensor<8x8xf32>
  %bq = nn.slice %b offsets=[0] : tensor<24xf32> -> tensor<8xf32>
  %q = nn.linear %probe, %wq, %bq : tensor<1x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<1x8xf32>
  %wk = nn.slice %w offsets=[8, 0] : tensor<24x8xf32> -> tensor<8x8xf32>
  %bk = nn.slice %b offsets=[8] : tensor<24xf32> -> tensor<8xf32>
  %k = nn.linear %last, %wk, %bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %wv = nn.slice %w offsets=[16, 0] : tensor<24x8xf32> -> tensor<8x8xf32>
  %bv = nn.slice %b offsets=[16] : tensor<24xf32> -> tensor<8xf32>
  %v = nn.linear %last, %wv, %bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %a = nn.attention %q, %k, %v heads=2 scale=5.000000e-01 : tensor<1x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<1x8xf32>
  nn.output "a" %a : tensor<1x8xf32>
  func.return
}

// CHECK-LABEL: func.func @map_head()
// CHECK-NOT:     nn.concat
// CHECK:         %k = nn.linear %last, %wk, %bk
// CHECK-NOT:     nn.concat

// KV-LABEL: func.func @map_head()
// KV:           %q = nn.linear %probe, %wq, %bq : tensor<1x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<1x8xf32>
// KV-NEXT:      %wk = nn.slice %w offsets=[8, 0]
// KV-NEXT:      %bk = nn.slice %b offsets=[8]
// KV-NEXT:      %wv = nn.slice %w offsets=[16, 0]
// KV-NEXT:      %bv = nn.slice %b offsets=[16]
// KV-NEXT:      %[[W:[^ ]+]] = nn.concat %wk, %wv axis=0 : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<16x8xf32>
// KV-NEXT:      %[[B:[^ ]+]] = nn.concat %bk, %bv axis=0 : tensor<8xf32>, tensor<8xf32> -> tensor<16xf32>
// KV-NEXT:      %[[KV:[^ ]+]] = nn.linear %last, %[[W]], %[[B]] : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
// KV-NEXT:      %k = nn.slice %[[KV]] offsets=[0, 0] : tensor<4x16xf32> -> tensor<4x8xf32>
// KV-NEXT:      %v = nn.slice %[[KV]] offsets=[0, 8] : tensor<4x16xf32> -> tensor<4x8xf32>
// KV-NEXT:      %a = nn.attention %q, %k, %v

// ANY-LABEL: func.func @map_head()
// ANY:          %q = nn.linear %probe, %wq, %bq
// ANY:          nn.linear %last, %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>

// -----

// Different bias presence, or different weight types: not fused (in any mode).
func.func @mismatch() {
  %x = nn.input "x" : tensor<4x8xf32>
  %wq = nn.param "wq" : tensor<8x8xf32>
  %q = nn.linear %x, %wq : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %wk = nn.param "wk" : tensor<8x8xf32>
  %bk = nn.param "bk" : tensor<8xf32>
  %k = nn.linear %x, %wk, %bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %wv = nn.param "wv" : tensor<8x8xf16>
  %bv = nn.param "bv" : tensor<8xf32>
  %v = nn.linear %x, %wv, %bv : tensor<4x8xf32>, tensor<8x8xf16>, tensor<8xf32> -> tensor<4x8xf32>
  %a = nn.attention %q, %k, %v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "a" %a : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @mismatch()
// CHECK-NOT:     nn.concat
// KV-LABEL: func.func @mismatch()
// KV-NOT:        nn.concat
// ANY-LABEL: func.func @mismatch()
// ANY-NOT:       nn.concat

// -----

// Inside an nn.repeat body, on stacked slices, after nn-quantize-weights: the three activation casts are one
// input, the weight casts (one scale) become one cast of the concatenated f32 weights.
func.func @quantized_in_repeat() {
  %h = nn.input "h" : tensor<4x8xf32>
  %ws = nn.param "encoder.layers.*.self_attn.q_proj.weight" : tensor<2x8x8xf32>
  %ks = nn.param "encoder.layers.*.self_attn.k_proj.weight" : tensor<2x8x8xf32>
  %vs = nn.param "encoder.layers.*.self_attn.v_proj.weight" : tensor<2x8x8xf32>
  %out = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%ws, %ks, %vs : tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x8xf32>, %wv: tensor<8x8xf32>):
    %wq8 = nn.cast %wq {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
    %xq = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
    %q = nn.linear %xq, %wq8 : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
    %wk8 = nn.cast %wk {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
    %xk = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
    %k = nn.linear %xk, %wk8 : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
    %wv8 = nn.cast %wv {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
    %xv = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
    %v = nn.linear %xv, %wv8 : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
    %a = nn.attention %q, %k, %v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    nn.yield %a : tensor<4x8xf32>
  }
  nn.output "out" %out : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @quantized_in_repeat()
// CHECK:         ^{{.*}}(%x: tensor<4x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x8xf32>, %wv: tensor<8x8xf32>):
// CHECK-NEXT:      %xq = nn.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
// CHECK-NEXT:      %[[W:[^ ]+]] = nn.concat %wq, %wk, %wv axis=0 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<24x8xf32>
// CHECK-NEXT:      %[[W8:[^ ]+]] = nn.cast %[[W]] {scale = -4 : i64} : tensor<24x8xf32> -> tensor<24x8xf8E4M3FNUZ>
// CHECK-NEXT:      %[[QKV:[^ ]+]] = nn.linear %xq, %[[W8]] : tensor<4x8xf16>, tensor<24x8xf8E4M3FNUZ> -> tensor<4x24xf32>
// CHECK-NEXT:      %q = nn.slice %[[QKV]] offsets=[0, 0]
// CHECK-NEXT:      %k = nn.slice %[[QKV]] offsets=[0, 8]
// CHECK-NEXT:      %v = nn.slice %[[QKV]] offsets=[0, 16]
// CHECK-NEXT:      %a = nn.attention %q, %k, %v
// CHECK-NEXT:      nn.yield %a
// KV-LABEL: func.func @quantized_in_repeat()
// KV:            nn.cast %{{.*}} {scale = -4 : i64} : tensor<24x8xf32> -> tensor<24x8xf8E4M3FNUZ>
// ANY-LABEL: func.func @quantized_in_repeat()
// ANY:           nn.cast %{{.*}} {scale = -4 : i64} : tensor<24x8xf32> -> tensor<24x8xf8E4M3FNUZ>

// -----

// FP8 weights with different scales are not concatenated.
func.func @different_scales() {
  %x = nn.input "x" : tensor<4x8xf16>
  %wq = nn.param "wq" : tensor<8x8xf32>
  %wk = nn.param "wk" : tensor<8x8xf32>
  %wv = nn.param "wv" : tensor<8x8xf32>
  %wq8 = nn.cast %wq {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
  %wk8 = nn.cast %wk {scale = -3 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
  %wv8 = nn.cast %wv {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
  %q = nn.linear %x, %wq8 : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
  %k = nn.linear %x, %wk8 : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
  %v = nn.linear %x, %wv8 : tensor<4x8xf16>, tensor<8x8xf8E4M3FNUZ> -> tensor<4x8xf32>
  %a = nn.attention %q, %k, %v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "a" %a : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @different_scales()
// CHECK-NOT:     nn.concat
// KV-LABEL: func.func @different_scales()
// KV-NOT:        nn.concat
// Without the attention restriction, the two linears whose scales agree are fused.
// ANY-LABEL: func.func @different_scales()
// ANY:           %wk8 = nn.cast %wk {scale = -3 : i64}
// ANY-NEXT:      %[[W:[^ ]+]] = nn.concat %wq, %wv axis=0
// ANY-NEXT:      %[[W8:[^ ]+]] = nn.cast %[[W]] {scale = -4 : i64} : tensor<16x8xf32> -> tensor<16x8xf8E4M3FNUZ>
// ANY-NEXT:      %[[QV:[^ ]+]] = nn.linear %x, %[[W8]]
// ANY-NEXT:      %q = nn.slice %[[QV]] offsets=[0, 0]
// ANY-NEXT:      %v = nn.slice %[[QV]] offsets=[0, 8]
// ANY-NEXT:      %k = nn.linear %x, %wk8

// -----

// Without an attention, only require-attention=false fuses linears that share an input (here two of the three;
// the f16 one differs).
func.func @no_attention() {
  %x = nn.input "x" : tensor<4x8xf32>
  %w1 = nn.param "w1" : tensor<16x8xf32>
  %w2 = nn.param "w2" : tensor<8x8xf32>
  %w3 = nn.param "w3" : tensor<8x8xf16>
  %y1 = nn.linear %x, %w1 : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x16xf32>
  %y2 = nn.linear %x, %w2 : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %y3 = nn.linear %x, %w3 : tensor<4x8xf32>, tensor<8x8xf16> -> tensor<4x8xf32>
  nn.output "y1" %y1 : tensor<4x16xf32>
  nn.output "y2" %y2 : tensor<4x8xf32>
  nn.output "y3" %y3 : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @no_attention()
// CHECK-NOT:     nn.concat
// KV-LABEL: func.func @no_attention()
// KV-NOT:        nn.concat

// ANY-LABEL: func.func @no_attention()
// ANY:          %[[W:[^ ]+]] = nn.concat %w1, %w2 axis=0 : tensor<16x8xf32>, tensor<8x8xf32> -> tensor<24x8xf32>
// ANY-NEXT:     %[[Y:[^ ]+]] = nn.linear %x, %[[W]] : tensor<4x8xf32>, tensor<24x8xf32> -> tensor<4x24xf32>
// ANY-NEXT:     %y1 = nn.slice %[[Y]] offsets=[0, 0] : tensor<4x24xf32> -> tensor<4x16xf32>
// ANY-NEXT:     %y2 = nn.slice %[[Y]] offsets=[0, 16] : tensor<4x24xf32> -> tensor<4x8xf32>
// ANY-NEXT:     %y3 = nn.linear %x, %w3
