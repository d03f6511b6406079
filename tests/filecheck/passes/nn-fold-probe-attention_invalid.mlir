// nn-fold-probe-attention's options are checked when the pipeline is built: one line naming the option.
// RUN: not ipu-opt %s -p 'nn-fold-probe-attention{tiles=-1}' 2>&1 | filecheck %s --check-prefix=TILES
// RUN: not ipu-opt %s -p 'nn-fold-probe-attention{k_multiple=0}' 2>&1 | filecheck %s --check-prefix=KMULT

// TILES: ipu-opt: error: bad pass pipeline: nn-fold-probe-attention: option 'tiles' must be >= 0, got -1
// KMULT: ipu-opt: error: bad pass pipeline: nn-fold-probe-attention: option 'k_multiple' must be >= 1, got 0

func.func @f() {
  func.return
}
