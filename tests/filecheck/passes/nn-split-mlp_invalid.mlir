// RUN: not ipu-opt %s -p 'nn-split-mlp{max_k=8}' 2>&1 | filecheck %s
// CHECK: ipu-opt: error: bad pass pipeline: nn-split-mlp: option 'max_k' must be >= 16, got 8
// CHECK-NOT: Traceback
func.func @f() {
  func.return
}

// RUN: not ipu-opt %s -p 'nn-split-mlp{order=zigzag}' 2>&1 | filecheck %s --check-prefix=ORDER
// ORDER: ipu-opt: error: bad pass pipeline: nn-split-mlp: option 'order' must be one of stages, parts, got 'zigzag'
