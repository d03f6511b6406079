// nn-split-k: a 2-D matmul with few rows (at most 16) over a long contraction (K >= 256; the MAP head's P X)
// becomes partial products per 32-deep K chunk (the last one shorter) and their f32 sum. A short contraction,
// more rows or a transposed rhs are left alone.

// RUN: ipu-opt %s -p 'nn-split-k' | filecheck %s
// RUN: ipu-opt %s -p 'nn-split-k' | ipu-opt | filecheck %s

func.func @px() {
  %p = nn.input "p" : tensor<16x300xf32>
  %x = nn.input "x" : tensor<300x64xf16>
  %z = nn.matmul %p, %x : tensor<16x300xf32>, tensor<300x64xf16> -> tensor<16x64xf32>
  nn.output "z" %z : tensor<16x64xf32>
  func.return
}

// CHECK-LABEL: func.func @px
// CHECK:         %[[PARTS:[^ ]+]] = nn.matmul_partials %p, %x k_chunk=32 : tensor<16x300xf32>, tensor<300x64xf16> -> tensor<10x16x64xf32>
// CHECK-NEXT:    %z = nn.reduce_sum %[[PARTS]] : tensor<10x16x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    nn.output "z" %z
// CHECK-NOT:     nn.matmul %

func.func @keep() {
  %p = nn.input "p" : tensor<16x200xf32>
  %x = nn.input "x" : tensor<200x64xf16>
  %z = nn.matmul %p, %x : tensor<16x200xf32>, tensor<200x64xf16> -> tensor<16x64xf32>
  %q = nn.input "q" : tensor<17x300xf32>
  %y = nn.input "y" : tensor<300x64xf16>
  %w = nn.matmul %q, %y : tensor<17x300xf32>, tensor<300x64xf16> -> tensor<17x64xf32>
  nn.output "z" %z : tensor<16x64xf32>
  nn.output "w" %w : tensor<17x64xf32>
  func.return
}

// CHECK-LABEL: func.func @keep
// CHECK-NOT:     nn.matmul_partials
// CHECK:         nn.matmul %p, %x
// CHECK:         nn.matmul %q, %y

// A few-row linear whose weight the device computes (the MAP head's scores U X^T, X from a layer norm): chunks
// of 64 (f32 partials, their sum); with a parameter weight it is the usual few-row choice (here: left alone, 16
// rows are not few).

func.func @scores() {
  %u = nn.input "u" : tensor<16x128xf16>
  %e = nn.input "e" : tensor<300x128xf32>
  %g = nn.param "g" : tensor<128xf32>
  %x = nn.layer_norm %e, %g, %g eps=1.0e-06 : tensor<300x128xf32>, tensor<128xf32>, tensor<128xf32> -> tensor<300x128xf16>
  %s = nn.linear %u, %x : tensor<16x128xf16>, tensor<300x128xf16> -> tensor<16x300xf32>
  %w = nn.param "w" : tensor<300x128xf16>
  %t = nn.linear %u, %w : tensor<16x128xf16>, tensor<300x128xf16> -> tensor<16x300xf32>
  nn.output "s" %s : tensor<16x300xf32>
  nn.output "t" %t : tensor<16x300xf32>
  func.return
}

// CHECK-LABEL: func.func @scores
// CHECK:         %[[P:[^ ]+]] = nn.linear_partials %u, %x k_chunk=64 : tensor<16x128xf16>, tensor<300x128xf16> -> tensor<2x16x300xf32>
// CHECK-NEXT:    %s = nn.reduce_sum %[[P]] : tensor<2x16x300xf32> -> tensor<16x300xf32>
// CHECK:         %t = nn.linear %u, %w
