// RUN: ipu-opt %s --split-input-file | ipu-opt --split-input-file | filecheck %s
// RUN: ipu-opt %s --split-input-file --print-op-generic | ipu-opt --split-input-file | filecheck %s

// Layouts with affine and dense tile tables, a relayout, and every plan kind.

func.func @planned() {
  %x = nn.input "x" {tile.layout = #tile.layout<shape = [16, 64], block = [8, 64], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<16x64xf32>
  %w = nn.param "w" {tile.layout = #tile.layout<shape = [32, 64], block = [16, 64], replicas = 2, tiles = dense<[[0, 2], [1, 3]]> : tensor<2x2xi32>, order = "amp16", dtype = f32>} : tensor<32x64xf32>
  %xr = tile.relayout %x to <shape = [16, 64], block = [8, 64], replicas = 2, tiles = #tile.affine<0, 2, 1>, order = "row_major", dtype = f32> : tensor<16x64xf32> -> tensor<16x64xf32>
  %y = nn.linear %xr, %w {tile.plan = #tile.gemm<grid = [2, 2], panel = [8, 64, 16], base = 0, precision = "f32", cast = "late", worder = "amp16", cycles = 100>, tile.layout = #tile.layout<shape = [16, 32], block = [8, 16], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<16x64xf32>, tensor<32x64xf32> -> tensor<16x32xf32>
  %g = nn.gelu %y "tanh" {tile.plan = #tile.map<kind = "elementwise", cycles = 7>, tile.layout = #tile.layout<shape = [16, 32], block = [8, 16], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<16x32xf32> -> tensor<16x32xf32>
  %q = nn.input "q" {tile.layout = #tile.layout<shape = [16, 32], block = [8, 16], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f16>} : tensor<16x32xf16>
  %k = nn.input "k" {tile.layout = #tile.layout<shape = [16, 32], block = [16, 16], replicas = 2, tiles = #tile.affine<0, 1, 2>, order = "row_major", dtype = f16>} : tensor<16x32xf16>
  %a = nn.attention %q, %k, %k heads=2 scale=0.25 {tile.plan = #tile.attention<kind = "materialized", grid = [2, 2], qblock = 8, kblock = 0, base = 0, precision = "f16", cycles = 900>, tile.layout = #tile.layout<shape = [16, 32], block = [8, 16], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f16>} : tensor<16x32xf16>, tensor<16x32xf16>, tensor<16x32xf16> -> tensor<16x32xf16>
  %r = nn.reshape %g {tile.plan = #tile.single<tile = 3, cycles = 12>, tile.layout = #tile.layout<shape = [1, 16, 32], block = [1, 16, 32], replicas = 1, tiles = #tile.affine<3, 0, 0>, order = "row_major", dtype = f32>} : tensor<16x32xf32> -> tensor<1x16x32xf32>
  func.return
}
// CHECK-LABEL: func.func @planned
// CHECK: tiles = dense<[[0, 2], [1, 3]]> : tensor<2x2xi32>, order = "amp16", dtype = f32>
// CHECK: tile.relayout %{{.*}} to <shape = [16, 64], block = [8, 64], replicas = 2, tiles = #tile.affine<0, 2, 1>, order = "row_major", dtype = f32> : tensor<16x64xf32> -> tensor<16x64xf32>
// CHECK: tile.plan = #tile.gemm<grid = [2, 2], panel = [8, 64, 16], base = 0, precision = "f32", cast = "late", worder = "amp16", cycles = 100>
// CHECK: tile.plan = #tile.map<kind = "elementwise", cycles = 7>
// CHECK: tile.plan = #tile.attention<kind = "materialized", grid = [2, 2], qblock = 8, kblock = 0, base = 0, precision = "f16", cycles = 900>
// CHECK: tile.plan = #tile.single<tile = 3, cycles = 12>

// -----

// A 128-entry irregular table prints as hex; FP8 layouts keep their scale; stacked layouts their layer count.

func.func @tables() {
  %v = nn.param "v" {tile.layout = #tile.layout<shape = [128], block = [1], replicas = 1, tiles = dense<"0x7D0000003500000066000000220000007900000075000000420000004A0000004000000070000000580000002500000047000000010000000D000000500000000B0000002B00000010000000050000005D0000007C0000006B000000690000005E00000027000000240000005400000032000000610000006500000017000000140000005B0000000A0000001B000000340000005700000055000000080000005C000000090000006C00000016000000130000004400000063000000740000002C00000002000000040000001900000060000000370000006E00000011000000730000004B0000000300000052000000560000002A0000000F000000760000001E000000230000001C0000001200000006000000430000004100000048000000180000005A00000039000000150000005300000062000000510000002F000000000000003C000000460000003E0000002D0000006A0000001A000000330000003100000064000000770000007A000000280000003D0000000C0000007E000000200000007B000000590000002E0000003A0000000E00000049000000260000006F0000001F0000007200000068000000300000004D0000004C000000070000006D000000670000003F0000007F00000045000000710000004E0000003B000000360000001D000000290000003800000078000000210000004F0000005F000000"> : tensor<128x1xi32>, order = "row_major", dtype = f32>} : tensor<128xf32>
  %w = nn.param "w8" {tile.layout = #tile.layout<shape = [64, 64], block = [32, 64], replicas = 1, tiles = #tile.affine<4, 1, 0>, order = "row_major", dtype = f8E4M3FNUZ, scale = -4>} : tensor<64x64xf8E4M3FNUZ>
  %s = nn.param "stacked" {tile.layout = #tile.layout<shape = [64], block = [32], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32, stack = 27>} : tensor<27x64xf32>
  func.return
}
// CHECK-LABEL: func.func @tables
// CHECK: tiles = dense<"0x7D000000{{[0-9A-F]+}}"> : tensor<128x1xi32>
// CHECK: dtype = f8E4M3FNUZ, scale = -4>
// CHECK: dtype = f32, stack = 27>

// -----

// The layer loop keeps its block-argument layouts.

func.func @loop() {
  %h = nn.input "h" {tile.layout = #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<4x8xf32>
  %b = nn.param "b" {tile.layout = #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32, stack = 3>} : tensor<3x4x8xf32>
  %r = tile.repeat 3 carried(%h : tensor<4x8xf32>) stacked(%b : tensor<3x4x8xf32>) layouts [#tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>, #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>] -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %bi: tensor<4x8xf32>):
    %y = nn.add %x, %bi {tile.plan = #tile.map<kind = "elementwise", cycles = 5>, tile.layout = #tile.layout<shape = [4, 8], block = [2, 8], replicas = 1, tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    tile.yield %y : tensor<4x8xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @loop
// CHECK: tile.repeat 3 carried(%{{.*}} : tensor<4x8xf32>) stacked(%{{.*}} : tensor<3x4x8xf32>) layouts [#tile.layout<shape = [4, 8]
// CHECK: tile.yield %{{.*}} : tensor<4x8xf32>
