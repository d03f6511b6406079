// Bad options of ipu-compile-pipeline: one diagnostic naming the option, a non-zero exit, no traceback.

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=0}' 2>&1 | filecheck %s --check-prefix=TILES
// TILES: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'tiles' must be positive, got 0
// TILES-NOT: Traceback

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 stop_after=tile-planner}' 2>&1 | filecheck %s --check-prefix=STOP
// STOP: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'stop_after': no pass 'tile-planner' in ['nn-fold-probe-attention',

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=-3}' 2>&1 | filecheck %s --check-prefix=NEGATIVE
// NEGATIVE: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'tiles' must be positive, got -3

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{sram_kib=0}' 2>&1 | filecheck %s --check-prefix=SRAM
// SRAM: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'sram_kib' must be positive, got 0

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=2000}' 2>&1 | filecheck %s --check-prefix=MANY
// MANY: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: tiles must be in [1, 1472], got 2000

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{sram_kib=100}' 2>&1 | filecheck %s --check-prefix=KIB
// KIB: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: sram_kib must be a multiple of 16 in [48, 624], got 100

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{sram_kib=1024}' 2>&1 | filecheck %s --check-prefix=BIG
// BIG: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: sram_kib must be a multiple of 16 in [48, 624], got 1024

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{repeat=maybe}' 2>&1 | filecheck %s --check-prefix=BOOL
// BOOL: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'repeat' = 'maybe' has the wrong type (given ('maybe',), expected <class 'bool'>)

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=sixteen}' 2>&1 | filecheck %s --check-prefix=INT
// INT: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'tiles' = 'sixteen' has the wrong type (given ('sixteen',), expected <class 'int'>)

// RUN: not ipu-opt %s --pass-pipeline='builtin.module(ipu-compile-pipeline{tile=16})' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN: ipu-opt: error: bad pass pipeline: Provided arguments ["tile"] not found in expected arguments ["tiles", "sram_kib", "repeat", "split_rows", "scratch", "keep_f16", "activations", "activation_scales", "fp8_linears", "weights_order", "sum_addends", "stop_after"]

func.func @f() {
  %x = nn.input "x" : tensor<4x8xf32>
  nn.output "y" %x : tensor<4x8xf32>
  func.return
}

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 keep_f16=q_porj}' 2>&1 | filecheck %s --check-prefix=KEEP
// KEEP: error: nn-quantize-weights: option 'keep_f16': 'q_porj' is part of no linear's weight parameter name
// KEEP-NOT: Traceback

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 activations=bf16}' 2>&1 | filecheck %s --check-prefix=ACT
// ACT: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'activations' must be one of f16, fp8, mlp, got 'bf16'
// ACT-NOT: Traceback

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 fp8_linears=fc2}' 2>&1 | filecheck %s --check-prefix=FP8ONLY
// FP8ONLY: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'fp8_linears' chooses the linears with FP8 activations: it needs activations=fp8, got activations=mlp

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 weights_order=panels}' 2>&1 | filecheck %s --check-prefix=WORDER
// WORDER: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'weights_order' must be one of auto, row_major, amp16, ampw, got 'panels'
// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 sum_addends=all}' 2>&1 | filecheck %s --check-prefix=ADDENDS
// ADDENDS: ipu-opt: error: bad pass pipeline: ipu-compile-pipeline: option 'sum_addends' must be one of auto, loops, sums, any, none, got 'all'
