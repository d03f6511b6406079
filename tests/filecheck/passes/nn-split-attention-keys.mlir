// nn-split-attention-keys: an attention's keys in chunks (each chunk's softmax attention with its row max m and
// sum l), merged by nn.attention_merge. Chosen from the target (tiles=): the largest chunk count whose query
// blocks stay within max_rows rows with min_keys keys per chunk; short attentions (min_rows) are left alone.

// RUN: ipu-opt %s -p 'nn-split-attention-keys{chunks=2 min_rows=4}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-split-attention-keys{chunks=3 min_rows=4}' | filecheck %s --check-prefix=THREE
// RUN: ipu-opt %s -p 'nn-split-attention-keys{chunks=2 min_rows=4}' | ipu-opt | filecheck %s
// RUN: ipu-opt %s -p 'nn-split-attention-keys{tiles=64 min_keys=2 min_rows=4}' | filecheck %s --check-prefix=AUTO
// RUN: ipu-opt %s -p 'nn-split-attention-keys{tiles=2 min_keys=2 min_rows=4}' | filecheck %s --check-prefix=NONE
// RUN: ipu-opt %s -p 'nn-split-attention-keys{tiles=64 min_rows=4}' | filecheck %s --check-prefix=NONE
// RUN: ipu-opt %s -p 'nn-split-attention-keys{chunks=2}' | filecheck %s --check-prefix=NONE

func.func @f() {
  %q = nn.input "q" : tensor<6x8xf16>
  %kv = nn.input "kv" : tensor<7x8xf16>
  %a = nn.attention %q, %kv, %kv heads=2 scale=0.5 : tensor<6x8xf16>, tensor<7x8xf16>, tensor<7x8xf16> -> tensor<6x8xf32>
  nn.output "a" %a : tensor<6x8xf32>
  func.return
}

// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %q = nn.input "q"
// CHECK-NEXT:    %kv = nn.input "kv"
// CHECK-NEXT:    %[[P:[^ ]+]] = nn.attention_partial %q, %kv, %kv heads=2 scale=5.000000e-01 chunks=2 : tensor<6x8xf16>, tensor<7x8xf16>, tensor<7x8xf16> -> tensor<2x6x12xf32>
// CHECK-NEXT:    %a = nn.attention_merge %[[P]] heads=2 : tensor<2x6x12xf32> -> tensor<6x8xf32>
// CHECK-NEXT:    nn.output "a" %a : tensor<6x8xf32>
// CHECK-NOT:     nn.attention %

// THREE: nn.attention_partial {{.*}} chunks=3 : {{.*}} -> tensor<3x6x12xf32>

// 64 tiles, 2 heads: 32 tiles per head; 2 chunks give 16 query blocks of 1 row -> 2 rows (a multiple of the
// chunks), 3 chunks 10 blocks of 1 -> 3 rows: three is the largest within max_rows.
// AUTO: nn.attention_partial {{.*}} chunks=3

// No split: on 2 tiles (one per head: no tile for a second chunk), with the default min_keys (7 keys, 3 per
// chunk < 64) or the default min_rows (6 query rows < 16).
// NONE-NOT: nn.attention_partial
