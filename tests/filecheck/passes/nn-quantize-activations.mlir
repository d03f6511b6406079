// nn-quantize-activations: the f16 x of every many-row K split with an FP8 weight and chunks of whole 32-deep
// FP8 blocks becomes an FP8 cast (one per x, before its first reader, shared); the rest is left alone.

// RUN: ipu-opt %s -p 'nn-quantize-activations' | filecheck %s
// RUN: ipu-opt %s -p 'nn-quantize-activations{format=f152 scale=-6}' | filecheck %s --check-prefix=F152
// RUN: ipu-opt %s -p 'nn-quantize-activations{only=fc1}' | filecheck %s --check-prefix=ONLY
// RUN: ipu-opt %s -p 'nn-quantize-activations{scales="v_proj=-2","layers.0.fc1=-1","q_proj=5"}' | filecheck %s --check-prefix=SCALES
// RUN: ipu-opt %s -p 'nn-quantize-activations{scale=-3 scales="fc9=2"}' | filecheck %s --check-prefix=NOMATCH

// CHECK-LABEL: func.func @splits
// CHECK:         %[[XQ:[^ ]+]] = nn.cast %x {scale = -4 : i64} : tensor<64x256xf16> -> tensor<64x256xf8E4M3FNUZ>
// CHECK-NEXT:    %{{[^ ]+}} = nn.linear_partials %[[XQ]], %wv k_chunk=128 : tensor<64x256xf8E4M3FNUZ>, tensor<256x256xf8E4M3FNUZ>
// CHECK-NEXT:    %{{[^ ]+}} = nn.linear_partials %[[XQ]], %w1 k_chunk=64 : tensor<64x256xf8E4M3FNUZ>, tensor<512x256xf8E4M3FNUZ>
// an F16 weight: the F16 AMP, x stays f16
// CHECK-NEXT:    %{{[^ ]+}} = nn.linear_partials %x, %wq k_chunk=128 : tensor<64x256xf16>, tensor<256x256xf16>
// chunks of 16-deep blocks only: not the FP8 AMP's
// CHECK-NEXT:    %{{[^ ]+}} = nn.linear_partials %x, %wo k_chunk=48 : tensor<64x256xf16>
// few rows (the MAP head's kind of split): left alone
// CHECK-NEXT:    %{{[^ ]+}} = nn.linear_partials %p, %wv k_chunk=128 : tensor<4x256xf16>
// CHECK-NOT:     nn.cast

// F152:          nn.cast %x {scale = -6 : i64} : tensor<64x256xf16> -> tensor<64x256xf8E5M2FNUZ>
// F152-NOT:      nn.cast

// ONLY:          nn.linear_partials %x, %wv
// ONLY-NEXT:     %[[XQ:[^ ]+]] = nn.cast %x {scale = -4 : i64}
// ONLY-NEXT:     nn.linear_partials %[[XQ]], %w1
// ONLY-NOT:      nn.cast

// Per-cast scales by the readers' weight names (what a calibration writes): the cast read by v and fc1 takes the
// larger of their entries; q_proj's entry matches no cast (its x stays f16).
// SCALES:        nn.cast %x {scale = -1 : i64}
// SCALES-NOT:    nn.cast
// NOMATCH:       nn.cast %x {scale = -3 : i64}

func.func @splits() {
  %x = nn.input "x" : tensor<64x256xf16>
  %p = nn.input "p" : tensor<4x256xf16>
  %wv = nn.param "layers.0.v_proj.weight" : tensor<256x256xf8E4M3FNUZ>
  %w1 = nn.param "layers.0.fc1.weight" : tensor<512x256xf8E4M3FNUZ>
  %wq = nn.param "layers.0.q_proj.weight" : tensor<256x256xf16>
  %wo = nn.param "layers.0.out_proj.weight" : tensor<256x256xf8E4M3FNUZ>
  %v = nn.linear_partials %x, %wv k_chunk=128 : tensor<64x256xf16>, tensor<256x256xf8E4M3FNUZ> -> tensor<2x64x256xf16>
  %h = nn.linear_partials %x, %w1 k_chunk=64 : tensor<64x256xf16>, tensor<512x256xf8E4M3FNUZ> -> tensor<4x64x512xf16>
  %q = nn.linear_partials %x, %wq k_chunk=128 : tensor<64x256xf16>, tensor<256x256xf16> -> tensor<2x64x256xf16>
  %o = nn.linear_partials %x, %wo k_chunk=48 : tensor<64x256xf16>, tensor<256x256xf8E4M3FNUZ> -> tensor<6x64x256xf16>
  %m = nn.linear_partials %p, %wv k_chunk=128 : tensor<4x256xf16>, tensor<256x256xf8E4M3FNUZ> -> tensor<2x4x256xf32>
  nn.output "v" %v : tensor<2x64x256xf16>
  nn.output "h" %h : tensor<4x64x512xf16>
  nn.output "q" %q : tensor<2x64x256xf16>
  nn.output "o" %o : tensor<6x64x256xf16>
  nn.output "m" %m : tensor<2x4x256xf32>
  func.return
}
