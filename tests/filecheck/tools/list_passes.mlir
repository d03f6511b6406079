// `ipu-opt --list-passes`: every pass with its one-line summary and its options (name: type = default, and the
// option's doc where it has one). `xdsl-opt` sees the same passes through the plugin (ipu/universe.py).

// RUN: ipu-opt --list-passes | filecheck %s
// CHECK: canonicalize: Applies all canonicalization patterns.
// CHECK: cse: xDSL's common subexpression elimination
// CHECK: nn-fuse-qkv: Fuses the q/k/v projections
// CHECK-NEXT:     require_attention: bool = true
// CHECK-NEXT:     fuse_kv: bool = false
// CHECK: tile-plan: Chooses a layout for every tensor and a plan for every operator
// CHECK-NEXT:     tiles: int = 0  -- Tiles of the target (0: the full IPU21, 1472 tiles).
// CHECK: ipu-compile-pipeline: nn IR -> placed IR for one target
// CHECK:     stop_after: str = ""  -- Stop after this pass of the pipeline
// CHECK-NOT: (no summary)

// RUN: ipu-opt --help | filecheck %s --check-prefix=HELP
// HELP: --list-passes

// The plugin: xdsl-opt parses the nn dialect and runs this project's passes.
// RUN: xdsl-opt %s -p 'nn-canonicalize,nn-outline-repeat' | filecheck %s --check-prefix=XDSL
// XDSL:      func.func @f() {
// XDSL-NEXT:   %x = nn.input "x" : tensor<4x8xf32>
// XDSL-NEXT:   nn.output "y" %x : tensor<4x8xf32>

func.func @f() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
  nn.output "y" %y : tensor<4x8xf32>
  func.return
}
