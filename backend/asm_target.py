"""`ipu-opt -t ipu-asm`: print the `asm` kernels of a module as Graphcore-syntax assembly text.

Options: `layout=true` lays the kernels out at `base` first (see `ipu.backend.isa_program`), so the printed text
shows the padding `nop`s and bundled rpt bodies that the program really holds, with each line's address as a
trailing comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from ipu.backend.asm_text import print_kernels
from ipu.backend.isa_program import layout
from ipu.backend.target import IPU21


@dataclass(frozen=True)
class IpuAsmTarget(Target):
    name = "ipu-asm"

    layout: bool = False
    base: int = IPU21.sram_base

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from ipu.dialects.asm import module_to_kernels

        kernels = module_to_kernels(module)
        if not self.layout:
            output.write(print_kernels(kernels))
            return
        program = layout(kernels, self.base)
        text = print_kernels(program.to_kernels())
        out, it = [], iter(u.addr for u in program.units)
        for line in text.splitlines():
            if line.startswith("    "):
                line = f"{line:<63} // {next(it):#07x}"
            out.append(line)
        output.write("\n".join(out) + "\n")
