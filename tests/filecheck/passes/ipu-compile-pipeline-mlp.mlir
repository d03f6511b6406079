// The named pipeline's default activations (`mlp`): FP8 x (scale 2^0) into the K-split linears named like the
// MLP's (fc1, fc2), f16 x into the others (v_proj here); `activations=f16` casts none, `activations=fp8` every
// FP8-weight K split's x (at the rule's 2^-4).

// RUN: ipu-opt %s -p 'ipu-compile-pipeline{stop_after=nn-quantize-activations}' | filecheck %s
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{activations=f16 stop_after=nn-split-k}' | filecheck %s --check-prefix=F16
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{activations=fp8 stop_after=nn-quantize-activations}' | filecheck %s --check-prefix=FP8

func.func @layer() {
  %e = nn.input "e" : tensor<729x1152xf32>
  %g = nn.param "layers.0.layer_norm1.weight" : tensor<1152xf32>
  %gb = nn.param "layers.0.layer_norm1.bias" : tensor<1152xf32>
  %x = nn.layer_norm %e, %g, %gb eps=1.0e-06 : tensor<729x1152xf32>, tensor<1152xf32>, tensor<1152xf32> -> tensor<729x1152xf32>
  %wv = nn.param "layers.0.self_attn.v_proj.weight" : tensor<1152x1152xf32>
  %bv = nn.param "layers.0.self_attn.v_proj.bias" : tensor<1152xf32>
  %v = nn.linear %x, %wv, %bv : tensor<729x1152xf32>, tensor<1152x1152xf32>, tensor<1152xf32> -> tensor<729x1152xf32>
  nn.output "v" %v : tensor<729x1152xf32>
  %w1 = nn.param "layers.0.mlp.fc1.weight" : tensor<2304x1152xf32>
  %b1 = nn.param "layers.0.mlp.fc1.bias" : tensor<2304xf32>
  %h = nn.linear %x, %w1, %b1 : tensor<729x1152xf32>, tensor<2304x1152xf32>, tensor<2304xf32> -> tensor<729x2304xf32>
  nn.output "h" %h : tensor<729x2304xf32>
  func.return
}

// CHECK-LABEL: func.func @layer
// CHECK:         nn.linear_partials %x, %{{[^ ]+}} k_chunk={{[0-9]+}} : tensor<729x1152xf16>, tensor<1152x1152xf8E4M3FNUZ>
// CHECK:         %[[XQ:[^ ]+]] = nn.cast %x {scale = 0 : i64} : tensor<729x1152xf16> -> tensor<729x1152xf8E4M3FNUZ>
// CHECK-NEXT:    nn.linear_partials %[[XQ]], %{{[^ ]+}} k_chunk={{[0-9]+}} : tensor<729x1152xf8E4M3FNUZ>, tensor<2304x1152xf8E4M3FNUZ>

// F16-LABEL: func.func @layer
// F16-NOT:     nn.cast %x
// F16:         func.return

// FP8-LABEL: func.func @layer
// FP8:         %[[XQ:[^ ]+]] = nn.cast %x {scale = -4 : i64} : tensor<729x1152xf16> -> tensor<729x1152xf8E4M3FNUZ>
// FP8-NEXT:    nn.linear_partials %[[XQ]], %{{[^ ]+}} k_chunk={{[0-9]+}} : tensor<729x1152xf8E4M3FNUZ>, tensor<1152x1152xf8E4M3FNUZ>
// FP8:         nn.linear_partials %[[XQ]], %{{[^ ]+}} k_chunk={{[0-9]+}} : tensor<729x1152xf8E4M3FNUZ>, tensor<2304x1152xf8E4M3FNUZ>
