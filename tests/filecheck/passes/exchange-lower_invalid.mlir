// RUN: not ipu-opt %s -p 'exchange-lower{sram_kib=7}' 2>&1 | filecheck %s --check-prefix=SRAM
// RUN: ipu-opt %s --split-input-file -p 'exchange-lower{tiles=2 sram_kib=256}' --verify-diagnostics 2>&1 | filecheck %s

// SRAM: ipu-opt: error: bad pass pipeline: sram_kib must be a multiple of 16

func.func @no_layout(%x: tensor<4xf32>) {
  %y = tile.relayout %x to <shape = [4], block = [2], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32> : tensor<4xf32> -> tensor<4xf32>
  func.return
}
// CHECK: exchange-lower: tile.relayout: its operand has no layout

// -----

func.func @tile_out_of_target() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [4], block = [4], replicas = 1, tiles = #tile.affine<0, 0, 0>, order = "row_major", dtype = f32>} : tensor<4xf32>
  %y = tile.relayout %x to <shape = [4], block = [2], replicas = 1, tiles = #tile.affine<1, 1, 0>, order = "row_major", dtype = f32> : tensor<4xf32> -> tensor<4xf32>
  func.return
}
// CHECK: exchange-lower: tile.relayout: a layout names a tile >= the target's 2 tiles
