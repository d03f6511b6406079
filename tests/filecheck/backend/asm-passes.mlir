// The backend's passes on a two-layer encoder (width 8, 4 tokens): placed IR -> asm.program (asm-lower) -> the
// loop's code and patch tables (asm-lower-repeat) -> the calling convention and profile sites (asm-lower-calls)
// -> linked code (asm-link). Each stage prints, parses back and gives the same package as `-t ipu-package` on the
// placed IR (byte for byte: the last RUN lines compare them).

// Each stage is compiled once into %t files and the later RUN lines start from them (the compile dominates).
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4}' -t ipu-package -o %t.placed.ipupkg
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4},asm-lower' -o %t.lower.mlir
// RUN: filecheck %s --check-prefix=LOWER < %t.lower.mlir
// RUN: ipu-opt %t.lower.mlir -p asm-lower-repeat -o %t.repeat.mlir
// RUN: filecheck %s --check-prefix=REPEAT < %t.repeat.mlir
// RUN: sed 's/asm.repeat 2 record/asm.repeat 5 record/' %t.lower.mlir | ipu-opt -p asm-lower-repeat | filecheck %s --check-prefix=COUNT
// RUN: ipu-opt %t.repeat.mlir -p asm-lower-calls -o %t.calls.mlir
// RUN: filecheck %s --check-prefix=CALLS < %t.calls.mlir
// RUN: ipu-opt %t.calls.mlir -p asm-link -o %t.linked.mlir
// RUN: filecheck %s --check-prefix=LINK < %t.linked.mlir
// RUN: ipu-opt %t.linked.mlir -t 'ipu-asm{full=true}' | filecheck %s --check-prefix=ASM
// RUN: ipu-opt %t.linked.mlir -t ipu-package -o %t.staged.ipupkg
// RUN: cmp %t.placed.ipupkg %t.staged.ipupkg
// RUN: ipu-opt %t.repeat.mlir -p ipu-asm-pipeline -t ipu-package -o %t.rest.ipupkg
// RUN: cmp %t.placed.ipupkg %t.rest.ipupkg

// The function is replaced by the program: main's calls, the loop as a region with its patch descriptors, the
// data (frames with relocations for the routines they name) and the host bindings.
// LOWER-NOT:  func.func
// LOWER:      asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, code_base = {{[0-9]+}} : i32, code_end = {{[0-9]+}} : i32, library = {{.*}}, sram_kib = 624 : i32, metadata = "{{.*}}"}
// LOWER:      asm.kernel @main supervisor {
// LOWER:        asm.repeat 2 record {{0x[0-9a-f]+}} attributes {what = "tile.repeat x2", forward_table = {{[0-9]+}} : i32, reset_table = {{[0-9]+}} : i32, table_words = {{[0-9]+}} : i32, patch_words = dense<[{{[0-9, ]+}}]> : tensor<{{[0-9]+}}xi64>, patch_strides = dense<"0x{{[0-9A-F]+}}"> : tensor<4x{{[0-9]+}}xi32>} {
// LOWER-NEXT:     asm.kernel_call @xch_timed frame {{0x[0-9a-f]+}} {site_op = {{.*}}what = "exchange timed
// LOWER:          asm.kernel_call @rows_sup frame {{0x[0-9a-f]+}} {site_op = "layer nn.layer_norm layer_norm1", header, all_active, what = "nn.layer_norm (unnamed): rows"}
// LOWER:          asm.kernel_call @gemm_f16_sup_ld128 frame
// LOWER:        }
// LOWER:        asm.br m9
// LOWER:      asm.data "frame gemm_f16_sup_ld128" at {{0x[0-9a-f]+}} {data = dense<{{.*}}> : tensor<4x{{[0-9]+}}xi8>, relocs = dense<{{.*}}> : tensor<{{[0-9]+}}x3xi32>, reloc_labels = ["gemm_f16_init", "gemm_f16_acc"]}
// LOWER:      asm.binding parameter "encoder.layers.*.self_attn.out_proj.weight" {shape = dense<[2, 8, 8]> : tensor<3xi64>, dtype = "f8e4m3fnuz", chunks = dense<
// LOWER:      asm.binding input "h"
// LOWER:      asm.binding output "last_hidden_state"

// The loop's counter code around its body; the tables come from the descriptors, the record points at them.
// REPEAT:      asm.setzi m0, [[REC:[0-9]+]] {comment = "tile.repeat x2"}
// REPEAT-NEXT: asm.setzi m1, 1
// REPEAT-NEXT: asm.st32 m1, m0, mzero, 0
// REPEAT-NEXT: asm.label ".Lrep0"
// REPEAT:      asm.setzi m0, [[REC]] {comment = "tile.repeat: next iteration"}
// REPEAT:      asm.call m10, "rep_patch"
// REPEAT-NEXT: asm.bri ".Lrep0"
// REPEAT-NEXT: asm.label ".Lrep0_end"
// REPEAT-NEXT: asm.ld32 m0, m0, mzero, 2
// REPEAT-NEXT: asm.call m10, "rep_patch" {comment = "back to iteration 0 for the next run"}
// REPEAT-NOT:  asm.repeat
// REPEAT:      asm.data "tile.repeat patch table" at {{0x[0-9a-f]+}} {data = dense<{{.*}}> : tensor<4x{{[0-9]+}}xi8>}
// REPEAT:      asm.data "tile.repeat record" at {{0x[0-9a-f]+}}

// An edited count: the loop runs 5 times (the counter starts at 4).
// COUNT:      {comment = "tile.repeat x2"}
// COUNT-NEXT: asm.setzi m1, 4

// Calls become the calling convention, each profile site a label.
// CALLS:      asm.program @main attributes {{.*}}profile_sites
// CALLS-NOT:  asm.kernel_call
// CALLS:      asm.label ".Lsite0"
// CALLS-NEXT: asm.setzi m0, {{[0-9]+}} {comment = "tile.repeat: carried values in"}
// CALLS-NEXT: asm.call m10, "copy_sup"
// CALLS:      asm.setzi m0, {{[0-9]+}} {comment = "exchange timed
// CALLS-NEXT: asm.call m10, "xch_timed"
// CALLS:      asm.ld32 m1, m0, mzero, 0
// CALLS-NEXT: asm.brz m1, ".Lskip{{[0-9]+}}"
// CALLS-NEXT: asm.add m0, m0, 8
// CALLS-NEXT: asm.call m10, "{{[a-z0-9_]+}}"
// CALLS:      asm.call m10, "gemm_f16_sup_ld128"

// Linked: the routines main and the frames reach, relocations resolved.
// LINK:       asm.program @main attributes {{.*}}linked
// LINK:       asm.kernel @main supervisor
// LINK:       asm.kernel @rep_patch supervisor
// LINK:       asm.kernel @xch_timed supervisor
// LINK:       asm.kernel @gemm_f16_sup_ld128 supervisor
// LINK:       asm.kernel @gemm_f16_init worker
// LINK-NOT:   relocs
// LINK-NOT:   asm.kernel @gemm_fp8_

// ASM:      main:
// ASM:      .Lrep0:
// ASM:          call $lr, gemm_f16_sup_ld128
// ASM:          call $lr, rep_patch  // back to iteration 0 for the next run
// ASM:          br $m9
// ASM:      rep_patch:
// ASM:      gemm_f16_init:

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
