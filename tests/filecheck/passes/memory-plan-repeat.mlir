// memory-plan on a tile.repeat: the yield operand is computed straight into its carried argument's buffer when
// every read of the argument in an iteration comes before the operand's producer (no copy yield -> argument per
// iteration; the lowering skips a copy whose source and destination coincide); otherwise it keeps a buffer of its
// own.

// RUN: ipu-opt %s --split-input-file -p 'tile-plan{tiles=4 sram_kib=256},exchange-lower{tiles=4 sram_kib=256},exchange-schedule,memory-plan{tiles=4 sram_kib=256 reserve-code-bytes=16384}' | filecheck %s

// The argument is last read by the GEMM's x gather; the relayout back to the loop layout (the yield operand)
// writes into the argument's buffer.
func.func @in_place() {
  %h = nn.input "h" : tensor<16x64xf32>
  %ws = nn.param "encoder.layers.*.w" : tensor<2x64x64xf32>
  %r = nn.repeat 2 carried(%h : tensor<16x64xf32>) stacked(%ws : tensor<2x64x64xf32>) -> tensor<16x64xf32> {
  ^bb0(%a: tensor<16x64xf32>, %w: tensor<64x64xf32>):
    %y = nn.linear %a, %w : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
    %g = nn.gelu %y "tanh" : tensor<16x64xf32> -> tensor<16x64xf32>
    nn.yield %g : tensor<16x64xf32>
  }
  nn.output "r" %r : tensor<16x64xf32>
  func.return
}
// CHECK-LABEL: func.func @in_place
// CHECK:       tile.repeat {{.*}}memory.args = [#memory.buffer<addr = [[ARG:0x[0-9a-f]+]], bytes = 1024, live = [1, 6]
// CHECK:       %1 = exchange.phase %g {memory.buffers = [#memory.buffer<addr = [[ARG]], bytes = 1024, live = [1, 6]
// CHECK-NEXT:  tile.yield %1

// -----

// The yield operand's producer reads the argument: a buffer of its own (live from its event, not the argument's).
func.func @reads_the_argument() {
  %h = nn.input "h" : tensor<16x64xf32>
  %bs = nn.param "encoder.layers.*.b" : tensor<2x16x64xf32>
  %r = nn.repeat 2 carried(%h : tensor<16x64xf32>) stacked(%bs : tensor<2x16x64xf32>) -> tensor<16x64xf32> {
  ^bb0(%a: tensor<16x64xf32>, %b: tensor<16x64xf32>):
    %s = nn.add %a, %b : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
    nn.yield %s : tensor<16x64xf32>
  }
  nn.output "r" %r : tensor<16x64xf32>
  func.return
}
// CHECK-LABEL: func.func @reads_the_argument
// CHECK:       tile.repeat {{.*}}memory.args = [#memory.buffer<addr = {{0x[0-9a-f]+}}, bytes = 1024, live = [1, 3]
// CHECK:       %s = nn.add %a, %b {{.*}}memory.buffers = [#memory.buffer<addr = {{0x[0-9a-f]+}}, bytes = 1024, live = [2, 3]
// CHECK:       tile.yield %s
