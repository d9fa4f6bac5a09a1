#!/usr/bin/env python3
"""tests/fuzz/make-seeds.py - writes the seed corpus of the fuzz target (tests/fuzz/corpus/).

Each seed is a small program in fuzz-heap.c's input format, written out by hand here so that it
can be read and changed: byte 0 is the mode, then one op byte (an index into op_table[]) and the
slot, then the op's operands. Run it from tests/fuzz/ after changing the format:

    python3 make-seeds.py corpus
"""
import os
import struct
import sys

# op byte -> op (the first op_table[] index of each op in fuzz-heap.c)
OP = dict(malloc=0, calloc=4, realloc=6, realloc0=10, aligned=11, reallocarray=14, free=15, huge=19,
          badalign=20, interior=21, foreign=23, double=24, stale=26, wild=27, mode=28, check=29, forge=30,
          null=31)

# pick_size() selectors: a name for each band of sizes
TINY, SMALL, SMALL_EDGE, MEDIUM_20K, MEDIUM_ANY, MEDIUM_EDGES, MEDIUM_LARGE_EDGE, MEDIUM_100K, LARGE_1M, LARGE_BIG = (
    0, 12, 17, 18, 23, 25, 26, 27, 29, 31)


def size(band, v):
    return bytes([band]) + struct.pack('<H', v)


def calls(sel, *rsizes):
    """Hostile-call operands: 1 + sel % 3 calls, starting at call (sel >> 2) % 4 (free, realloc,
    reallocarray, usable_size), each with a 16-bit realloc size."""
    n = 1 + sel % 3
    return bytes([sel]) + b''.join(struct.pack('<H', rsizes[k % len(rsizes)]) for k in range(n))


class Program:
    def __init__(self, mode):
        self.b = bytearray([mode])

    def op(self, name, slot, *operands):
        self.b += bytes([OP[name], slot])
        for o in operands:
            self.b += o
        return self


def managers(mode):
    """Every manager: small, medium, large blocks; realloc across the edges; calloc; NULL calls."""
    p = Program(mode)
    p.op('malloc', 0, size(TINY, 100)).op('malloc', 1, size(SMALL, 2622)).op('malloc', 2, size(MEDIUM_20K, 5000))
    p.op('malloc', 3, size(MEDIUM_ANY, 30000)).op('malloc', 4, size(LARGE_1M, 1000))
    p.op('malloc', 5, size(LARGE_BIG, 1))
    p.op('calloc', 6, size(5, 1999), bytes([7])).op('calloc', 7, size(19, 12345), bytes([3]))
    p.op('realloc', 0, size(SMALL_EDGE, 16)).op('realloc', 0, size(MEDIUM_LARGE_EDGE, 64))
    p.op('realloc', 0, size(LARGE_1M + 1, 3000)).op('realloc', 0, size(1, 10))
    p.op('realloc', 3, size(MEDIUM_EDGES, 1)).op('realloc', 4, size(2, 200))
    p.op('reallocarray', 8, size(19, 777), bytes([5])).op('realloc0', 2).op('realloc', 2, size(3, 40))
    p.op('null', 9, bytes([2]), size(4, 60)).op('null', 9, bytes([0])).op('null', 9, bytes([1]))
    p.op('check', 1).op('free', 1).op('free', 5).op('check', 6)
    return p


def aligned(mode):
    """Every alignment 8 B .. 1 MiB through each of the three calls, then a realloc of each block."""
    p = Program(mode)
    bands = [TINY, SMALL, 19, LARGE_1M]
    for k in range(18):
        p.op('aligned', k, bytes([(k << 2) | (k % 4)]), size(bands[k % 4], 100 + k * 37))
    for k in range(18):
        p.op('realloc', k, size(5, 500 + k))
    return p


