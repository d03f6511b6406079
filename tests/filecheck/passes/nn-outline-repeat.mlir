// Unrolled encoder layers become one nn.repeat over stacked parameters: before and after the other nn passes,
// and not at all when the layers differ. The inputs are the builder's encoder layers at width 8 (4 tokens,
// 2 heads, MLP 16).

// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-outline-repeat)' | filecheck %s
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-quantize-weights, nn-fuse-qkv, nn-outline-repeat)' | filecheck %s --check-prefix=AFTER
// RUN: ipu-opt %s --split-input-file --pass-pipeline='builtin.module(nn-outline-repeat, nn-quantize-weights, nn-fuse-qkv)' | filecheck %s --check-prefix=BEFORE

func.func @two_layers() {
  %h = nn.input "h" : tensor<4x8xf32>
  %l0_ln1_w = nn.param "encoder.layers.0.layer_norm1.weight" : tensor<8xf32>
  %l0_ln1_b = nn.param "encoder.layers.0.layer_norm1.bias" : tensor<8xf32>
  %l0_y = nn.layer_norm %h, %l0_ln1_w, %l0_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wq = nn.param "encoder.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l0_bq = nn.param "encoder.layers.0.self_attn.q_proj.bias" : tensor<8xf32>
  %l0_q = nn.linear %l0_y, %l0_wq, %l0_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wk = nn.param "encoder.layers.0.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l0_bk = nn.param "encoder.layers.0.self_attn.k_proj.bias" : tensor<8xf32>
  %l0_k = nn.linear %l0_y, %l0_wk, %l0_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wv = nn.param "encoder.layers.0.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l0_bv = nn.param "encoder.layers.0.self_attn.v_proj.bias" : tensor<8xf32>
  %l0_v = nn.linear %l0_y, %l0_wv, %l0_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_a = nn.attention %l0_q, %l0_k, %l0_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l0_wo = nn.param "encoder.layers.0.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l0_bo = nn.param "encoder.layers.0.self_attn.out_proj.bias" : tensor<8xf32>
  %l0_o = nn.linear %l0_a, %l0_wo, %l0_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_r = nn.add %h, %l0_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l0_ln2_w = nn.param "encoder.layers.0.layer_norm2.weight" : tensor<8xf32>
  %l0_ln2_b = nn.param "encoder.layers.0.layer_norm2.bias" : tensor<8xf32>
  %l0_z = nn.layer_norm %l0_r, %l0_ln2_w, %l0_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_w1 = nn.param "encoder.layers.0.mlp.fc1.weight" : tensor<16x8xf32>
  %l0_b1 = nn.param "encoder.layers.0.mlp.fc1.bias" : tensor<16xf32>
  %l0_m = nn.linear %l0_z, %l0_w1, %l0_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l0_g = nn.gelu %l0_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l0_w2 = nn.param "encoder.layers.0.mlp.fc2.weight" : tensor<8x16xf32>
  %l0_b2 = nn.param "encoder.layers.0.mlp.fc2.bias" : tensor<8xf32>
  %l0_n = nn.linear %l0_g, %l0_w2, %l0_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_h = nn.add %l0_r, %l0_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_ln1_w = nn.param "encoder.layers.1.layer_norm1.weight" : tensor<8xf32>
  %l1_ln1_b = nn.param "encoder.layers.1.layer_norm1.bias" : tensor<8xf32>
  %l1_y = nn.layer_norm %l0_h, %l1_ln1_w, %l1_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wq = nn.param "encoder.layers.1.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l1_bq = nn.param "encoder.layers.1.self_attn.q_proj.bias" : tensor<8xf32>
  %l1_q = nn.linear %l1_y, %l1_wq, %l1_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wk = nn.param "encoder.layers.1.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l1_bk = nn.param "encoder.layers.1.self_attn.k_proj.bias" : tensor<8xf32>
  %l1_k = nn.linear %l1_y, %l1_wk, %l1_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wv = nn.param "encoder.layers.1.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l1_bv = nn.param "encoder.layers.1.self_attn.v_proj.bias" : tensor<8xf32>
  %l1_v = nn.linear %l1_y, %l1_wv, %l1_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_a = nn.attention %l1_q, %l1_k, %l1_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_wo = nn.param "encoder.layers.1.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l1_bo = nn.param "encoder.layers.1.self_attn.out_proj.bias" : tensor<8xf32>
  %l1_o = nn.linear %l1_a, %l1_wo, %l1_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_r = nn.add %l0_h, %l1_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_ln2_w = nn.param "encoder.layers.1.layer_norm2.weight" : tensor<8xf32>
  %l1_ln2_b = nn.param "encoder.layers.1.layer_norm2.bias" : tensor<8xf32>
  %l1_z = nn.layer_norm %l1_r, %l1_ln2_w, %l1_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_w1 = nn.param "encoder.layers.1.mlp.fc1.weight" : tensor<16x8xf32>
  %l1_b1 = nn.param "encoder.layers.1.mlp.fc1.bias" : tensor<16xf32>
  %l1_m = nn.linear %l1_z, %l1_w1, %l1_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l1_g = nn.gelu %l1_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l1_w2 = nn.param "encoder.layers.1.mlp.fc2.weight" : tensor<8x16xf32>
  %l1_b2 = nn.param "encoder.layers.1.mlp.fc2.bias" : tensor<8xf32>
  %l1_n = nn.linear %l1_g, %l1_w2, %l1_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_h = nn.add %l1_r, %l1_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %pw = nn.param "post_layernorm.weight" : tensor<8xf32>
  %pb = nn.param "post_layernorm.bias" : tensor<8xf32>
  %last = nn.layer_norm %l1_h, %pw, %pb eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  nn.output "last_hidden_state" %last : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @two_layers()
// CHECK-NEXT:    %h = nn.input "h" : tensor<4x8xf32>
// CHECK-NEXT:    %[[LN1W:[^ ,:]+]] = nn.param "encoder.layers.*.layer_norm1.weight" : tensor<2x8xf32>
// CHECK-NEXT:    %[[LN1B:[^ ,:]+]] = nn.param "encoder.layers.*.layer_norm1.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[WQ:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.q_proj.weight" : tensor<2x8x8xf32>
// CHECK-NEXT:    %[[BQ:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.q_proj.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[WK:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.k_proj.weight" : tensor<2x8x8xf32>
// CHECK-NEXT:    %[[BK:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.k_proj.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[WV:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.v_proj.weight" : tensor<2x8x8xf32>
// CHECK-NEXT:    %[[BV:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.v_proj.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[WO:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.out_proj.weight" : tensor<2x8x8xf32>
// CHECK-NEXT:    %[[BO:[^ ,:]+]] = nn.param "encoder.layers.*.self_attn.out_proj.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[LN2W:[^ ,:]+]] = nn.param "encoder.layers.*.layer_norm2.weight" : tensor<2x8xf32>
// CHECK-NEXT:    %[[LN2B:[^ ,:]+]] = nn.param "encoder.layers.*.layer_norm2.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[W1:[^ ,:]+]] = nn.param "encoder.layers.*.mlp.fc1.weight" : tensor<2x16x8xf32>
// CHECK-NEXT:    %[[B1:[^ ,:]+]] = nn.param "encoder.layers.*.mlp.fc1.bias" : tensor<2x16xf32>
// CHECK-NEXT:    %[[W2:[^ ,:]+]] = nn.param "encoder.layers.*.mlp.fc2.weight" : tensor<2x8x16xf32>
// CHECK-NEXT:    %[[B2:[^ ,:]+]] = nn.param "encoder.layers.*.mlp.fc2.bias" : tensor<2x8xf32>
// CHECK-NEXT:    %[[OUT:[^ ,:]+]] = nn.repeat 2 carried(%h : tensor<4x8xf32>) stacked(%[[LN1W]], %[[LN1B]], %[[WQ]], %[[BQ]], %[[WK]], %[[BK]], %[[WV]], %[[BV]], %[[WO]], %[[BO]], %[[LN2W]], %[[LN2B]], %[[W1]], %[[B1]], %[[W2]], %[[B2]] : {{.*}}) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[H:[^ ,:]+]]: tensor<4x8xf32>, %[[ln1w:[^ ,:]+]]: tensor<8xf32>, %[[ln1b:[^ ,:]+]]: tensor<8xf32>, %[[wq:[^ ,:]+]]: tensor<8x8xf32>, %[[bq:[^ ,:]+]]: tensor<8xf32>, %[[wk:[^ ,:]+]]: tensor<8x8xf32>, %[[bk:[^ ,:]+]]: tensor<8xf32>, %[[wv:[^ ,:]+]]: tensor<8x8xf32>, %[[bv:[^ ,:]+]]: tensor<8xf32>, %[[wo:[^ ,:]+]]: tensor<8x8xf32>, %[[bo:[^ ,:]+]]: tensor<8xf32>, %[[ln2w:[^ ,:]+]]: tensor<8xf32>, %[[ln2b:[^ ,:]+]]: tensor<8xf32>, %[[w1:[^ ,:]+]]: tensor<16x8xf32>, %[[b1:[^ ,:]+]]: tensor<16xf32>, %[[w2:[^ ,:]+]]: tensor<8x16xf32>, %[[b2:[^ ,:]+]]: tensor<8xf32>):
// CHECK-NEXT:      %[[Y:[^ ,:]+]] = nn.layer_norm %[[H]], %[[ln1w]], %[[ln1b]] eps=1.000000e-06
// CHECK-NEXT:      %[[Q:[^ ,:]+]] = nn.linear %[[Y]], %[[wq]], %[[bq]]
// CHECK-NEXT:      %[[K:[^ ,:]+]] = nn.linear %[[Y]], %[[wk]], %[[bk]]
// CHECK-NEXT:      %[[V:[^ ,:]+]] = nn.linear %[[Y]], %[[wv]], %[[bv]]
// CHECK-NEXT:      %[[A:[^ ,:]+]] = nn.attention %[[Q]], %[[K]], %[[V]] heads=2 scale=5.000000e-01
// CHECK-NEXT:      %[[O:[^ ,:]+]] = nn.linear %[[A]], %[[wo]], %[[bo]]
// CHECK-NEXT:      %[[R:[^ ,:]+]] = nn.add %[[H]], %[[O]]
// CHECK-NEXT:      %[[Z:[^ ,:]+]] = nn.layer_norm %[[R]], %[[ln2w]], %[[ln2b]]
// CHECK-NEXT:      %[[M:[^ ,:]+]] = nn.linear %[[Z]], %[[w1]], %[[b1]]
// CHECK-NEXT:      %[[G:[^ ,:]+]] = nn.gelu %[[M]] "tanh"
// CHECK-NEXT:      %[[N:[^ ,:]+]] = nn.linear %[[G]], %[[w2]], %[[b2]]
// CHECK-NEXT:      %[[NEXT:[^ ,:]+]] = nn.add %[[R]], %[[N]]
// CHECK-NEXT:      nn.yield %[[NEXT]] : tensor<4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %pw = nn.param "post_layernorm.weight"
// CHECK-NEXT:    %pb = nn.param "post_layernorm.bias"
// CHECK-NEXT:    %last = nn.layer_norm %[[OUT]], %pw, %pb
// CHECK-NEXT:    nn.output "last_hidden_state" %last
// CHECK-NEXT:    func.return
// CHECK-NOT:     encoder.layers.0

// After quantization and q/k/v fusion, the casts and concats of a layer's parameters move into the body.
// AFTER-LABEL: func.func @two_layers()
// AFTER:         nn.repeat 2 carried(%h : tensor<4x8xf32>)
// AFTER-NEXT:    ^{{.*}}(%[[H:[^ ,:]+]]: tensor<4x8xf32>, %[[ln1w:[^ ,:]+]]: tensor<8xf32>, %[[ln1b:[^ ,:]+]]: tensor<8xf32>, %[[wq:[^ ,:]+]]: tensor<8x8xf32>, %[[bq:[^ ,:]+]]: tensor<8xf32>, %[[wk:[^ ,:]+]]: tensor<8x8xf32>, %[[bk:[^ ,:]+]]: tensor<8xf32>, %[[wv:[^ ,:]+]]: tensor<8x8xf32>, %[[bv:[^ ,:]+]]: tensor<8xf32>, %[[wo:[^ ,:]+]]: tensor<8x8xf32>,
// AFTER-NEXT:      %[[ln1w16:[^ ,:]+]] = nn.cast %[[ln1w]] : tensor<8xf32> -> tensor<8xf16>
// AFTER-NEXT:      %[[ln1b16:[^ ,:]+]] = nn.cast %[[ln1b]] : tensor<8xf32> -> tensor<8xf16>
// AFTER-NEXT:      %[[Y16:[^ ,:]+]] = nn.layer_norm %[[H]], %[[ln1w16]], %[[ln1b16]] {{.*}} -> tensor<4x8xf16>
// AFTER-NEXT:      %[[W:[^ ,:]+]] = nn.concat %[[wq]], %[[wk]], %[[wv]] axis=0 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<24x8xf32>
// AFTER-NEXT:      %[[W8:[^ ,:]+]] = nn.cast %[[W]] {scale = -4 : i64} : tensor<24x8xf32> -> tensor<24x8xf8E4M3FNUZ>
// AFTER-NEXT:      %[[B:[^ ,:]+]] = nn.concat %[[bq]], %[[bk]], %[[bv]] axis=0
// AFTER-NEXT:      %[[QKV:[^ ,:]+]] = nn.linear %[[Y16]], %[[W8]], %[[B]] : tensor<4x8xf16>, tensor<24x8xf8E4M3FNUZ>, tensor<24xf32> -> tensor<4x24xf32>
// AFTER-NEXT:      nn.slice %[[QKV]] offsets=[0, 0]
// AFTER-NEXT:      nn.slice %[[QKV]] offsets=[0, 8]
// AFTER-NEXT:      nn.slice %[[QKV]] offsets=[0, 16]
// AFTER-NEXT:      nn.attention
// AFTER-NEXT:      nn.cast %[[wo]] {scale = -4 : i64} : tensor<8x8xf32> -> tensor<8x8xf8E4M3FNUZ>
// AFTER:           nn.yield
// AFTER-NOT:     encoder.layers.0

// Outlining first: the other passes then rewrite the body, acting on the stacked slices.
// BEFORE-LABEL: func.func @two_layers()
// BEFORE:         nn.repeat 2 carried(%h : tensor<4x8xf32>)
// BEFORE-NEXT:    ^{{.*}}(%[[H:[^ ,:]+]]: tensor<4x8xf32>, %[[ln1w:[^ ,:]+]]: tensor<8xf32>, %[[ln1b:[^ ,:]+]]: tensor<8xf32>, %[[wq:[^ ,:]+]]: tensor<8x8xf32>, %[[bq:[^ ,:]+]]: tensor<8xf32>, %[[wk:[^ ,:]+]]: tensor<8x8xf32>, %[[bk:[^ ,:]+]]: tensor<8xf32>, %[[wv:[^ ,:]+]]: tensor<8x8xf32>, %[[bv:[^ ,:]+]]: tensor<8xf32>,
// BEFORE-NEXT:      %[[ln1w16:[^ ,:]+]] = nn.cast %[[ln1w]] : tensor<8xf32> -> tensor<8xf16>
// BEFORE-NEXT:      %[[ln1b16:[^ ,:]+]] = nn.cast %[[ln1b]] : tensor<8xf32> -> tensor<8xf16>
// BEFORE-NEXT:      %[[Y16:[^ ,:]+]] = nn.layer_norm %[[H]], %[[ln1w16]], %[[ln1b16]] {{.*}} -> tensor<4x8xf16>
// BEFORE-NEXT:      %[[W:[^ ,:]+]] = nn.concat %[[wq]], %[[wk]], %[[wv]] axis=0
// BEFORE-NEXT:      %[[W8:[^ ,:]+]] = nn.cast %[[W]] {scale = -4 : i64} : tensor<24x8xf32> -> tensor<24x8xf8E4M3FNUZ>
// BEFORE-NEXT:      %[[B:[^ ,:]+]] = nn.concat %[[bq]], %[[bk]], %[[bv]] axis=0
// BEFORE-NEXT:      nn.linear %[[Y16]], %[[W8]], %[[B]]
// BEFORE:           nn.yield

// -----

func.func @different_layers() {
  %h = nn.input "h" : tensor<4x8xf32>
  %l0_ln1_w = nn.param "encoder.layers.0.layer_norm1.weight" : tensor<8xf32>
  %l0_ln1_b = nn.param "encoder.layers.0.layer_norm1.bias" : tensor<8xf32>
  %l0_y = nn.layer_norm %h, %l0_ln1_w, %l0_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wq = nn.param "encoder.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l0_bq = nn.param "encoder.layers.0.self_attn.q_proj.bias" : tensor<8xf32>
  %l0_q = nn.linear %l0_y, %l0_wq, %l0_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wk = nn.param "encoder.layers.0.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l0_bk = nn.param "encoder.layers.0.self_attn.k_proj.bias" : tensor<8xf32>
  %l0_k = nn.linear %l0_y, %l0_wk, %l0_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wv = nn.param "encoder.layers.0.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l0_bv = nn.param "encoder.layers.0.self_attn.v_proj.bias" : tensor<8xf32>
  %l0_v = nn.linear %l0_y, %l0_wv, %l0_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_a = nn.attention %l0_q, %l0_k, %l0_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l0_wo = nn.param "encoder.layers.0.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l0_bo = nn.param "encoder.layers.0.self_attn.out_proj.bias" : tensor<8xf32>
  %l0_o = nn.linear %l0_a, %l0_wo, %l0_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_r = nn.add %h, %l0_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l0_ln2_w = nn.param "encoder.layers.0.layer_norm2.weight" : tensor<8xf32>
  %l0_ln2_b = nn.param "encoder.layers.0.layer_norm2.bias" : tensor<8xf32>
  %l0_z = nn.layer_norm %l0_r, %l0_ln2_w, %l0_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_w1 = nn.param "encoder.layers.0.mlp.fc1.weight" : tensor<16x8xf32>
  %l0_b1 = nn.param "encoder.layers.0.mlp.fc1.bias" : tensor<16xf32>
  %l0_m = nn.linear %l0_z, %l0_w1, %l0_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l0_g = nn.gelu %l0_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l0_w2 = nn.param "encoder.layers.0.mlp.fc2.weight" : tensor<8x16xf32>
  %l0_b2 = nn.param "encoder.layers.0.mlp.fc2.bias" : tensor<8xf32>
  %l0_n = nn.linear %l0_g, %l0_w2, %l0_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_h = nn.add %l0_r, %l0_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_ln1_w = nn.param "encoder.layers.1.layer_norm1.weight" : tensor<8xf32>
  %l1_ln1_b = nn.param "encoder.layers.1.layer_norm1.bias" : tensor<8xf32>
  %l1_y = nn.layer_norm %l0_h, %l1_ln1_w, %l1_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wq = nn.param "encoder.layers.1.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l1_bq = nn.param "encoder.layers.1.self_attn.q_proj.bias" : tensor<8xf32>
  %l1_q = nn.linear %l1_y, %l1_wq, %l1_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wk = nn.param "encoder.layers.1.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l1_bk = nn.param "encoder.layers.1.self_attn.k_proj.bias" : tensor<8xf32>
  %l1_k = nn.linear %l1_y, %l1_wk, %l1_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wv = nn.param "encoder.layers.1.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l1_bv = nn.param "encoder.layers.1.self_attn.v_proj.bias" : tensor<8xf32>
  %l1_v = nn.linear %l1_y, %l1_wv, %l1_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_a = nn.attention %l1_q, %l1_k, %l1_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_wo = nn.param "encoder.layers.1.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l1_bo = nn.param "encoder.layers.1.self_attn.out_proj.bias" : tensor<8xf32>
  %l1_o = nn.linear %l1_a, %l1_wo, %l1_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_r = nn.add %l0_h, %l1_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_ln2_w = nn.param "encoder.layers.1.layer_norm2.weight" : tensor<8xf32>
  %l1_ln2_b = nn.param "encoder.layers.1.layer_norm2.bias" : tensor<8xf32>
  %l1_z = nn.layer_norm %l1_r, %l1_ln2_w, %l1_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_w1 = nn.param "encoder.layers.1.mlp.fc1.weight" : tensor<16x8xf32>
  %l1_b1 = nn.param "encoder.layers.1.mlp.fc1.bias" : tensor<16xf32>
  %l1_m = nn.linear %l1_z, %l1_w1, %l1_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l1_g = nn.gelu %l1_m "none" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l1_w2 = nn.param "encoder.layers.1.mlp.fc2.weight" : tensor<8x16xf32>
  %l1_b2 = nn.param "encoder.layers.1.mlp.fc2.bias" : tensor<8xf32>
  %l1_n = nn.linear %l1_g, %l1_w2, %l1_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_h = nn.add %l1_r, %l1_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l2_ln1_w = nn.param "encoder.layers.2.layer_norm1.weight" : tensor<8xf32>
  %l2_ln1_b = nn.param "encoder.layers.2.layer_norm1.bias" : tensor<8xf32>
  %l2_y = nn.layer_norm %l1_h, %l2_ln1_w, %l2_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_wq = nn.param "encoder.layers.2.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l2_bq = nn.param "encoder.layers.2.self_attn.q_proj.bias" : tensor<8xf32>
  %l2_q = nn.linear %l2_y, %l2_wq, %l2_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_wk = nn.param "encoder.layers.2.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l2_bk = nn.param "encoder.layers.2.self_attn.k_proj.bias" : tensor<8xf32>
  %l2_k = nn.linear %l2_y, %l2_wk, %l2_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_wv = nn.param "encoder.layers.2.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l2_bv = nn.param "encoder.layers.2.self_attn.v_proj.bias" : tensor<8xf32>
  %l2_v = nn.linear %l2_y, %l2_wv, %l2_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_a = nn.attention %l2_q, %l2_k, %l2_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l2_wo = nn.param "encoder.layers.2.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l2_bo = nn.param "encoder.layers.2.self_attn.out_proj.bias" : tensor<8xf32>
  %l2_o = nn.linear %l2_a, %l2_wo, %l2_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_r = nn.add %l1_h, %l2_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l2_ln2_w = nn.param "encoder.layers.2.layer_norm2.weight" : tensor<8xf32>
  %l2_ln2_b = nn.param "encoder.layers.2.layer_norm2.bias" : tensor<8xf32>
  %l2_z = nn.layer_norm %l2_r, %l2_ln2_w, %l2_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_w1 = nn.param "encoder.layers.2.mlp.fc1.weight" : tensor<16x8xf32>
  %l2_b1 = nn.param "encoder.layers.2.mlp.fc1.bias" : tensor<16xf32>
  %l2_m = nn.linear %l2_z, %l2_w1, %l2_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l2_g = nn.gelu %l2_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l2_w2 = nn.param "encoder.layers.2.mlp.fc2.weight" : tensor<8x16xf32>
  %l2_b2 = nn.param "encoder.layers.2.mlp.fc2.bias" : tensor<8xf32>
  %l2_n = nn.linear %l2_g, %l2_w2, %l2_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_h = nn.add %l2_r, %l2_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %pw = nn.param "post_layernorm.weight" : tensor<8xf32>
  %pb = nn.param "post_layernorm.bias" : tensor<8xf32>
  %last = nn.layer_norm %l2_h, %pw, %pb eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  nn.output "last_hidden_state" %last : tensor<4x8xf32>
  func.return
}

// Layer 1 uses the exact GELU: the layers differ and the IR stays as it is.
// CHECK-LABEL: func.func @different_layers()
// CHECK-NOT:     nn.repeat
// CHECK:         nn.param "encoder.layers.2.mlp.fc2.bias"
// CHECK-NOT:     nn.repeat
// AFTER-LABEL: func.func @different_layers()
// AFTER-NOT:     nn.repeat
// BEFORE-LABEL: func.func @different_layers()
// BEFORE-NOT:    nn.repeat

// -----

func.func @three_layers() {
  %h = nn.input "h" : tensor<4x8xf32>
  %l0_ln1_w = nn.param "encoder.layers.0.layer_norm1.weight" : tensor<8xf32>
  %l0_ln1_b = nn.param "encoder.layers.0.layer_norm1.bias" : tensor<8xf32>
  %l0_y = nn.layer_norm %h, %l0_ln1_w, %l0_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wq = nn.param "encoder.layers.0.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l0_bq = nn.param "encoder.layers.0.self_attn.q_proj.bias" : tensor<8xf32>
  %l0_q = nn.linear %l0_y, %l0_wq, %l0_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wk = nn.param "encoder.layers.0.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l0_bk = nn.param "encoder.layers.0.self_attn.k_proj.bias" : tensor<8xf32>
  %l0_k = nn.linear %l0_y, %l0_wk, %l0_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_wv = nn.param "encoder.layers.0.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l0_bv = nn.param "encoder.layers.0.self_attn.v_proj.bias" : tensor<8xf32>
  %l0_v = nn.linear %l0_y, %l0_wv, %l0_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_a = nn.attention %l0_q, %l0_k, %l0_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l0_wo = nn.param "encoder.layers.0.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l0_bo = nn.param "encoder.layers.0.self_attn.out_proj.bias" : tensor<8xf32>
  %l0_o = nn.linear %l0_a, %l0_wo, %l0_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_r = nn.add %h, %l0_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l0_ln2_w = nn.param "encoder.layers.0.layer_norm2.weight" : tensor<8xf32>
  %l0_ln2_b = nn.param "encoder.layers.0.layer_norm2.bias" : tensor<8xf32>
  %l0_z = nn.layer_norm %l0_r, %l0_ln2_w, %l0_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_w1 = nn.param "encoder.layers.0.mlp.fc1.weight" : tensor<16x8xf32>
  %l0_b1 = nn.param "encoder.layers.0.mlp.fc1.bias" : tensor<16xf32>
  %l0_m = nn.linear %l0_z, %l0_w1, %l0_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l0_g = nn.gelu %l0_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l0_w2 = nn.param "encoder.layers.0.mlp.fc2.weight" : tensor<8x16xf32>
  %l0_b2 = nn.param "encoder.layers.0.mlp.fc2.bias" : tensor<8xf32>
  %l0_n = nn.linear %l0_g, %l0_w2, %l0_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l0_h = nn.add %l0_r, %l0_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_ln1_w = nn.param "encoder.layers.1.layer_norm1.weight" : tensor<8xf32>
  %l1_ln1_b = nn.param "encoder.layers.1.layer_norm1.bias" : tensor<8xf32>
  %l1_y = nn.layer_norm %l0_h, %l1_ln1_w, %l1_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wq = nn.param "encoder.layers.1.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l1_bq = nn.param "encoder.layers.1.self_attn.q_proj.bias" : tensor<8xf32>
  %l1_q = nn.linear %l1_y, %l1_wq, %l1_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wk = nn.param "encoder.layers.1.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l1_bk = nn.param "encoder.layers.1.self_attn.k_proj.bias" : tensor<8xf32>
  %l1_k = nn.linear %l1_y, %l1_wk, %l1_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_wv = nn.param "encoder.layers.1.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l1_bv = nn.param "encoder.layers.1.self_attn.v_proj.bias" : tensor<8xf32>
  %l1_v = nn.linear %l1_y, %l1_wv, %l1_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_a = nn.attention %l1_q, %l1_k, %l1_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_wo = nn.param "encoder.layers.1.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l1_bo = nn.param "encoder.layers.1.self_attn.out_proj.bias" : tensor<8xf32>
  %l1_o = nn.linear %l1_a, %l1_wo, %l1_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_r = nn.add %l0_h, %l1_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l1_ln2_w = nn.param "encoder.layers.1.layer_norm2.weight" : tensor<8xf32>
  %l1_ln2_b = nn.param "encoder.layers.1.layer_norm2.bias" : tensor<8xf32>
  %l1_z = nn.layer_norm %l1_r, %l1_ln2_w, %l1_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_w1 = nn.param "encoder.layers.1.mlp.fc1.weight" : tensor<16x8xf32>
  %l1_b1 = nn.param "encoder.layers.1.mlp.fc1.bias" : tensor<16xf32>
  %l1_m = nn.linear %l1_z, %l1_w1, %l1_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l1_g = nn.gelu %l1_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l1_w2 = nn.param "encoder.layers.1.mlp.fc2.weight" : tensor<8x16xf32>
  %l1_b2 = nn.param "encoder.layers.1.mlp.fc2.bias" : tensor<8xf32>
  %l1_n = nn.linear %l1_g, %l1_w2, %l1_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l1_h = nn.add %l1_r, %l1_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l2_ln1_w = nn.param "encoder.layers.2.layer_norm1.weight" : tensor<8xf32>
  %l2_ln1_b = nn.param "encoder.layers.2.layer_norm1.bias" : tensor<8xf32>
  %l2_y = nn.layer_norm %l1_h, %l2_ln1_w, %l2_ln1_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_wq = nn.param "encoder.layers.2.self_attn.q_proj.weight" : tensor<8x8xf32>
  %l2_bq = nn.param "encoder.layers.2.self_attn.q_proj.bias" : tensor<8xf32>
  %l2_q = nn.linear %l2_y, %l2_wq, %l2_bq : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_wk = nn.param "encoder.layers.2.self_attn.k_proj.weight" : tensor<8x8xf32>
  %l2_bk = nn.param "encoder.layers.2.self_attn.k_proj.bias" : tensor<8xf32>
  %l2_k = nn.linear %l2_y, %l2_wk, %l2_bk : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_wv = nn.param "encoder.layers.2.self_attn.v_proj.weight" : tensor<8x8xf32>
  %l2_bv = nn.param "encoder.layers.2.self_attn.v_proj.bias" : tensor<8xf32>
  %l2_v = nn.linear %l2_y, %l2_wv, %l2_bv : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_a = nn.attention %l2_q, %l2_k, %l2_v heads=2 scale=5.000000e-01 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l2_wo = nn.param "encoder.layers.2.self_attn.out_proj.weight" : tensor<8x8xf32>
  %l2_bo = nn.param "encoder.layers.2.self_attn.out_proj.bias" : tensor<8xf32>
  %l2_o = nn.linear %l2_a, %l2_wo, %l2_bo : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_r = nn.add %l1_h, %l2_o : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %l2_ln2_w = nn.param "encoder.layers.2.layer_norm2.weight" : tensor<8xf32>
  %l2_ln2_b = nn.param "encoder.layers.2.layer_norm2.bias" : tensor<8xf32>
  %l2_z = nn.layer_norm %l2_r, %l2_ln2_w, %l2_ln2_b eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_w1 = nn.param "encoder.layers.2.mlp.fc1.weight" : tensor<16x8xf32>
  %l2_b1 = nn.param "encoder.layers.2.mlp.fc1.bias" : tensor<16xf32>
  %l2_m = nn.linear %l2_z, %l2_w1, %l2_b1 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %l2_g = nn.gelu %l2_m "tanh" : tensor<4x16xf32> -> tensor<4x16xf32>
  %l2_w2 = nn.param "encoder.layers.2.mlp.fc2.weight" : tensor<8x16xf32>
  %l2_b2 = nn.param "encoder.layers.2.mlp.fc2.bias" : tensor<8xf32>
  %l2_n = nn.linear %l2_g, %l2_w2, %l2_b2 : tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %l2_h = nn.add %l2_r, %l2_n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %pw = nn.param "post_layernorm.weight" : tensor<8xf32>
  %pb = nn.param "post_layernorm.bias" : tensor<8xf32>
  %last = nn.layer_norm %l2_h, %pw, %pb eps=1.000000e-06 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  nn.output "last_hidden_state" %last : tensor<4x8xf32>
  func.return
}

// Three layers: the middle one is found by the next layer's parameters, the last one by matching.
// CHECK-LABEL: func.func @three_layers()
// CHECK:         nn.param "encoder.layers.*.mlp.fc2.bias" : tensor<3x8xf32>
// CHECK-NEXT:    %[[OUT:[^ ,:]+]] = nn.repeat 3 carried(%h : tensor<4x8xf32>)
// CHECK:         nn.yield
// CHECK-NEXT:    }
// CHECK-NOT:     encoder.layers.{{[0-9]}}
// CHECK:         %last = nn.layer_norm %[[OUT]], %pw, %pb
// AFTER-LABEL: func.func @three_layers()
// AFTER:         nn.repeat 3
// BEFORE-LABEL: func.func @three_layers()
// BEFORE:        nn.repeat 3
