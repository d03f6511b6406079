// A file that ends inside a string literal (issue 24): one diagnostic at once, not exponential backtracking in
// xDSL 0.74's string regex.
// RUN: not ipu-opt %s 2>&1 | filecheck %s
// CHECK: parse_invalid.mlir:6:24: error: unterminated string literal: the input ends inside it
// CHECK-NOT: Traceback
"test.op"() {a = dense<"0x0A0B0C0D0E0F0A0B0C0D0E0F0A0B0C0D0E0F0A0B0C0D0E0F0A0B0C0D0E0F0A0B0C0D0E0F0A0B0C0D0E0F