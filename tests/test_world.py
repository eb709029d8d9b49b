"""The world of an attempt when no dump lists it (frlake/diagnose/world.py): each rule alone, the rank it
finds, and the shapes where it must find nothing."""

from __future__ import annotations

from frlake.diagnose.world import infer

TP = "mesh_tp"
DP = "mesh_dp"


def _mesh(dead: set[int], world: int = 8) -> tuple[dict, dict, dict]:
    """An 8-rank 2-D mesh (TP pairs, DP stripes of 4), two ranks a host, as the surviving ranks record it."""
    alive = [r for r in range(world) if r not in dead]
    hosts = {r: f"host-{'abcd'[r // 2]}" for r in alive}
    members = {"0": set(alive)}
    desc = {"0": "default_pg"}
    for i in range(0, world, 2):
        members[f"tp{i}"] = {r for r in (i, i + 1) if r in alive}
        desc[f"tp{i}"] = TP
    for j in range(2):
        members[f"dp{j}"] = {r for r in range(j, world, 2) if r in alive}
        desc[f"dp{j}"] = DP
    return hosts, {k: v for k, v in members.items() if v}, desc


def test_a_dead_rank_between_others_is_a_gap_and_fills_its_groups():
    hosts, members, desc = _mesh({3})
    world = infer(hosts, members, desc, {}, set(), set())
    assert world.ranks == set(range(8))
    assert world.members["tp2"] == {2, 3} and world.members["dp1"] == {1, 3, 5, 7}
    assert world.members["0"] == set(range(8))
    said = " | ".join(world.how)
    assert "numbered from 0 to 7" in said and "mesh_tp group tp2 holds 1 of the 2" in said and "host-b" in said


def test_the_last_rank_dead_is_found_by_its_siblings_and_its_host():
    hosts, members, desc = _mesh({7})
    world = infer(hosts, members, desc, {}, set(), set())
    assert world.ranks == set(range(8))
    assert world.members["tp6"] == {6, 7} and world.members["dp1"] == {1, 3, 5, 7}
    assert any("host host-d holds 1 dump" in line for line in world.how)
    assert any("mesh_tp group tp6 holds 1 of the 2" in line for line in world.how)


def test_the_last_rank_dead_on_one_host_is_found_by_its_siblings_alone():
    hosts, members, desc = _mesh({7})
    world = infer({r: "host-a" for r in hosts}, members, desc, {}, set(), set())
    assert world.ranks == set(range(8)) and world.members["dp1"] == {1, 3, 5, 7}
    assert any("4 mesh_tp groups of 2 ranks each make a world of 8" in line for line in world.how)


def test_the_last_rank_dead_is_found_by_the_default_groups_all_gather_alone():
    hosts = {r: "host-a" for r in range(3)}
    world = infer(hosts, {"0": {0, 1, 2}}, {"0": "default_pg"}, {"0": 4}, set(), set())
    assert world.ranks == {0, 1, 2, 3} and world.members["0"] == {0, 1, 2, 3}


def test_a_whole_job_that_dumped_infers_nothing():
    hosts, members, desc = _mesh(set())
    world = infer(hosts, members, desc, {}, set(), set())
    assert world.ranks == set(range(8)) and world.how == []


def test_groups_a_dump_lists_are_whole_even_when_uneven():
    """split_group into 5 + 3: listed by pg_config, never completed to 5 + 5."""
    hosts = {r: "host-a" for r in range(8)}
    members = {"0": set(range(8)), "s@a": set(range(5)), "s@b": {5, 6, 7}}
    desc = {"0": "default_pg", "s@a": "split", "s@b": "split"}
    world = infer(hosts, members, desc, {}, {"s@a", "s@b"}, set())
    assert world.ranks == set(range(8)) and world.how == []


def test_one_complete_sibling_does_not_grow_the_world():
    """Two DP groups, one short: the short one is only completed from ranks known otherwise."""
    hosts = {0: "h0", 2: "h1", 4: "h2", 6: "h3", 1: "h4", 5: "h5"}
    members = {"dp0": {0, 2, 4, 6}, "dp1": {1, 5}}
    desc = {"dp0": DP, "dp1": DP}
    world = infer(hosts, members, desc, {}, set(), set())
    assert 7 not in world.ranks  # nothing but the one complete sibling says a rank 7 exists
    assert 3 in world.ranks and world.members["dp1"] == {1, 5}  # a run of 4 would need rank 7 too: no guess


def test_a_short_group_with_two_ways_to_complete_it_takes_none():
    hosts = {0: "h", 1: "h", 2: "h", 4: "h", 5: "h", 6: "h", 7: "h"}
    members = {"g0": {0, 1}, "g1": {2}, "g2": {4, 5}, "g3": {6, 7}, "x": {3}}
    desc = {"g0": TP, "g1": TP, "g2": TP, "g3": TP, "x": None}
    world = infer(hosts, members, desc, {}, set(), set())
    # rank 3 is in the world (it recorded in "x") but no TP sibling holds it: g1 = {2, 3} is the one way
    assert world.members["g1"] == {2, 3}


def test_hosts_dealt_round_robin_say_nothing():
    hosts = {0: "a", 1: "b", 2: "a", 3: "b", 4: "a"}  # five dumps, two hosts, ranks interleaved
    world = infer(hosts, {"0": set(hosts)}, {"0": "default_pg"}, {}, set(), set())
    assert world.ranks == set(range(5)) and world.how == []
