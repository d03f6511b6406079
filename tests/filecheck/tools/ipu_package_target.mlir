// `-t ipu-package` writes the package of placed IR: here nn IR through the named pipeline to a package in one call.
// (tests/unit/test_ipu_opt_package.py: the same bytes as the two steps through placed IR text, and as ipu-run's.)

// RUN: ipu-opt %s --pass-pipeline='builtin.module(ipu-compile-pipeline{tiles=4})' -t ipu-package -o %t.ipupkg
// RUN: python -m zipfile -l %t.ipupkg | filecheck %s --check-prefix=ZIP
// ZIP: manifest.json
// ZIP: arrays/code.npy
// RUN: python -c "import sys; from ipu.runtime.package import Package; p = Package.load(sys.argv[1]); print(p.target.name, p.entry, sorted({b.name for b in p.parameters}), [b.name for b in p.inputs + p.outputs])" %t.ipupkg | filecheck %s
// CHECK: small-4x624k main ['b', 'w'] ['x', 'g']

func.func @mlp() {
  %x = nn.input "x" : tensor<24x64xf32>
  %w = nn.param "w" : tensor<32x64xf32>
  %b = nn.param "b" : tensor<32xf32>
  %y = nn.linear %x, %w, %b : tensor<24x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<24x32xf32>
  %g = nn.gelu %y "tanh" : tensor<24x32xf32> -> tensor<24x32xf32>
  nn.output "g" %g : tensor<24x32xf32>
  func.return
}
