// The precision policy of ipu-compile-pipeline (keep_f16): `default` keeps the q/k projections (and the patch
// embedding, the MAP head) in F16, `compact` and `none` store them in FP8, a list names the linears kept in F16.
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 stop_after=nn-to-exchange-pipeline}' | filecheck %s --check-prefix=DEFAULT
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 keep_f16=compact stop_after=nn-to-exchange-pipeline}' | filecheck %s --check-prefix=FP8
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 keep_f16=none stop_after=nn-to-exchange-pipeline}' | filecheck %s --check-prefix=FP8
// RUN: ipu-opt %s -p 'ipu-compile-pipeline{tiles=4 keep_f16=q_proj stop_after=nn-to-exchange-pipeline}' | filecheck %s --check-prefix=DEFAULT

func.func @q() {
  %x = nn.input "x" : tensor<24x64xf32>
  %w = nn.param "layer.q_proj.weight" : tensor<32x64xf32>
  %b = nn.param "layer.q_proj.bias" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<24x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<24x32xf32>
  nn.output "y" %y : tensor<24x32xf32>
  func.return
}

// DEFAULT: nn.linear {{.*}}tile.plan = #tile.gemm<{{.*}}precision = "f16"
// FP8:     nn.linear {{.*}}tile.plan = #tile.gemm<{{.*}}precision = "fp8"
