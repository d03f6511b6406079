// Verifier diagnostics of the tile dialect and of layouts against the values they lay out (issue 24).

// RUN: ipu-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @tile_id_past_int32() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [16, 64], block = [8, 64], replicas = 1, tiles = #tile.affine<4294967296, 1, 0>, order = "row_major", dtype = f32>} : tensor<16x64xf32>
  func.return
}
// CHECK: #tile.affine: start 4294967296 does not fit in 32 bits (a tile id)

// -----

func.func @tile_table_wraps() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [16, 64], block = [4, 64], replicas = 1, tiles = #tile.affine<1, 2147483647, 0>, order = "row_major", dtype = f32>} : tensor<16x64xf32>
  func.return
}
// CHECK: #tile.affine<1, 2147483647, 0>: tile id 6442450942 for 4 blocks x 1 replicas is outside [0, 2^31)

// -----

func.func @layout_dtype_disagrees() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [16, 64], block = [8, 64], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f16>} : tensor<16x64xf32>
  func.return
}
// CHECK: 'nn.input' op tile.layout has dtype f16 but the result is tensor<16x64xf32>

// -----

func.func @layout_scale_disagrees(%w: tensor<64x64xf32>) {
  %c = nn.cast %w {tile.layout = #tile.layout<shape = [64, 64], block = [16, 64], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f8E4M3FNUZ, scale = -3>, scale = -4 : i64} : tensor<64x64xf32> -> tensor<64x64xf8E4M3FNUZ>
  func.return
}
// CHECK: 'nn.cast' op tile.layout has FP8 scale -3 but the cast produces scale -4

// -----

func.func @layout_shape_disagrees() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [16, 32], block = [8, 32], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<16x64xf32>
  func.return
}
// CHECK: 'nn.input' op tile.layout describes shape [16, 32] but the result is tensor<16x64xf32>
