// nn-fold-probe-attention: an attention whose one query row is computed from parameters only (the MAP head's
// probe) becomes U x^T (U derived on the host from the probe, W_q, b_q and W_k: `probe_key_scores`), a softmax
// over the tokens, P x and the value linear grouped by heads (head h's output columns from row h of P x). The key bias drops out (a constant per head in the scores). An
// attention whose query depends on the input is left alone (the NOFOLD function). The widths here (8) are not whole
// 16-deep K blocks, which the device's grouped K split needs (the pass's default k_multiple=16 leaves such a head
// unfolded: the KMULT run), so the runs fold with k_multiple=1.
// RUN: ipu-opt %s -p 'nn-fold-probe-attention' | filecheck %s --check-prefix=KMULT
// With fewer tiles than heads (the grouped value linear needs a tile per head) the head stays unfolded too:
// RUN: ipu-opt %s -p 'nn-fold-probe-attention{k_multiple=1 tiles=1}' | filecheck %s --check-prefix=KMULT
// RUN: ipu-opt %s -p 'nn-fold-probe-attention{k_multiple=1 tiles=4}' | filecheck %s

// RUN: ipu-opt %s -p 'nn-fold-probe-attention{k_multiple=1}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-fold-probe-attention{operands_f16=false k_multiple=1}' | filecheck %s --check-prefix=F32
// RUN: ipu-opt %s -p 'nn-fold-probe-attention{k_multiple=1}' | ipu-opt | filecheck %s

func.func @head() {
  %x = nn.input "x" : tensor<6x8xf32>
  %probe = nn.param "head.probe" : tensor<1x1x8xf32>
  %p2 = nn.reshape %probe : tensor<1x1x8xf32> -> tensor<1x8xf32>
  %w = nn.param "head.attention.in_proj_weight" : tensor<24x8xf32>
  %b = nn.param "head.attention.in_proj_bias" : tensor<24xf32>
  %wq = nn.slice %w offsets=[0, 0] : tensor<24x8xf32> -> tensor<8x8xf32>
  %bq = nn.slice %b offsets=[0] : tensor<24xf32> -> tensor<8xf32>
  %wk = nn.slice %w offsets=[8, 0] : tensor<24x8xf32> -> tensor<8x8xf32>
  %bk = nn.slice %b offsets=[8] : tensor<24xf32> -> tensor<8xf32>
  %wv = nn.slice %w offsets=[16, 0] : tensor<24x8xf32> -> tensor<8x8xf32>
  %bv = nn.slice %b offsets=[16] : tensor<24xf32> -> tensor<8xf32>
  %q = nn.linear %p2, %wq, %bq : tensor<1x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<1x8xf32>
  %k = nn.linear %x, %wk, %bk : tensor<6x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
  %v = nn.linear %x, %wv, %bv : tensor<6x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
  %a = nn.attention %q, %k, %v heads=2 scale=0.5 : tensor<1x8xf32>, tensor<6x8xf32>, tensor<6x8xf32> -> tensor<1x8xf32>
  nn.output "a" %a : tensor<1x8xf32>
  func.return
}

// CHECK-LABEL: func.func @head
// CHECK-NOT:     nn.attention
// CHECK:         %[[U:[^ ]+]] = nn.param "head.attention.probe_key_scores" {derived = {recipe = "probe_key_scores", query = "head.probe", wq = "head.attention.in_proj_weight[0:8]", wk = "head.attention.in_proj_weight[8:16]", heads = 2 : i64, scale = 5.000000e-01 : f32, bq = "head.attention.in_proj_bias[0:8]"}} : tensor<2x8xf32>
// CHECK-NEXT:    %[[X16:[^ ]+]] = nn.cast %x : tensor<6x8xf32> -> tensor<6x8xf16>
// CHECK-NEXT:    %[[U16:[^ ]+]] = nn.cast %[[U]] : tensor<2x8xf32> -> tensor<2x8xf16>
// CHECK-NEXT:    %[[ST:[^ ]+]] = nn.linear %[[U16]], %[[X16]] : tensor<2x8xf16>, tensor<6x8xf16> -> tensor<2x6xf32>
// CHECK-NEXT:    %[[P:[^ ]+]] = nn.softmax %[[ST]] axis=-1 : tensor<2x6xf32> -> tensor<2x6xf32>
// CHECK-NEXT:    %[[Z:[^ ]+]] = nn.matmul %[[P]], %[[X16]] : tensor<2x6xf32>, tensor<6x8xf16> -> tensor<2x8xf32>
// CHECK-NEXT:    %a = nn.linear %[[Z]], %wv, %bv {row_groups = 2 : i64} : tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<1x8xf32>
// CHECK-NEXT:    nn.output "a" %a : tensor<1x8xf32>
// CHECK-NOT:     nn.param "head.probe"

