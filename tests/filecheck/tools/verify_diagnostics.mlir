// --verify-diagnostics on a file with `expected-*` annotations checks them as mlir-opt does: every diagnostic
// must be expected at its line with the expected text, and every expectation must be met. This file's
// expectations are wrong on purpose (chunks 2-5); the first is right. (Without annotations the diagnostics are
// printed and the exit status is 0, as in xDSL: the *_invalid.mlir tests check them with FileCheck.)

// RUN: not ipu-opt %s --split-input-file --verify-diagnostics 2>&1 | filecheck %s

// The diagnostics are still printed, the matched one included:
// CHECK: verify_diagnostics.mlir:23:3: error: nn.reshape: operand 'input' shape 4x8 and result shape 4x4
// CHECK: ipu-opt: error: --verify-diagnostics: 5 mismatches in {{.*}}verify_diagnostics.mlir:
// A different message at the right line:
// CHECK-NEXT: line 32: expected error {{[{][{]}}shape 4x5{{[}][}]}} at line 33, but the error there is: {{.*}}shape 4x8 and result shape 2x2
// The right message at another line: the diagnostic is unexpected, the expectation unmet:
// CHECK-NEXT: unexpected error: {{.*}}verify_diagnostics.mlir:41:3: error: nn.reshape
// CHECK-NEXT: line 42: expected error at line 42 was not produced: {{[{][{]}}different element counts{{[}][}]}}
// An expectation that never fires (valid IR):
// CHECK-NEXT: line 49: expected error at line 50 was not produced: {{[{][{]}}never{{[}][}]}}
// A diagnostic nobody expected:
// CHECK-NEXT: unexpected error: {{.*}}verify_diagnostics.mlir:58:3: error: nn.reshape

func.func @expected_and_matched() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  // expected-error @above {{nn.reshape: operand 'input' shape 4x8 and result shape 4x4 have different element counts}}
  func.return
}

// -----

func.func @wrong_message() {
  %x = nn.input "x" : tensor<4x8xf32>
  // expected-error @below {{shape 4x5}}
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<2x2xf32>
  func.return
}

// -----

func.func @wrong_line() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  // expected-error {{different element counts}}
  func.return
}

// -----

func.func @never_fires() {
  // expected-error @+1 {{never}}
  %x = nn.input "x" : tensor<4x8xf32>
  func.return
}

// -----

func.func @unexpected() {
  %x = nn.input "x" : tensor<4x8xf32>
  %y = nn.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}
