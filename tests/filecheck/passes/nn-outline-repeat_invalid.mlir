// Strict mode fails with the first op that differs; bad options fail before any IR is read.

// RUN: not ipu-opt %s --pass-pipeline='builtin.module(nn-outline-repeat{strict=true})' 2>&1 | filecheck %s
// RUN: ipu-opt %s --pass-pipeline='builtin.module(nn-outline-repeat)' | filecheck %s --check-prefix=LENIENT
// RUN: not ipu-opt %s -p 'nn-outline-repeat{min-layers=1}' 2>&1 | filecheck %s --check-prefix=MIN
// RUN: not ipu-opt %s -p 'nn-outline-repeat{strict=true min-layers=4}' 2>&1 | filecheck %s --check-prefix=FEW

// CHECK: ipu-opt: error: nn-outline-repeat: cannot outline the layers of @different_layers: layer 1: no op matches layer 0's %l0_g = nn.gelu -> tensor<4x16xf32>
// CHECK-NOT: Traceback

// LENIENT: nn.param "encoder.layers.1.mlp.fc1.weight"
// LENIENT-NOT: nn.repeat

// MIN: ipu-opt: error: bad pass pipeline: nn-outline-repeat: option 'min-layers' must be at least 2, got 1
// FEW: ipu-opt: error: nn-outline-repeat: cannot outline the layers of @different_layers: 3 layer(s) found, fewer than min-layers = 4

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
