// The driver's failures are one diagnostic on stderr, a non-zero exit, and no Python traceback.

// RUN: not ipu-opt %s.missing 2>&1 | filecheck %s --check-prefix=NOFILE
// NOFILE: ipu-opt: error: no such file

// RUN: not ipu-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN: ipu-opt: error: bad pass pipeline: Unrecognized passes: ['no-such-pass']
// UNKNOWN-NOT: Traceback

// RUN: not ipu-opt %s --pass-pipeline='builtin.module(canonicalize{bogus=1})' 2>&1 | filecheck %s --check-prefix=OPTION
// OPTION: ipu-opt: error: bad pass pipeline: Provided arguments ["bogus"] not found
// OPTION-NOT: Traceback

// RUN: not ipu-opt %s --pass-pipeline='builtin.module(tile.repeat(canonicalize))' 2>&1 | filecheck %s --check-prefix=NESTED
// NESTED: ipu-opt: error: nested pass manager on 'tile.repeat': only func.func, builtin.module, any are supported

// RUN: not ipu-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | filecheck %s --check-prefix=UNBALANCED
// UNBALANCED: ipu-opt: error: unbalanced parentheses in pass pipeline

// RUN: not ipu-opt %s -t no-such-target 2>&1 | filecheck %s --check-prefix=TARGET
// TARGET: invalid choice: 'no-such-target'

// RUN: not ipu-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=VERIFY
// VERIFY: ipu_opt_errors.mlir:[[# @LINE + 16]]:3: error: nn.reshape: operand 'input' shape 4x8 and result shape 4x4 have different element counts
// VERIFY-NOT: Traceback

// RUN: ipu-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(canonicalize, cse)' | filecheck %s --check-prefix=MLIRSYNTAX
// MLIRSYNTAX: func.func @ok()

func.func @ok() {
  %x = nn.input "x" : tensor<4x8xf32>
  nn.output "y" %x : tensor<4x8xf32>
  func.return
}

// -----

func.func @bad() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}