// F32-LABEL: func.func @head
// F32-NOT:     nn.cast
// F32:         nn.linear %{{[^ ]+}}, %x : tensor<2x8xf32>, tensor<6x8xf32> -> tensor<2x6xf32>

func.func @nofold() {
  %x = nn.input "x" : tensor<6x8xf32>
  %w = nn.param "w" : tensor<8x8xf32>
  %q0 = nn.input "q" : tensor<1x8xf32>
  %q = nn.linear %q0, %w : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %k = nn.linear %x, %w : tensor<6x8xf32>, tensor<8x8xf32> -> tensor<6x8xf32>
  %a = nn.attention %q, %k, %k heads=2 scale=0.5 : tensor<1x8xf32>, tensor<6x8xf32>, tensor<6x8xf32> -> tensor<1x8xf32>
  nn.output "a" %a : tensor<1x8xf32>
  func.return
}

// CHECK-LABEL: func.func @nofold
// CHECK:         nn.attention

// Two probe attentions over one key weight: two derived parameters of their own names.
func.func @two() {
  %x = nn.input "x" : tensor<6x8xf32>
  %probe = nn.param "p.probe" : tensor<1x8xf32>
  %w = nn.param "p.attn.w" : tensor<8x8xf32>
  %q = nn.linear %probe, %w : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %k = nn.linear %x, %w : tensor<6x8xf32>, tensor<8x8xf32> -> tensor<6x8xf32>
  %a = nn.attention %q, %k, %k heads=2 scale=0.5 : tensor<1x8xf32>, tensor<6x8xf32>, tensor<6x8xf32> -> tensor<1x8xf32>
  %k2 = nn.linear %x, %w : tensor<6x8xf32>, tensor<8x8xf32> -> tensor<6x8xf32>
  %b = nn.attention %q, %k2, %k2 heads=4 scale=0.25 : tensor<1x8xf32>, tensor<6x8xf32>, tensor<6x8xf32> -> tensor<1x8xf32>
  nn.output "a" %a : tensor<1x8xf32>
  nn.output "b" %b : tensor<1x8xf32>
  func.return
}

// CHECK-LABEL: func.func @two
// CHECK:         nn.param "p.attn.probe_key_scores" {derived = {recipe = "probe_key_scores", query = "p.probe", wq = "p.attn.w", wk = "p.attn.w", heads = 2 : i64
// CHECK:         nn.param "p.attn.probe_key_scores_1" {derived = {recipe = "probe_key_scores", query = "p.probe", wq = "p.attn.w", wk = "p.attn.w", heads = 4 : i64
// CHECK-NOT:     nn.attention

// Projections to another width than x's (8 -> 4): U is [heads, 8], the grouped value linear gives [1, 4].
func.func @narrow() {
  %x = nn.input "x" : tensor<6x8xf32>
  %probe = nn.param "n.probe" : tensor<1x8xf32>
  %w = nn.param "n.w" : tensor<4x8xf32>
  %q = nn.linear %probe, %w : tensor<1x8xf32>, tensor<4x8xf32> -> tensor<1x4xf32>
  %k = nn.linear %x, %w : tensor<6x8xf32>, tensor<4x8xf32> -> tensor<6x4xf32>
  %a = nn.attention %q, %k, %k heads=2 scale=0.5 : tensor<1x4xf32>, tensor<6x4xf32>, tensor<6x4xf32> -> tensor<1x4xf32>
  nn.output "a" %a : tensor<1x4xf32>
  func.return
}

// CHECK-LABEL: func.func @narrow
// CHECK:         nn.param "n.probe_key_scores" {{.*}} : tensor<2x8xf32>
// CHECK:         %a = nn.linear %probe_px, %w {row_groups = 2 : i64} : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<1x4xf32>

// KMULT-LABEL: func.func @head
// KMULT:         nn.attention
// KMULT-NOT:     row_groups
