// Diagnostics of the backend's passes and of the program-level asm ops: one line naming the op, the data or the
// label, never a traceback.

// RUN: not ipu-opt %s --split-input-file -p asm-lower 2>&1 | filecheck %s --check-prefix=UNPLACED
// RUN: not ipu-opt %s --split-input-file -p asm-lower-repeat 2>&1 | filecheck %s --check-prefix=NOPROGRAM
// RUN: ipu-opt %s --split-input-file --verify-diagnostics | filecheck %s --check-prefix=VERIFY
// RUN: sed -n '/^\/\/ case: loop left/,/^\/\/ -----/p' %s | not ipu-opt -p asm-lower-calls 2>&1 | filecheck %s --check-prefix=CALLS
// RUN: sed -n '/^\/\/ case: missing label/,/^\/\/ -----/p' %s | not ipu-opt -p asm-link 2>&1 | filecheck %s --check-prefix=LINK
// RUN: sed -n '/^\/\/ case: loop left/,/^\/\/ -----/p' %s | not ipu-opt -p asm-link 2>&1 | filecheck %s --check-prefix=UNLOWERED

// UNPLACED: ipu-opt: error: asm-lower: the input is not placed IR (@f has no memory.plan): run memory-plan or ipu-compile-pipeline first
// NOPROGRAM: ipu-opt: error: asm-lower-repeat: the module has no asm.program: run asm-lower first
// CALLS: ipu-opt: error: asm-lower-calls: run asm-lower-repeat first (an asm.repeat is left in @main)
// UNLOWERED: ipu-opt: error: asm-link: asm.kernel @main: asm.repeat is not an instruction yet: run asm-lower-repeat and asm-lower-calls first
// LINK: ipu-opt: error: asm-link: asm.data "frame ew_sup" names the label 'no_such_routine', which no routine defines

func.func @f() {
  %x = nn.input "x" : tensor<4x8xf32>
  nn.output "y" %x : tensor<4x8xf32>
  func.return
}

// -----

// case: loop left
builtin.module {
  asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{\22gemm\22: [\22f16\22], \22ksum\22: []}", metadata = "{}"} {
    asm.kernel @main supervisor {
      asm.add m9, m10, 0
      asm.repeat 2 record 0x7c000 attributes {what = "tile.repeat x2", forward_table = 507920 : i32, reset_table = 507936 : i32, table_words = 3 : i32, patch_words = dense<[507904]> : tensor<1xi64>, patch_strides = dense<[[4], [4], [0], [0]]> : tensor<4x1xi32>} {
        asm.kernel_call @ew_sup frame 0x7c010 {header, all_active, what = "nn.add: add_f32"}
      }
      asm.br m9
    }
  }
}

// -----

// case: missing label
builtin.module {
  asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{\22gemm\22: [\22f16\22], \22ksum\22: []}", metadata = "{}"} {
    asm.kernel @main supervisor {
      asm.br m9
    }
    asm.data "frame ew_sup" at 0x7c000 {data = dense<0> : tensor<1x16xi8>, relocs = dense<[[0, 2, 0]]> : tensor<1x3xi32>, reloc_labels = ["no_such_routine"]}
  }
}

// -----

// Verifier errors of the program-level ops.

builtin.module {
  asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{}", metadata = "{}"} {
    asm.kernel @main supervisor {
      // expected-error @below {{asm.repeat: tile 0 patches 2 words, its 3-word tables hold 1}}
      asm.repeat 2 record 0x7c000 attributes {what = "tile.repeat x2", forward_table = 507920 : i32, reset_table = 507936 : i32, table_words = 3 : i32, patch_words = dense<[507904, 507908]> : tensor<2xi64>, patch_strides = dense<[[4, 4], [4, 0], [0, 0], [0, 0]]> : tensor<4x2xi32>} {
      }
    }
  }
}
// VERIFY: asm.repeat: tile 0 patches 2 words, its 3-word tables hold 1

// -----

builtin.module {
  asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{}", metadata = "{}"} {
    asm.kernel @main supervisor {
    }
    // expected-error @below {{asm.data "frame": a relocation lies outside its data or names no label}}
    asm.data "frame" at 0x7c000 {data = dense<0> : tensor<1x16xi8>, relocs = dense<[[0, 4, 0]]> : tensor<1x3xi32>, reloc_labels = ["ew_sup"]}
  }
}
// VERIFY: asm.data "frame": a relocation lies outside its data or names no label

// -----

builtin.module {
  // expected-error @below {{asm.program @p: no asm.kernel @main}}
  asm.program @p attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{}", metadata = "{}"} {
  }
}
// VERIFY: asm.program @p: no asm.kernel @main

// -----

builtin.module {
  asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{}", metadata = "{}"} {
    asm.kernel @main supervisor {
      // expected-error @below {{asm.kernel_call @ew_sup: frame address must be word aligned}}
      asm.kernel_call @ew_sup frame 0x7c002 {header}
    }
  }
}
// VERIFY: asm.kernel_call @ew_sup: frame address must be word aligned

// -----

builtin.module {
  asm.program @main attributes {target = "small-4x624k", tiles = 4 : i32, sram_kib = 624 : i32, code_base = 515472 : i32, code_end = 524288 : i32, library = "{}", metadata = "{}"} {
    asm.kernel @main supervisor {
      // expected-error @below {{asm.repeat: patch word 1 at 507910 is not a word address}}
      asm.repeat 2 record 0x7c000 attributes {what = "tile.repeat x2", forward_table = 507920 : i32, reset_table = 507936 : i32, table_words = 5 : i32, patch_words = dense<[507904, 507910]> : tensor<2xi64>, patch_strides = dense<[[4, 4], [4, 0], [0, 0], [0, 0]]> : tensor<4x2xi32>} {
      }
    }
  }
}
// VERIFY: asm.repeat: patch word 1 at 507910 is not a word address
