// `-t ipu-package` / `-t ipu-asm` on input that is not placed IR, and a binary package without -o: one diagnostic,
// a non-zero exit, and no package file left behind.

// RUN: rm -f %t.ipupkg
// RUN: not ipu-opt %s -t ipu-package -o %t.ipupkg 2>&1 | filecheck %s --check-prefix=UNPLACED
// UNPLACED: ipu-opt: error: -t ipu-package: the input has no asm.program and is not placed IR (@mlp has no memory.plan): run memory-plan or ipu-compile-pipeline first
// UNPLACED-NOT: Traceback
// RUN: not test -e %t.ipupkg

// Only the nn passes: still no memory plan.
// RUN: not ipu-opt %s -p nn-quantize-weights -t ipu-package -o %t.ipupkg 2>&1 | filecheck %s --check-prefix=UNPLACED

// RUN: not ipu-opt %s -t ipu-asm 2>&1 | filecheck %s --check-prefix=ASM
// ASM: ipu-opt: error: -t ipu-asm: the input has no asm.program or asm.kernel ops and is not placed IR (@mlp has no memory.plan): run memory-plan or ipu-compile-pipeline first

// RUN: not ipu-opt %s -p 'ipu-compile-pipeline{tiles=4}' -t ipu-package 2>&1 | filecheck %s --check-prefix=STDOUT
// STDOUT: ipu-opt: error: -t ipu-package writes a binary package: give -o FILE (it is not written to stdout)

// RUN: not ipu-opt %s --split-input-file -t ipu-package -o %t.ipupkg 2>&1 | filecheck %s --check-prefix=SPLIT
// SPLIT: ipu-opt: error: -t ipu-package writes one package: --split-input-file is not supported

// A module of asm kernels, no function: not placed IR either.
// RUN: not ipu-opt %S/../asm/asm_ops.mlir -t ipu-package -o %t.ipupkg 2>&1 | filecheck %s --check-prefix=NOFUNC
// NOFUNC: ipu-opt: error: -t ipu-package: the input has no asm.program and is not placed IR (expected one func.func, found 0): run memory-plan or ipu-compile-pipeline first

func.func @mlp() {
  %x = nn.input "x" : tensor<24x64xf32>
  %w = nn.param "w" : tensor<32x64xf32>
  %y = nn.linear %x, %w : tensor<24x64xf32>, tensor<32x64xf32> -> tensor<24x32xf32>
  nn.output "y" %y : tensor<24x32xf32>
  func.return
}
