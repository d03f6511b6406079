// nn-split-k: a linear with few rows becomes partial products over K chunks, their sum and the bias added as
// [M, N] rows (a reshape, for M > 1 a concat, of the bias parameter: host-folded later). The chunk is the
// cheapest by the cost model when the split beats the unsplit GEMM on the given tiles; f32 activations (not
// quantized), rows over max_rows and too few tiles are left alone. A many-row linear whose x is a layer norm's
// result is split too (many_rows, default on): f16 partials summed with the bias (no add) into its own f16; so is
// one whose x the host makes from an input (x5, as the patch embedding's patches), but not one whose x another
// op computes on the tiles (x6: its layout would be tile-plan's choice).

// RUN: ipu-opt %s -p 'nn-split-k' | filecheck %s
// RUN: ipu-opt %s -p 'nn-split-k{tiles=16}' | filecheck %s --check-prefix=KEEP
// RUN: ipu-opt %s -p 'nn-split-k{max_rows=1 many_rows=false}' | filecheck %s --check-prefix=ROWS
// RUN: ipu-opt %s -p 'nn-split-k' | ipu-opt | filecheck %s
// RUN: ipu-opt %s -p 'nn-split-k{many_rows=false}' | filecheck %s --check-prefix=FEW

func.func @head() {
  %x = nn.input "x" : tensor<1x1152xf16>
  %w = nn.param "w" : tensor<1152x1152xf16>
  %b = nn.param "b" : tensor<1152xf32>
  %y = nn.linear %x, %w, %b : tensor<1x1152xf16>, tensor<1152x1152xf16>, tensor<1152xf32> -> tensor<1x1152xf32>
  nn.output "y" %y : tensor<1x1152xf32>
  %x2 = nn.input "x2" : tensor<2x2160xf16>
  %w2 = nn.param "w2" : tensor<1152x2160xf8E4M3FNUZ>
  %b2 = nn.param "b2" : tensor<1152xf32>
  %y2 = nn.linear %x2, %w2, %b2 : tensor<2x2160xf16>, tensor<1152x2160xf8E4M3FNUZ>, tensor<1152xf32> -> tensor<2x1152xf16>
  nn.output "y2" %y2 : tensor<2x1152xf16>
  %x3 = nn.input "x3" : tensor<1x1152xf32>
  %y3 = nn.linear %x3, %w : tensor<1x1152xf32>, tensor<1152x1152xf16> -> tensor<1x1152xf32>
  nn.output "y3" %y3 : tensor<1x1152xf32>
  %e4 = nn.input "e4" : tensor<729x1152xf32>
  %g4 = nn.param "g4" : tensor<1152xf32>
  %x4 = nn.layer_norm %e4, %g4, %b2 eps=1.0e-06 : tensor<729x1152xf32>, tensor<1152xf32>, tensor<1152xf32> -> tensor<729x1152xf16>
  %w4 = nn.param "w4" : tensor<1152x1152xf8E4M3FNUZ>
  %y4 = nn.linear %x4, %w4, %b2 : tensor<729x1152xf16>, tensor<1152x1152xf8E4M3FNUZ>, tensor<1152xf32> -> tensor<729x1152xf16>
  nn.output "y4" %y4 : tensor<729x1152xf16>
  %x5 = nn.input "x5" : tensor<729x1152xf16>
  %y5 = nn.linear %x5, %w4, %b2 : tensor<729x1152xf16>, tensor<1152x1152xf8E4M3FNUZ>, tensor<1152xf32> -> tensor<729x1152xf16>
  nn.output "y5" %y5 : tensor<729x1152xf16>
  %x6 = nn.add %x5, %x5 : tensor<729x1152xf16>, tensor<729x1152xf16> -> tensor<729x1152xf16>
  %y6 = nn.linear %x6, %w4, %b2 : tensor<729x1152xf16>, tensor<1152x1152xf8E4M3FNUZ>, tensor<1152xf32> -> tensor<729x1152xf16>
  nn.output "y6" %y6 : tensor<729x1152xf16>
  func.return
}

// CHECK-LABEL: func.func @head
// CHECK:         %[[P:[^ ]+]] = nn.linear_partials %x, %w k_chunk=128 : tensor<1x1152xf16>, tensor<1152x1152xf16> -> tensor<9x1x1152xf32>
// CHECK-NEXT:    %[[S:[^ ]+]] = nn.reduce_sum %[[P]] : tensor<9x1x1152xf32> -> tensor<1x1152xf32>
// CHECK-NEXT:    %[[B:[^ ]+]] = nn.reshape %b : tensor<1152xf32> -> tensor<1x1152xf32>
// CHECK-NEXT:    %y = nn.add %[[S]], %[[B]] : tensor<1x1152xf32>, tensor<1x1152xf32> -> tensor<1x1152xf32>
// CHECK-NEXT:    nn.output "y" %y
// CHECK:         %[[P2:[^ ]+]] = nn.linear_partials %x2, %w2 k_chunk={{[0-9]+}} : tensor<2x2160xf16>, tensor<1152x2160xf8E4M3FNUZ> -> tensor<{{[0-9]+}}x2x1152xf32>
// CHECK-NEXT:    %[[S2:[^ ]+]] = nn.reduce_sum %[[P2]]
// CHECK-NEXT:    %[[R2:[^ ]+]] = nn.reshape %b2 : tensor<1152xf32> -> tensor<1x1152xf32>
// CHECK-NEXT:    %[[C2:[^ ]+]] = nn.concat %[[R2]], %[[R2]] axis=0 : tensor<1x1152xf32>, tensor<1x1152xf32> -> tensor<2x1152xf32>
// CHECK-NEXT:    %[[A2:[^ ]+]] = nn.add %[[S2]], %[[C2]] : tensor<2x1152xf32>, tensor<2x1152xf32> -> tensor<2x1152xf32>
// CHECK-NEXT:    %y2 = nn.cast %[[A2]] : tensor<2x1152xf32> -> tensor<2x1152xf16>
// CHECK:         %y3 = nn.linear %x3, %w
// CHECK:         %[[P4:[^ ]+]] = nn.linear_partials %x4, %w4 k_chunk={{[0-9]+}} : tensor<729x1152xf16>, tensor<1152x1152xf8E4M3FNUZ> -> tensor<{{[0-9]+}}x729x1152xf16>
// CHECK-NEXT:    %y4 = nn.reduce_sum %[[P4]], %b2 : tensor<{{[0-9]+}}x729x1152xf16>, tensor<1152xf32> -> tensor<729x1152xf16>
// CHECK-NEXT:    nn.output "y4" %y4
// CHECK:         %[[P5:[^ ]+]] = nn.linear_partials %x5, %w4 k_chunk={{[0-9]+}}
// CHECK-NEXT:    %y5 = nn.reduce_sum %[[P5]], %b2
// CHECK:         %y6 = nn.linear %x6, %w4, %b2

// FEW-LABEL: func.func @head
// FEW:         %y3 = nn.linear %x3, %w
// FEW:         %y4 = nn.linear %x4, %w4, %b2

// KEEP-LABEL: func.func @head
// KEEP-NOT:     nn.linear_partials

// ROWS-LABEL: func.func @head
// ROWS:         nn.linear_partials %x, %w
// ROWS-NOT:     nn.linear_partials
