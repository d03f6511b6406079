"""The simulator's error: what real hardware would get silently wrong (or trap on), made loud."""

from __future__ import annotations


class SimError(Exception):
    """An illegal action found by the simulator.

    The message names the check, the tile, the context (`supervisor` or `worker N`), the PC, the instruction
    and the address involved, so that a failing kernel can be found from the message alone.
    """

    def __init__(
        self,
        check: str,
        message: str,
        *,
        tile: int | None = None,
        context: str | None = None,
        pc: int | None = None,
        instr: str | None = None,
        address: int | None = None,
    ):
        self.check = check
        self.detail = message
        self.tile = tile
        self.context = context
        self.pc = pc
        self.instr = instr
        self.address = address
        where = []
        if tile is not None:
            where.append(f"tile {tile}")
        if context is not None:
            where.append(context)
        if pc is not None:
            where.append(f"pc {pc:#x}")
        if instr is not None:
            where.append(f"`{instr}`")
        if address is not None:
            where.append(f"address {address:#x}")
        super().__init__(f"{check}: {message}" + (f" [{', '.join(where)}]" if where else ""))
