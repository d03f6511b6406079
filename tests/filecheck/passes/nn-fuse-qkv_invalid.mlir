// Bad options of nn-fuse-qkv are one-line pipeline errors.

// RUN: not ipu-opt %s -p 'nn-fuse-qkv{require-attention=maybe}' 2>&1 | filecheck %s --check-prefix=VALUE
// RUN: not ipu-opt %s -p 'nn-fuse-qkv{fuse-q=true}' 2>&1 | filecheck %s --check-prefix=UNKNOWN

// VALUE: ipu-opt: error: bad pass pipeline:
// VALUE-NOT: Traceback
// UNKNOWN: ipu-opt: error: bad pass pipeline: Provided arguments ["fuse_q"] not found
// UNKNOWN-NOT: Traceback

func.func @empty() {
  func.return
}
