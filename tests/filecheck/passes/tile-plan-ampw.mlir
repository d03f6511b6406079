// tile-plan's storage order of GEMM weights (`worder` of the plan, option `weights_order`, default "auto"): a
// many-row K split with FP8 x and FP8 weights whose column panels are whole 16-row AMP panels keeps its weight
// blocks as the AMP panels the FP8 GEMM reads in place (`ampw`); their homes are whole panels too, and the host
// permutes the weights into that order at upload. The lowering then prepares no weight panels per inference.
// "row_major" (the option, or a plan written with it before tile-plan) keeps the weights row-major, rearranged
// into panels on the device at every inference.

// RUN: ipu-opt %s -p 'tile-plan{tiles=64 sram_kib=624}' | filecheck %s
// RUN: ipu-opt %s -p 'tile-plan{tiles=64 sram_kib=624 weights_order=row_major}' | filecheck %s --check-prefix=ROW
// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=64 sram_kib=624},memory-plan{tiles=64 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=ASM
// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=64 sram_kib=624 weights_order=row_major},memory-plan{tiles=64 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=ASMROW

func.func @lin() {
  %x = nn.input "x" : tensor<196x256xf32>
  %w = nn.param "w" : tensor<64x256xf32>
  %b = nn.param "b" : tensor<64xf32>
  %wq = nn.cast %w {scale = -4 : i64} : tensor<64x256xf32> -> tensor<64x256xf8E4M3FNUZ>
  %xh = nn.cast %x : tensor<196x256xf32> -> tensor<196x256xf16>
  %xq = nn.cast %xh {scale = -4 : i64} : tensor<196x256xf16> -> tensor<196x256xf8E4M3FNUZ>
  %p = nn.linear_partials %xq, %wq k_chunk=64 : tensor<196x256xf8E4M3FNUZ>, tensor<64x256xf8E4M3FNUZ> -> tensor<4x196x64xf16>
  %y = nn.reduce_sum %p, %b : tensor<4x196x64xf16>, tensor<64xf32> -> tensor<196x64xf32>
  nn.output "y" %y : tensor<196x64xf32>
  func.return
}

// The home of the FP8 weight (the host-folded cast) in whole 16-row panels, `ampw`:
// CHECK:      %wq = nn.cast %w {tile.plan = #tile.map<kind = "host", cycles = 0>, tile.layout = #tile.layout<shape = [64, 256], block = [{{16|32|48|64}}, 64], {{.*}} order = "ampw", dtype = f8E4M3FNUZ, scale = -4>
// CHECK:      tile.relayout %wq to <shape = [64, 256], block = [{{[0-9]+}}, 64], {{.*}} order = "ampw", dtype = f8E4M3FNUZ, scale = -4>
// CHECK:      nn.linear_partials {{.*}} {tile.plan = #tile.gemm<grid = [4, {{[0-9]+}}, {{[0-9]+}}], panel = [{{[0-9]+}}, 64, {{16|32|48|64}}], base = 0, precision = "fp8", cast = "early", worder = "ampw", cycles = {{[0-9]+}}>

// ROW:        %wq = nn.cast %w {{.*}} tile.layout = #tile.layout<shape = [64, 256], block = [{{[0-9]+}}, 64], {{.*}} dtype = f8E4M3FNUZ, scale = -4>
// ROW-NOT:    order = "ampw"
// ROW:        worder = "row_major"

// ASM:        FP8 GEMM
// ASM-NOT:    FP8 weight panels
// ASMROW:     FP8 weight panels
// ASMROW:     FP8 GEMM
