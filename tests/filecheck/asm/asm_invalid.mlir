// RUN: ipu-opt %s --split-input-file --verify-diagnostics | filecheck %s

asm.kernel @w worker {
  asm.ld64 a1:2, m0, m1, 0
  // expected-error @above {{asm.ld64: ld64: operand 'd': $a1:2 is not aligned to 2}}
}
// CHECK: asm.ld64: ld64: operand 'd': $a1:2 is not aligned to 2

// -----

asm.kernel @w worker {
  asm.add m0, m1, 70000
  // expected-error @above {{asm.add: add: operand 's1': immediate 70000 out of range [-32768, 32767]}}
}
// CHECK: asm.add: add: operand 's1': immediate 70000 out of range [-32768, 32767]

// -----

asm.kernel @s supervisor {
  asm.f16v4add a0:1, a0:1, a2:3
  // expected-error @above {{asm.f16v4add: f16v4add: worker-only instruction used in supervisor code}}
}
// CHECK: asm.f16v4add: f16v4add: worker-only instruction used in supervisor code

// -----

asm.kernel @w worker {
  asm.bundle {
  // expected-error @above {{asm.bundle: bundle: first instruction 'f16v4add' must issue on the MAIN pipeline}}
    asm.f16v4add a0:1, a0:1, a2:3
    asm.nop
  }
}
// CHECK: asm.bundle: bundle: first instruction 'f16v4add' must issue on the MAIN pipeline

// -----

asm.kernel @w worker {
  asm.ld2xst64pace a0:1, a4:5, m2:3+=, mzero, 0
  // expected-error @above {{operand 'd' must be a register quad, got $a0:1}}
}
// CHECK: operand 'd' must be a register quad, got $a0:1
