// RUN: not ipu-opt %s -p 'nn-canonicalize{aggressive=true}' 2>&1 | filecheck %s
// CHECK: ipu-opt: error: bad pass pipeline: Provided arguments ["aggressive"] not found

func.func @f() {
  func.return
}
