"""The paged KV cache's bookkeeping: a pool of fixed-size blocks, held by reference.

A sequence's keys and values live in blocks of ``block_size`` token positions, listed in
its block table; the pool only counts which blocks are free and how many sequences hold
each one. The samples of one prompt hold the prompt's full blocks together (prefix
sharing), and a block is free again when its last holder lets it go. Block 0 is never
handed out: padded entries of a block table point at it, so a gather or a write for an
idle slot stays in bounds and touches no sequence's keys.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

SCRATCH_BLOCK = 0


class BlockPool:
    """Free and held blocks of one KV cache pool.

    Args:
        num_blocks: blocks in the pool, the scratch block included (at least 2).
        block_size: token positions per block.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 2:
            raise ValueError(f"a block pool needs at least 2 blocks, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = deque(range(1, num_blocks))
        self._holders = [0] * num_blocks
        self.peak_used = 0

    @property
    def capacity(self) -> int:
        """Blocks that can hold keys (all but the scratch block)."""
        return self.num_blocks - 1

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.capacity - self.free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that ``tokens`` positions fill."""
        return -(-tokens // self.block_size)

    def allocate(self, count: int) -> list[int] | None:
        """``count`` free blocks, each held once; None (and nothing taken) if too few."""
        if count > len(self._free):
            return None
        blocks = [self._free.popleft() for _ in range(count)]
        for block in blocks:
            self._holders[block] = 1
        self.peak_used = max(self.peak_used, self.used)
        return blocks

    def share(self, blocks: Iterable[int]) -> None:
        """One more holder for each of ``blocks`` (all held already)."""
        for block in blocks:
            if self._holders[block] < 1:
                raise ValueError(f"block {block} is not held: only held blocks can be shared")
            self._holders[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """One holder fewer for each of ``blocks``; a block nobody holds is free again."""
        for block in blocks:
            if self._holders[block] < 1:
                raise ValueError(f"block {block} is released more often than it was held")
            self._holders[block] -= 1
            if self._holders[block] == 0:
                self._free.append(block)

    def holders(self, block: int) -> int:
        return self._holders[block]
