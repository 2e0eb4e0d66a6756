#!/usr/bin/env python3
"""How many bytes must any log-structured GC move to hold a space bound? (docs/BENCHMARKS.md §5)

Simulates an ideal value-log collector on the update stream of YCSB A+F (`wisckey ycsb
--workload=a,f --records=200000 --operations=1000000`: 1M updates in all, YCSB's scrambled
zipfian over the records): exact liveness, no lag in the statistics, survivors moved to
separate cold segments (hot/cold separation), and the victim chosen greedily (most garbage)
or by LFS cost-benefit. Segments are SEGMENT values (16 MiB of 1 KiB values by default,
wisckey's `gc_chunk_bytes`; smaller segments only help a little). Whenever the total exceeds
BOUND x live, the best victim is collected. Prints bytes moved per byte written by the user.

With --punch the collector also frees, in place and without moving anything, every 4 KiB page
of a sealed segment whose values are all dead (fallocate's PUNCH_HOLE; values of RECORD_BYTES
laid end to end, so a page is free once every value overlapping it is dead); space counts the
pages still allocated, and a victim is then chosen by its allocated bytes. Exact liveness, as
above: compaction's dropped pointers would give it, after the whole-tree refresh. That victim
rule is a heuristic, not an optimum: on some skewed streams punching then moves more, not less
(zipfian, 20k records, segments of 64, cost-benefit: 1.449 without, 1.595 with). Also printed:
of the bytes the victims held, the share in pages whose values were all dead when collected.

usage: scripts/gc-lower-bound.py [--bound 1.3] [--segment 16384] [--policy greedy|cost-benefit]
                                 [--records 200000] [--updates 1000000] [--uniform]
                                 [--punch] [--record-bytes 1064]
"""
import argparse
import random

ITEMS = 10_000_000_000  # YCSB's ScrambledZipfianGenerator draws from 10^10 items ...
ZETAN = 26.46902820178302  # ... whose zeta(10^10, 0.99) it hard-codes
THETA = 0.99
FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 1099511628211, (1 << 64) - 1


def fnv64(v):
    h = FNV_OFFSET
    for _ in range(8):
        h = ((h ^ (v & 0xFF)) * FNV_PRIME) & MASK
        v >>= 8
    return h


def scrambled_zipfian(rng, records):
    zeta2 = 1 + 0.5 ** THETA
    alpha = 1 / (1 - THETA)
    eta = (1 - (2 / ITEMS) ** (1 - THETA)) / (1 - zeta2 / ZETAN)
    while True:
        u = rng.random()
        uz = u * ZETAN
        if uz < 1:
            rank = 0
        elif uz < zeta2:
            rank = 1
        else:
            rank = int(ITEMS * (eta * u - eta + 1) ** alpha)
        yield fnv64(rank) % records


PAGE = 4096


class Segment:
    """One log segment: its values in order, how many are live, and per page how many live
    values overlap it (for punching)."""

    def __init__(self, born):
        self.keys, self.live, self.pages, self.born = [], 0, [], born
        self.sealed, self.gone, self.allocated = False, False, 0


def simulate(a):
    rng = random.Random(1)
    keys = (rng.randrange(a.records) for _ in iter(int, 1)) if a.uniform else scrambled_zipfian(rng, a.records)
    size = a.record_bytes
    where = [None] * a.records  # (segment, position) of each key's live copy
    segs = []
    total = 0  # bytes: allocated pages of sealed segments, values of open ones
    moved = 0
    collected = dead_pages = 0  # bytes collected, and of them in pages whose values were all dead
    clock = 0

    def pages_of(i):
        return range(i * size // PAGE, ((i + 1) * size - 1) // PAGE + 1)

    def new_segment():
        segs.append(Segment(clock))
        return len(segs) - 1

    heads = {"hot": new_segment(), "cold": new_segment()}

    def seal(g):
        nonlocal total
        g.sealed = True
        g.allocated = sum(1 for c in g.pages if c > 0) * PAGE if a.punch else len(g.keys) * size
        total += g.allocated - len(g.keys) * size

    def kill(s, i):
        nonlocal total
        g = segs[s]
        g.live -= 1
        for p in pages_of(i):
            g.pages[p] -= 1
            if a.punch and g.sealed and g.pages[p] == 0:
                g.allocated -= PAGE
                total -= PAGE

    def append(k, stream):
        nonlocal total
        s = heads[stream]
        if len(segs[s].keys) >= a.segment:
            seal(segs[s])
            s = heads[stream] = new_segment()
        if where[k] is not None:
            kill(*where[k])
        g = segs[s]
        i = len(g.keys)
        g.keys.append(k)
        g.live += 1
        for p in pages_of(i):
            g.pages.extend([0] * (p + 1 - len(g.pages)))
            g.pages[p] += 1
        where[k] = (s, i)
        total += size

    def score(g):
        u = g.live * size / max(g.allocated, 1)
        if a.policy == "greedy":
            return 1 - u
        return (1 - u) * (clock - g.born + 1) / (1 + u)

    for k in range(a.records):
        append(k, "hot")
    for clock in range(a.updates):
        append(next(keys), "hot")
        while total > a.bound * a.records * size:
            v = max((s for s, g in enumerate(segs) if g.sealed and not g.gone), key=lambda s: score(segs[s]))
            victim = segs[v]
            survivors = [k for i, k in enumerate(victim.keys) if where[k] == (v, i)]
            total -= victim.allocated
            collected += victim.allocated
            dead_pages += sum(1 for c in victim.pages if c == 0) * PAGE
            victim.gone = True
            for k in survivors:
                where[k] = None
                append(k, "cold")
                moved += 1
    return moved / a.updates, dead_pages / max(collected, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bound", type=float, default=1.3)
    p.add_argument("--segment", type=int, default=16384)
    p.add_argument("--policy", choices=["greedy", "cost-benefit"], default="greedy")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--updates", type=int, default=1_000_000)
    p.add_argument("--uniform", action="store_true")
    p.add_argument("--punch", action="store_true")
    p.add_argument("--record-bytes", type=int, default=1064)
    a = p.parse_args()
    dist = "uniform" if a.uniform else "scrambled zipfian"
    punch = f", punching dead pages of {a.record_bytes} B values" if a.punch else ""
    moved, dead = simulate(a)
    # Under --punch the dead pages were freed before collection: there is no share to print.
    share = "" if a.punch else (f"; of the bytes collected, {dead:.3f} lay in {PAGE} B pages of "
                                f"{a.record_bytes} B values that were all dead")
    print(f"{dist}, bound {a.bound}, segment {a.segment} values, {a.policy}{punch}: "
          f"{moved:.3f} bytes moved per byte updated{share}")


if __name__ == "__main__":
    main()
