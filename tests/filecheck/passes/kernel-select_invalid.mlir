// RUN: not ipu-opt %s -p 'kernel-select{max_key_chunk=40}' 2>&1 | filecheck %s --check-prefix=OPT
// RUN: not ipu-opt %s -p 'kernel-select{scores=sideways}' 2>&1 | filecheck %s --check-prefix=SCORES
// RUN: not ipu-opt %s -p 'kernel-select{tiles=-1}' 2>&1 | filecheck %s --check-prefix=TILES
// RUN: not ipu-opt %s -p 'kernel-select{tiles=4 sram_kib=100}' 2>&1 | filecheck %s --check-prefix=SRAM
// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=4 sram_kib=624}' -o %t.exchange4.mlir
// RUN: sed 's/rows = "softmax[a-z_]*"/rows = "softmax_fast"/' %t.exchange4.mlir | not ipu-opt -p 'kernel-select{tiles=4}' 2>&1 | filecheck %s --check-prefix=VALUE
// RUN: sed 's/kernel = {rows = "softmax[a-z_]*"}/kernel = "softmax"/' %t.exchange4.mlir | not ipu-opt -p 'kernel-select{tiles=4}' 2>&1 | filecheck %s --check-prefix=DICT
// RUN: ipu-opt %S/kernel-select.mlir -p 'nn-quantize-weights,nn-to-exchange-pipeline{tiles=16 sram_kib=624}' -o %t.exchange16.mlir
// RUN: sed 's/q_scale = "program"/q_scale = "sum"/' %t.exchange16.mlir | not ipu-opt -p 'kernel-select{tiles=16}' 2>&1 | filecheck %s --check-prefix=QSCALE
// RUN: sed 's/k_operand = "rows"/k_operand = "sideways"/' %t.exchange16.mlir | not ipu-opt -p 'kernel-select{tiles=16}' 2>&1 | filecheck %s --check-prefix=KOPERAND

// OPT: ipu-opt: error: kernel-select: max_key_chunk must be 0 or a positive multiple of 16, got 40
// SCORES: ipu-opt: error: kernel-select: scores must be one of ['transposed', 'direct'], got 'sideways'
// TILES: ipu-opt: error: bad pass pipeline: kernel-select: option 'tiles' must be at least 0, got -1
// SRAM: ipu-opt: error: kernel-select: sram_kib must be a multiple of 16
// An edited choice that names no kernel, or a `kernel` attribute that is not a dictionary:
// VALUE: ipu-opt: error: kernel-select: nn.softmax (s): kernel choice rows = 'softmax_fast': expected one of ['softmax', 'softmax_split']
// Q's scale left to a sum where Q comes from none (here a linear that is not split over K):
// QSCALE: ipu-opt: error: kernel-select: nn.attention: kernel choice q_scale = 'sum' needs Q from an f16 K-split sum read by this attention only
// KOPERAND: ipu-opt: error: kernel-select: nn.attention (a): kernel choice k_operand = 'sideways': expected one of ['in_place', 'rows']
// DICT: ipu-opt: error: kernel-select: nn.softmax: the 'kernel' attribute must be a dictionary, got "softmax"

builtin.module {
  func.func @rows() {
    %x = nn.input "x" : tensor<8x64xf32>
    %s = nn.softmax %x axis=-1 : tensor<8x64xf32> -> tensor<8x64xf32>
    nn.output "y" %s : tensor<8x64xf32>
    func.return
  }
}
