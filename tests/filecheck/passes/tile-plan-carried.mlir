// tile-plan's carried layouts (option `carried`): the body yields the carried value in the GEMM's [16, 16] blocks
// (nn.mul takes its first operand's layout) and reads it in those blocks too (the mul's second operand). With
// carried=auto (the default) a trial plan shows that, so the loop carries it in those blocks: one relayout before
// the loop, none at the yield, and only the GEMM's own operands move in the body. carried=entry keeps the layout
// the value enters with (rows): the body relayouts it into the mul's blocks and the yield back into rows. A
// person's `tile.carried_layouts` on the loop is kept as given.

// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=16}' | filecheck %s
// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=16 carried=entry}' | filecheck %s --check-prefix=ENTRY
// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=16}' | ipu-opt --split-input-file | filecheck %s

func.func @carried() {
  %h = nn.input "h" : tensor<64x64xf32>
  %ws = nn.param "encoder.layers.*.w" : tensor<2x64x64xf32>
  %r = nn.repeat 2 carried(%h : tensor<64x64xf32>) stacked(%ws : tensor<2x64x64xf32>) -> tensor<64x64xf32> {
  ^bb0(%a: tensor<64x64xf32>, %w: tensor<64x64xf32>):
    %y = nn.linear %a, %w : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    %z = nn.mul %y, %a : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    nn.yield %z : tensor<64x64xf32>
  }
  nn.output "r" %r : tensor<64x64xf32>
  func.return
}

// CHECK-LABEL: func.func @carried
// CHECK:         %h = nn.input "h" {tile.layout = #tile.layout<shape = [64, 64], block = [4, 64]
// CHECK:         %[[IN:.*]] = tile.relayout %h to <shape = [64, 64], block = [16, 16], replicas = 1
// CHECK-NEXT:    %r = tile.repeat 2 carried(%[[IN]] : tensor<64x64xf32>) {{.*}} layouts [#tile.layout<shape = [64, 64], block = [16, 16], replicas = 1
// CHECK:         ^bb0(%a: tensor<64x64xf32>, %w: tensor<64x64xf32>):
// CHECK-NEXT:      %[[X:.*]] = tile.relayout %a to
// CHECK-NEXT:      %[[W:.*]] = tile.relayout %w to
// CHECK-NEXT:      %y = nn.linear %[[X]], %[[W]]
// CHECK-NEXT:      %z = nn.mul %y, %a
// CHECK-NEXT:      tile.yield %z
// CHECK-NOT:     tile.relayout

// ENTRY-LABEL: func.func @carried
// ENTRY:         %r = tile.repeat 2 carried(%h : tensor<64x64xf32>) {{.*}} layouts [#tile.layout<shape = [64, 64], block = [4, 64]
// ENTRY:           %y = nn.linear
// ENTRY-NEXT:      %[[A:.*]] = tile.relayout %a to <shape = [64, 64], block = [16, 16]
// ENTRY-NEXT:      %z = nn.mul %y, %[[A]]
// ENTRY-NEXT:      %[[Z:.*]] = tile.relayout %z to <shape = [64, 64], block = [4, 64]
// ENTRY-NEXT:      tile.yield %[[Z]]

// -----

// A person's choice (here: rows of 8, neither the entry layout nor the yielded one) is kept, under either option.

func.func @given() {
  %h = nn.input "h" : tensor<64x64xf32>
  %ws = nn.param "encoder.layers.*.w" : tensor<2x64x64xf32>
  %r = nn.repeat 2 carried(%h : tensor<64x64xf32>) stacked(%ws : tensor<2x64x64xf32>) attributes {tile.carried_layouts = [#tile.layout<shape = [64, 64], block = [8, 64], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>]} -> tensor<64x64xf32> {
  ^bb0(%a: tensor<64x64xf32>, %w: tensor<64x64xf32>):
    %y = nn.linear %a, %w : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    %z = nn.mul %y, %a : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
    nn.yield %z : tensor<64x64xf32>
  }
  nn.output "r" %r : tensor<64x64xf32>
  func.return
}

// CHECK-LABEL: func.func @given
// CHECK:         %[[IN:.*]] = tile.relayout %h to <shape = [64, 64], block = [8, 64]
// CHECK-NEXT:    %r = tile.repeat 2 carried(%[[IN]] : tensor<64x64xf32>) {{.*}} layouts [#tile.layout<shape = [64, 64], block = [8, 64]
// CHECK:           %[[Z:.*]] = tile.relayout %z to <shape = [64, 64], block = [8, 64]
// CHECK-NEXT:      tile.yield %[[Z]]

// ENTRY-LABEL: func.func @given
// ENTRY:         %r = tile.repeat 2 carried({{.*}}) {{.*}} layouts [#tile.layout<shape = [64, 64], block = [8, 64]
