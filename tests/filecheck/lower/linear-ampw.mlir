// An unsplit linear with f16 x and an f16 weight whose column panels are whole 16-row panels, in one K chunk:
// tile-plan stores its weight blocks as the F16 AMP's panels (`worder = "ampw"`, the home too) and the GEMM reads
// them in place (kernel-select's coef = "ld64": the blocks may lie in any memory): no "weight panels" call per
// inference. `weights_order=row_major`: the panels made on the device.

// RUN: ipu-opt %s -p 'tile-plan{tiles=16 sram_kib=624}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=16 sram_kib=624},lowering-storage{tiles=16 sram_kib=624},memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=ASM
// RUN: ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=16 sram_kib=624 weights_order=row_major},lowering-storage{tiles=16 sram_kib=624},memory-plan{tiles=16 sram_kib=624}' | python -m ipu.backend.lower - --print-asm | filecheck %s --check-prefix=ROW

func.func @f16() {
  %x = nn.input "x" : tensor<48x128xf16>
  %w = nn.param "w" : tensor<64x128xf16>
  %b = nn.param "b" : tensor<64xf32>
  %y = nn.linear %x, %w, %b : tensor<48x128xf16>, tensor<64x128xf16>, tensor<64xf32> -> tensor<48x64xf32>
  nn.output "y" %y : tensor<48x64xf32>
  func.return
}

// CHECK:      %w = nn.param "w" {tile.layout = #tile.layout<shape = [64, 128], block = [16, {{[0-9]+}}], {{.*}} order = "ampw", dtype = f16>}
// CHECK:      tile.relayout %w to <shape = [64, 128], block = [16, 128], {{.*}} order = "ampw", dtype = f16>
// CHECK:      nn.linear {{.*}} worder = "ampw"

// ASM-NOT:    weight panels
// ASM:        // nn.linear (y): GEMM
// ASM-NEXT:   ld32 $m1, $m0, $mzero, 0
// ASM-NEXT:   brz $m1, .Lskip{{[0-9]+}}
// ASM-NEXT:   add $m0, $m0, 8
// ASM-NEXT:   call $lr, gemm_f16_sup_ld64
// ASM-NOT:    weight panels

// ROW:        // nn.linear (y): weight panels
// ROW:        // nn.linear (y): GEMM
