// kernel-select on a shape no row kernel takes (a layer norm over 66 columns: rows of whole 4-element atoms)
// names the op and its operands' shapes instead of the kernel's bare check.
// RUN: not ipu-opt %s -p 'nn-to-exchange-pipeline{tiles=4 sram_kib=624}' 2>&1 | filecheck %s

// CHECK: ipu-opt: error: kernel-select: nn.layer_norm %y (operands [8, 66], [66], [66]): no kernel takes this shape: rows need n % 4 == 0

builtin.module {
  func.func @rows() {
    %x = nn.input "x" : tensor<8x66xf32>
    %g = nn.param "g" : tensor<66xf32>
    %b = nn.param "b" : tensor<66xf32>
    %y = nn.layer_norm %x, %g, %b eps=1.0e-06 : tensor<8x66xf32>, tensor<66xf32>, tensor<66xf32> -> tensor<8x66xf16>
    nn.output "y" %y : tensor<8x66xf16>
    func.return
  }
}
