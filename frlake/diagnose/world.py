"""The world of an attempt when no dump lists it.

NCCL's dumps list each group's members (``pg_config``); gloo's do not (one
entry keyed ``''`` holding whichever group was recorded last) and no dump
records the world size. A rank that died leaves no dump, so the dumps there
are only show its absence. :func:`infer` finds it from what the others hold,
each rule a fact of how jobs are launched and groups are made:

* ranks are numbered 0..W-1: a gap among the dumped ranks is a rank;
* an all_gather's output is its group's size times its input: a group
  gathered from more ranks than recorded in it;
* groups of one description (a mesh dimension, TP pairs) are equal in size
  and each rank belongs to one of them: a group with fewer members than its
  siblings lacks the ranks no sibling holds, in the stride of its siblings;
* a launcher gives each host the same number of consecutive ranks: a host
  whose folder holds fewer dumps than the others lacks the rest of its block.

Every rule that added a rank says so in :attr:`World.how`; the diagnosis
shows it. A rule that cannot tell which rank is missing adds none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frlake.diagnose.words import ranks_text


@dataclass
class World:
    ranks: set[int]
    members: dict[str, set[int]]  # each group's members, with the ranks inferred into it
    how: list[str] = field(default_factory=list)  # one sentence per rule that added ranks


def infer(hosts: dict[int, str], members: dict[str, set[int]], desc: dict[str, str | None],
          gathered: dict[str, int], listed: set[str], known: set[int]) -> World:
    """``hosts``: dumped rank -> host; ``members``: the members each group's records show; ``desc``: each
    group's description; ``gathered``: group -> how many ranks its all_gathers gather; ``listed``: the
    groups whose members a dump listed (pg_config); ``known``: ranks known otherwise (live stacks)."""
    world = set(hosts) | set(known)
    for ranks in members.values():
        world |= ranks
    members = {pg: set(ranks) for pg, ranks in members.items()}
    how: list[str] = []
    if not world:
        return World(world, members, how)

    def add(ranks: set[int], why: str) -> None:
        """The ranks a rule shows in the world; those that left no dump are said, with the rule."""
        world.update(ranks)
        unseen = ranks - set(hosts) - set(known)
        if unseen:
            how.append(f"rank{'s' if len(unseen) > 1 else ''} {ranks_text(sorted(unseen))}: {why}")

    top = max(world)
    gaps = set(range(top)) - world
    if gaps:
        add(gaps, f"the ranks are numbered from 0 to {top}, and no dump holds {'these' if len(gaps) > 1 else 'this one'}")
    for pg, n in sorted(gathered.items()):
        if desc.get(pg) == "default_pg" and n > len(world):
            add(set(range(n)), f"the default group's all_gathers gather {n} tensors: the world has {n} ranks")
    _by_hosts(hosts, world, add)
    while True:  # one kind of group may complete the world another kind needs (TP pairs, then DP stripes)
        known_before = (len(world), sum(len(m) for m in members.values()))
        _by_siblings(members, desc, gathered, listed, world, add)
        if (len(world), sum(len(m) for m in members.values())) == known_before:
            break
    for pg, d in desc.items():
        if d == "default_pg":
            members[pg] = set(members.get(pg, ())) | world
    return World(world, members, how)


def _by_siblings(members: dict[str, set[int]], desc: dict[str, str | None], gathered: dict[str, int],
                 listed: set[str], world: set[int], add) -> None:
    """Groups of one description partition the world into equal groups of one stride (a mesh dimension,
    TP pairs): one with fewer members than its complete siblings lacks ranks that no sibling holds. The
    world grows by that rule only where two or more complete siblings agree on size and stride, and no
    dump listed the members of any of them (a listed group is whole, and split groups may be uneven)."""
    by_desc: dict[str, list[str]] = {}
    for pg, d in desc.items():
        if d and d != "default_pg" and members.get(pg):
            by_desc.setdefault(d, []).append(pg)
    for d, groups in sorted(by_desc.items()):
        if len(groups) < 2 or any(pg in listed for pg in groups):
            continue
        if len(set().union(*(members[pg] for pg in groups))) != sum(len(members[pg]) for pg in groups):
            continue  # overlapping groups of one description: not a partition
        size = max(len(members[pg]) for pg in groups)
        complete = [pg for pg in groups if len(members[pg]) == size]
        strides = {_stride(members[pg]) for pg in complete}
        short = [pg for pg in groups if len(members[pg]) < size and gathered.get(pg) != len(members[pg])]
        if not short or len(strides) != 1 or None in strides:
            continue
        stride = strides.pop()
        total = size * len(groups)
        if len(complete) >= 2 and total > len(world) and max(world) < total:
            add(set(range(total)), f"{len(groups)} {d} groups of {size} ranks each make a world of {total}")
        free = world - set().union(*(members[pg] for pg in groups))
        for pg in sorted(short, key=lambda g: min(members[g])):
            chosen = _completion(sorted(members[pg]), free, size, stride)
            if chosen is None:
                continue  # no single way to complete it: which rank it lacks is not known
            free -= chosen
            members[pg] |= chosen
            add(chosen, f"{d} group {pg} holds {size - len(chosen)} of the {size} ranks each of its siblings "
                        f"holds, and no sibling holds {'these' if len(chosen) > 1 else 'this one'}")


def _completion(seen: list[int], free: set[int], size: int, stride: int) -> set[int] | None:
    """The one way to complete ``seen`` into a run of ``size`` ranks of step ``stride`` from the ``free``
    ranks, or None (none, or more than one)."""
    ways = []
    for first in range(seen[0] - stride * (size - len(seen)), seen[0] + 1, stride):
        run = {first + stride * k for k in range(size)}
        if first >= 0 and set(seen) <= run and run - set(seen) <= free:
            ways.append(run - set(seen))
    return ways[0] if len(ways) == 1 else None


def _stride(ranks: set[int]) -> int | None:
    """The step of an arithmetic run of ranks (1 for one rank alone), or None."""
    ordered = sorted(ranks)
    if len(ordered) < 2:
        return None
    steps = {b - a for a, b in zip(ordered, ordered[1:], strict=False)}
    return steps.pop() if len(steps) == 1 else None


def _by_hosts(hosts: dict[int, str], world: set[int], add) -> None:
    """Every host holds the same number of consecutive ranks (torchrun's nproc_per_node): a host whose
    folder holds fewer than the others lacks the rest of its block. Only where at least two hosts are full
    and every host's ranks lie in one block of that size."""
    by_host: dict[str, list[int]] = {}
    for r, h in hosts.items():
        by_host.setdefault(h, []).append(r)
    if len(by_host) < 2:
        return
    size = max(len(rs) for rs in by_host.values())
    if size < 2 or sum(len(rs) == size for rs in by_host.values()) < 2:
        return
    blocks = {}
    for h, rs in by_host.items():
        lo, hi = min(rs), max(rs)
        if lo // size != hi // size or lo // size in blocks:
            return  # not one block each: ranks dealt otherwise
        blocks[lo // size] = h
    for block, h in sorted(blocks.items()):
        held = len(by_host[h])
        if held < size:
            add(set(range(block * size, block * size + size)),
                f"host {h} holds {held} dump{'s' if held > 1 else ''} where the other hosts hold {size} "
                f"consecutive ranks each")
