// nn-split-k{fp8_kblock}: many-row splits of FP8-weight linears in whole 32-deep FP8 AMP K blocks (448 = 14 x 32
// here, where 16-deep blocks give 272 = 17 x 16), so that nn-quantize-activations can give them FP8 x.
// fp8_only restricts that to the linears whose weight names contain a substring: fc1 keeps its 16-block chunk
// (and f16 x), fc2 takes the FP8 blocks and the cast.

// RUN: ipu-opt %s -p 'nn-split-k' | filecheck %s --check-prefix=F16
// RUN: ipu-opt %s -p 'nn-split-k{fp8_kblock=true},nn-quantize-activations' | filecheck %s --check-prefix=FP8
// RUN: ipu-opt %s -p 'nn-split-k{fp8_kblock=true fp8_only=fc2},nn-quantize-activations{only=fc2}' | filecheck %s --check-prefix=ONLY

func.func @mlp() {
  %e = nn.input "e" : tensor<729x2160xf32>
  %g = nn.param "g" : tensor<2160xf32>
  %gb = nn.param "gb" : tensor<2160xf32>
  %b = nn.param "b" : tensor<1152xf32>
  %x = nn.layer_norm %e, %g, %gb eps=1.0e-06 : tensor<729x2160xf32>, tensor<2160xf32>, tensor<2160xf32> -> tensor<729x2160xf16>
  %w1 = nn.param "layers.0.fc1.weight" : tensor<1152x2160xf8E4M3FNUZ>
  %y1 = nn.linear %x, %w1, %b : tensor<729x2160xf16>, tensor<1152x2160xf8E4M3FNUZ>, tensor<1152xf32> -> tensor<729x1152xf16>
  nn.output "y1" %y1 : tensor<729x1152xf16>
  %w2 = nn.param "layers.0.fc2.weight" : tensor<1152x2160xf8E4M3FNUZ>
  %y2 = nn.linear %x, %w2, %b : tensor<729x2160xf16>, tensor<1152x2160xf8E4M3FNUZ>, tensor<1152xf32> -> tensor<729x1152xf16>
  nn.output "y2" %y2 : tensor<729x1152xf16>
  func.return
}

// F16-LABEL: func.func @mlp
// F16:         nn.linear_partials %x, %w1 k_chunk=272 : tensor<729x2160xf16>
// F16:         nn.linear_partials %x, %w2 k_chunk=272 : tensor<729x2160xf16>
// F16-NOT:     nn.cast

// FP8-LABEL: func.func @mlp
// FP8:         %[[X1:[^ ]+]] = nn.cast %x {scale = -4 : i64} : tensor<729x2160xf16> -> tensor<729x2160xf8E4M3FNUZ>
// FP8:         nn.linear_partials %[[X1]], %w1 k_chunk=448 : tensor<729x2160xf8E4M3FNUZ>
// FP8:         nn.linear_partials %{{[^ ]+}}, %w2 k_chunk=448 : tensor<729x2160xf8E4M3FNUZ>

// ONLY-LABEL: func.func @mlp
// ONLY:         nn.linear_partials %x, %w1 k_chunk=272 : tensor<729x2160xf16>
// ONLY:         %[[X2:[^ ]+]] = nn.cast %x {scale = -4 : i64} : tensor<729x2160xf16> -> tensor<729x2160xf8E4M3FNUZ>
// ONLY-NEXT:    nn.linear_partials %[[X2]], %w2 k_chunk=448 : tensor<729x2160xf8E4M3FNUZ>
// ONLY-NOT:     nn.cast