def hostile(mode):
    """Interior pointers of small, medium and large blocks, foreign pointers, double frees, stale
    and wild pointers, and interior pointers into blocks full of forged flag words."""
    p = Program(mode)
    p.op('malloc', 0, size(TINY, 64)).op('malloc', 1, size(MEDIUM_20K, 10000)).op('malloc', 2, size(LARGE_1M, 100))
    p.op('malloc', 3, size(TINY, 0)).op('malloc', 4, size(SMALL, 1000)).op('malloc', 5, size(MEDIUM_LARGE_EDGE, 1))
    for s in range(3):
        for sel in range(10):
            p.op('interior', s, bytes([sel]), calls(0x02 | (sel << 2), 100, 200, 300))
        p.op('interior', s, bytes([230]), calls(0x05, 16))
        p.op('interior', s, bytes([250]), calls(0x0a, 17, 18))
    for f in range(8):
        p.op('foreign', 0, bytes([f]), calls(0x02 | (f << 2), 1, 2, 3))
    for s in range(6):
        p.op('double', s, calls(0x02 | (s << 2), 10, 20, 30))
    p.op('malloc', 0, size(TINY, 48)).op('malloc', 1, size(19, 3000))
    for g in range(6):
        p.op('stale', 0, bytes([g]), bytes([g % 8]), calls(0x02 | (g << 2), 5, 6, 7))
    p.op('forge', 1, struct.pack('<H', 0x0004)).op('interior', 1, bytes([6]), calls(0x02, 1, 2, 3))
    p.op('forge', 0, struct.pack('<H', 0x0021)).op('interior', 0, bytes([2]), calls(0x02, 1, 2, 3))
    p.op('wild', 1, struct.pack('<i', 4096), bytes([0x80]), calls(0x02, 1, 1, 1))
    p.op('wild', 0, struct.pack('<i', -4096), bytes([0x81]), calls(0x06, 1, 1, 1))
    p.op('check', 0).op('check', 1)
    return p


def refused():
    """Sizes and alignments that cannot be served, through every call, and bad alignments."""
    p = Program(0)
    p.op('malloc', 0, size(TINY, 100)).op('malloc', 1, size(LARGE_1M, 100))
    for sel in range(10):
        for h in (0, 5, 9):
            p.op('huge', 0, bytes([sel]), bytes([h]), bytes([sel % 2]), bytes([sel]), bytes([sel]))
    for a in range(13):
        p.op('badalign', 0, bytes([a]), bytes([a & 1]), size(TINY, 50))
        p.op('badalign', 0, bytes([a]), bytes([(a + 1) & 1]), size(TINY, 50))
    return p


def mode_changes():
    """Debug mode and the erase modes switched on and off between calls on the same blocks."""
    p = Program(0)
    p.op('malloc', 0, size(TINY, 100)).op('mode', 0, bytes([0])).op('malloc', 1, size(TINY, 100))
    p.op('realloc', 0, size(MEDIUM_20K, 4000)).op('mode', 0, bytes([1])).op('realloc', 1, size(LARGE_1M, 10))
    p.op('realloc', 0, size(TINY, 8)).op('mode', 0, bytes([2])).op('free', 0)
    p.op('mode', 0, bytes([3])).op('malloc', 2, size(TINY, 77)).op('double', 1, calls(0x02, 1, 2, 3))
    p.op('mode', 0, bytes([0]))
    p.op('malloc', 3, size(30, 7)).op('double', 3, calls(0x03, 1, 2, 3)).op('mode', 0, bytes([0]))
    p.op('malloc', 4, size(30, 7)).op('double', 4, calls(0x03, 1, 2, 3))
    return p


def unfed_block_free():
    """A regression this target found: a medium block full of words that look like the flag word of
    block 1 of a 1024-byte-class span is freed, the class's first span is carved where it was, and
    free() of block 1, which the span never handed out, must be reported (it was taken for a live
    block and the block then handed out twice). It needs a fresh heap: its name sorts first, so
    fuzz-replay.sh runs it first."""
    p = Program(0)
    p.op('malloc', 0, size(TINY, 16))                     # the thread cache's own blocks first
    p.op('malloc', 1, size(MEDIUM_100K, 66104 - 2623))    # a 66104-byte medium block
    p.op('forge', 1, struct.pack('<H', ((64 + 1024) >> 3) | 4))
    p.op('free', 1)
    p.op('malloc', 2, size(SMALL, 1022))                  # the 1024-byte class's first span
    top = 64 + 63 * 1024                                  # the block the span hands out first
    p.op('wild', 2, struct.pack('<i', 64 + 1024 - top), bytes([0]), calls(0, 0))
    return p


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else 'corpus'
    os.makedirs(out, exist_ok=True)
    # mode bits: 0x01 debug, 0x04 erase freed, 0x06 erase allocated, 0x08 debug options 0,
    # 0x40 stack depth 0
    seeds = {
        '0-unfed-block-free': unfed_block_free(),
        'managers-normal': managers(0),
        'managers-debug': managers(0x01),
        'managers-debug-depth0-merge': managers(0x49),
        'managers-erase-allocated': managers(0x06),
        'managers-erase-freed': managers(0x04),
        'aligned-normal': aligned(0),
        'aligned-debug': aligned(0x01),
        'hostile-normal': hostile(0),
        'hostile-debug': hostile(0x01),
        'hostile-debug-options0': hostile(0x09),
        'refused-requests': refused(),
        'mode-changes': mode_changes(),
    }
    for name, p in seeds.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(bytes(p.b))


if __name__ == '__main__':
    main()
