#!/usr/bin/env python3
"""Fast, deterministic generator of synthetic NCCL-style Flight Recorder dumps.

Writes one job attempt the way a site that keeps dumps by folder would:
``<outdir>/<job>/attempt-<n>/<host>/rank_<r>`` (``rank_<r>.json`` for JSON),
rank ``r`` on host ``node-%04d`` % (r // ranks_per_host).

Every file is a Flight Recorder "2.10" dump shaped as torch's NCCL backend
writes it (torch >= 2.9, FlightRecorderDetail.hpp / ProcessGroupNCCL.cpp):

* top level: version, pg_config, comm_lib_version, pg_status, entries
  (JSON: sorted keys, no frames, pg_status values as strings,
  time_discovered_* 0 instead of null, process_group a list, nccl_comm_state {}).
* pg_config holds the groups this rank is a member of (FR records a group's
  ranks when the rank constructs its backend, so non-members never see it):
  "0" default_pg (the world), its "tp" group (a block of 8 consecutive ranks),
  its "dp" group (the stripe of ranks with the same r % 8) and, when the world
  is even, its "pp" group: the 2-rank pipeline pair {r, r + world/2} that
  carries all point-to-point traffic. Group names are global creation order
  (tp groups first, then dp, then pp, as every rank calls new_group for every
  group in the same order); ``pg_id`` is the rank-local backend index
  (0 world, 1 tp, 2 dp, 3 pp), as is the pg_status key.
* ``entries``: exactly ``entries`` records per rank, i.e. a full ring buffer
  that has wrapped: record_id, collective_seq_id (and the pp groups'
  p2p_seq_id) start far above 0 and agree across ranks. The counters are per
  group, as ProcessGroupNCCL keeps them: a collective bumps its group's
  collective_seq_id and carries the group's p2p_seq_id (0 here: tp, dp and the
  world see no p2p); a send/recv bumps its group's p2p_seq_id and carries the
  collective_seq_id unchanged (0 for a pp group); op_id counts both.
* p2p names are ProcessGroupNCCL's, with GROUP-LOCAL ranks:
  ``nccl:send <me>-><peer>`` and ``nccl:recv <me><-<peer>`` (so "nccl:send
  0->1" on the pair's low rank matches "nccl:recv 1<-0" on its high rank);
  input and output sizes are both the tensor's. A pp group's pg_status
  follows its p2p_seq_id, since the watchdog records the work's own seq.
* duration_ms is present only on completed entries (as with
  TORCH_NCCL_ENABLE_TIMING); it is a float32 widened to a Python float.
* frames are shared dicts drawn from ~15 call sites (Megatron-style training
  loop: forward sequence-parallel all_gather / reduce_scatter, backward on the
  autograd thread, grad reduce_scatter, grad-norm all_reduce, param
  all_gather, loss all_reduce, a pipeline send/recv exchange on the pp group),
  with one variant of the main-thread stacks on every 10th step. A fresh list
  per entry references the shared frame dicts, exactly like torch's pickler
  memoizes them.

Faults:
* ``missing_last``: the culprit stalls outside any collective just before the
  last collective of one of its groups (its dp stripe, or its tp block when dp
  stripes have one member). Its buffer ends one collective earlier in that
  group. The other members have that collective "started" and the following
  world all_reduce "scheduled" (stuck behind it); every other rank completed
  its own copy and has the world all_reduce "started" waiting for them. The
  culprit never enqueues either.
* ``straggler``: the culprit's time_created_ns is 20-50 ms later than the other
  members' on every entry; its group peers show the wait in duration_ms.
* ``none``: a healthy on-demand dump (last entry scheduled, one started).

Run ``python bench/synth.py --help``; the API is :func:`write_job`.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import pickle
import random
import struct
import sys
import time

__all__ = ["write_job", "check_job", "FAULTS"]

FAULTS = ("none", "missing_last", "straggler")
VERSION = "2.10"
TP = 8                      # tensor-parallel block size / dp stripe count
LAYERS = 4                  # transformer layers simulated per step
BUCKETS = 2                 # gradient buckets (dp reduce_scatter / all_gather)
TIMEOUT_MS = 600_000        # NCCL default collective timeout
STEP_NS = 1_000_000_000     # nominal step period
WATCHDOG_NS = 100_000_000   # the NCCL watchdog polls every 100 ms
JITTER_NS = 3_000_000       # ranks enqueue the same collective within ~3 ms
HOST_SKEW_NS = 500_000      # host clocks differ by up to +-0.5 ms
SEQ_LEN, HIDDEN, MICRO = 4096, 4096, 1
T0_NS = 1_790_000_000_000_000_000  # 2026-09: like the corpus timestamps

WORLD, TPG, DPG, PPG = 0, 1, 2, 3   # group kinds == the rank-local pg_id

# ----------------------------------------------------------------------------
# call sites: frame dicts are interned so that every stack shares them

TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
C10D = TORCH + "/distributed/distributed_c10d.py"
LOGGER = TORCH + "/distributed/c10d_logger.py"
MODULE = TORCH + "/nn/modules/module.py"
FUNCTION = TORCH + "/autograd/function.py"
AUTOGRAD = TORCH + "/autograd/__init__.py"
GRAPH = TORCH + "/autograd/graph.py"
AMP = TORCH + "/amp/autocast_mode.py"
CTXLIB = TORCH + "/utils/_contextlib.py"
ELASTIC = TORCH + "/distributed/elastic/multiprocessing/errors/__init__.py"
APP = "/workspace/llm"
ENTRY = APP + "/pretrain_gpt.py"
TRAINING = APP + "/llm/training.py"
SCHEDULES = APP + "/llm/pipeline/schedules.py"
P2P = APP + "/llm/pipeline/p2p_communication.py"
GPT = APP + "/llm/models/gpt_model.py"
TLAYER = APP + "/llm/transformer/transformer_layer.py"
ATTN = APP + "/llm/transformer/attention.py"
MLP = APP + "/llm/transformer/mlp.py"
LAYERS_PY = APP + "/llm/tensor_parallel/layers.py"
MAPPINGS = APP + "/llm/tensor_parallel/mappings.py"
RANDOM_PY = APP + "/llm/tensor_parallel/random.py"
GRADBUF = APP + "/llm/distributed/param_and_grad_buffer.py"
DDP = APP + "/llm/distributed/distributed_data_parallel.py"
FINALIZE = APP + "/llm/distributed/finalize_model_grads.py"
OPTIM = APP + "/llm/optimizer/optimizer.py"
DISTOPT = APP + "/llm/optimizer/distrib_optimizer.py"
CLIP = APP + "/llm/optimizer/clip_grads.py"
UTILS = APP + "/llm/utils.py"
LOGGING_PY = APP + "/llm/logging_utils.py"

C10D_LINE = {"all_reduce": 2948, "all_gather": 3840, "reduce_scatter": 4403,
             "send": 2468, "recv": 2515}

_FRAMES: dict = {}


def _f(name: str, filename: str, line: int) -> dict:
    key = (name, filename, line)
    d = _FRAMES.get(key)
    if d is None:
        d = _FRAMES[key] = {"name": name, "filename": filename, "line": line}
    return d


def _c10d(op: str) -> list:
    return [_f(op, C10D, C10D_LINE[op]), _f("wrapper", LOGGER, 81)]


def _call() -> list:
    return [_f("_call_impl", MODULE, 1784), _f("_wrapped_call_impl", MODULE, 1773)]


def _bottom(variant: int, inner: str = "train_step") -> list:
    # train() calls train_step from another line on profiled steps (variant 1)
    frames = [_f("train_step", TRAINING, 1052)] if inner == "train_step" else []
    frames += [_f("train", TRAINING, 1398 if variant == 0 else 1391),
               _f("pretrain", TRAINING, 386), _f("main", ENTRY, 214),
               _f("wrapper", ELASTIC, 357), _f("<module>", ENTRY, 230)]
    return frames


def _fwd_stack(site: str, variant: int) -> tuple:
    op, helper, fn_line, layer_fn, mod_file, mod_line, tl_line = {
        "qkv": ("all_gather", "_gather_along_first_dim", 221, ("forward", 915), ATTN, 412, 301),
        "proj": ("reduce_scatter", "_reduce_scatter_along_first_dim", 262, ("forward", 1107), ATTN, 468, 301),
        "fc1": ("all_gather", "_gather_along_first_dim", 221, ("forward", 915), MLP, 118, 344),
        "fc2": ("reduce_scatter", "_reduce_scatter_along_first_dim", 262, ("forward", 1107), MLP, 139, 344),
    }[site]
    helper_line = 97 if op == "all_gather" else 126
    fr = _c10d(op) + [_f(helper, MAPPINGS, helper_line), _f("forward", MAPPINGS, fn_line),
                      _f("apply", FUNCTION, 575), _f(layer_fn[0], LAYERS_PY, layer_fn[1])]
    fr += _call() + [_f("forward", mod_file, mod_line)] + _call()
    fr += [_f("forward", TLAYER, tl_line)] + _call() + [_f("forward", GPT, 263)] + _call()
    fr += [_f("forward_step", SCHEDULES, 279)] + _bottom(variant)
    return tuple(fr)


def _bwd_stack(site: str) -> tuple:
    # backward of the sequence-parallel mappings, on the autograd device thread,
    # inside reentrant activation checkpointing: no main-thread frames at all
    op, helper, line = {
        "fc2": ("all_gather", "_gather_along_first_dim", 270),
        "fc1": ("reduce_scatter", "_reduce_scatter_along_first_dim", 229),
        "proj": ("all_gather", "_gather_along_first_dim", 270),
        "qkv": ("reduce_scatter", "_reduce_scatter_along_first_dim", 229),
    }[site]
    helper_line = 97 if op == "all_gather" else 126
    return tuple(_c10d(op) + [
        _f(helper, MAPPINGS, helper_line), _f("backward", MAPPINGS, line),
        _f("apply", FUNCTION, 307), _f("_engine_run_backward", GRAPH, 829),
        _f("backward", AUTOGRAD, 353), _f("backward", RANDOM_PY, 308),
        _f("decorate_bwd", AMP, 547), _f("apply", FUNCTION, 307)])


def _p2p_stack(op: str, variant: int) -> tuple:
    return tuple(_c10d(op) + [
        _f("_p2p_ops", P2P, 214 if op == "send" else 221),
        _f("_communicate", P2P, 352), _f("exchange_boundary", P2P, 498),
        _f("forward_backward_pipelining_without_interleaving", SCHEDULES, 1502)] + _bottom(variant))


def _grad_rs_stack(variant: int) -> tuple:
    return tuple(_c10d("reduce_scatter") + [
        _f("start_grad_sync", GRADBUF, 372), _f("start_grad_sync", DDP, 442),
        _f("finish_grad_sync", DDP, 463), _f("finalize_model_grads", FINALIZE, 145),
        _f("forward_backward_no_pipelining", SCHEDULES, 531)] + _bottom(variant))


def _grad_norm_stack(variant: int) -> tuple:
    return tuple(_c10d("all_reduce") + [
        _f("get_grad_norm_fp32", CLIP, 106), _f("clip_grad_norm", OPTIM, 212),
        _f("step", OPTIM, 428), _f("decorate_context", CTXLIB, 120)] + _bottom(variant))


def _param_ag_stack(variant: int) -> tuple:
    return tuple(_c10d("all_gather") + [
        _f("_all_gather_params", DISTOPT, 1702), _f("step_with_ready_grads", DISTOPT, 1822),
        _f("step", OPTIM, 434), _f("decorate_context", CTXLIB, 120)] + _bottom(variant))


def _loss_stack(variant: int) -> tuple:
    return tuple(_c10d("all_reduce") + [
        _f("all_reduce_loss", UTILS, 94), _f("_reduce_loss_dict", TRAINING, 718)] + _bottom(variant))


def _metrics_stack(variant: int) -> tuple:
    return tuple(_c10d("all_reduce") + [
        _f("_reduce_metrics", LOGGING_PY, 61), _f("report_throughput", LOGGING_PY, 88),
        _f("training_log", TRAINING, 905)] + _bottom(variant, inner="train"))


# ----------------------------------------------------------------------------
# one training step as a list of op slots (shared by every rank)

# shape kinds -> (input shapes, input dtype, output shapes, output dtype) by group size
_ACT = (SEQ_LEN // TP, MICRO, HIDDEN)
_GRAD_BUCKET = (201_326_592, 150_994_944)  # numel of each gradient bucket


def _shape(kind: str, g: int, world: int) -> tuple:
    if kind == "tp_ag":
        return (_ACT,), ("BFloat16",), ((g,) + _ACT,), ("BFloat16",)
    if kind == "tp_rs":
        return ((g,) + _ACT,), ("BFloat16",), (_ACT,), ("BFloat16",)
    if kind.startswith("dp_rs"):
        n = _GRAD_BUCKET[int(kind[-1])] // g
        return ((g, n),), ("Float",), ((n,),), ("Float",)
    if kind.startswith("dp_ag"):
        n = _GRAD_BUCKET[int(kind[-1])] // g
        return ((n,),), ("BFloat16",), ((g, n),), ("BFloat16",)
    if kind == "norm":
        return ((1,),), ("Float",), ((1,),), ("Float",)
    if kind == "loss":
        return ((2,),), ("Float",), ((2,),), ("Float",)
    if kind == "metrics":
        return ((4,),), ("Float",), ((4,),), ("Float",)
    if kind == "p2p":
        return ((16, HIDDEN),), ("BFloat16",), ((16, HIDDEN),), ("BFloat16",)
    raise ValueError(kind)


# duration pools (ms): (low, high) of a uniform draw, rounded to float32
_DUR = {"tp": (0.18, 0.45), "p2p": (0.03, 0.09), "dp_rs": (38.0, 85.0),
        "dp_ag": (17.0, 42.0), "small": (0.04, 0.32)}
POOL = 64


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _step_template(world: int, p2p: bool, variant: int, metrics: bool) -> list:
    """Ops of one step: (gk, op, shape kind, stacks(lo, hi), thread, t_ms, dur kind, p2p_pos)."""
    ops = []
    t = 5.0
    for _layer in range(LAYERS):  # forward, sequence parallel
        for site, op, dt in (("qkv", "all_gather", 0.0), ("proj", "reduce_scatter", 12.0),
                             ("fc1", "all_gather", 20.0), ("fc2", "reduce_scatter", 35.0)):
            s = _fwd_stack(site, variant)
            ops.append((TPG, op, "tp_ag" if op == "all_gather" else "tp_rs", (s, s), 0, t + dt, "tp", -1))
        t += 40.0
    if p2p:  # exchange on the 2-rank pp group {r, r + world/2}: the low rank sends first
        send, recv = _p2p_stack("send", variant), _p2p_stack("recv", variant)
        ops.append((PPG, "p2p", "p2p", (send, recv), 0, t + 8.0, "p2p", 0))
        ops.append((PPG, "p2p", "p2p", (recv, send), 0, t + 8.3, "p2p", 1))
    t = 200.0
    for _layer in range(LAYERS):  # backward on the autograd thread
        for site, op, dt in (("fc2", "all_gather", 0.0), ("fc1", "reduce_scatter", 25.0),
                             ("proj", "all_gather", 45.0), ("qkv", "reduce_scatter", 70.0)):
            s = _bwd_stack(site)
            ops.append((TPG, op, "tp_ag" if op == "all_gather" else "tp_rs", (s, s), 1, t + dt, "tp", -1))
        t += 90.0
    s = _grad_rs_stack(variant)
    for b in range(BUCKETS):
        ops.append((DPG, "reduce_scatter", f"dp_rs{b}", (s, s), 0, 570.0 + 3.0 * b, "dp_rs", -1))
    s = _grad_norm_stack(variant)
    ops.append((WORLD, "all_reduce", "norm", (s, s), 0, 700.0, "small", -1))
    s = _param_ag_stack(variant)
    for b in range(BUCKETS):
        ops.append((DPG, "all_gather", f"dp_ag{b}", (s, s), 0, 705.0 + 2.0 * b, "dp_ag", -1))
    s = _loss_stack(variant)
    ops.append((WORLD, "all_reduce", "loss", (s, s), 0, 760.0, "small", -1))
    if metrics:
        s = _metrics_stack(variant)
        ops.append((DPG, "all_reduce", "metrics", (s, s), 0, 770.0, "small", -1))
    return ops


class _Job:
    """Everything rank-independent, computed once (a copy goes to each pool worker)."""

    def __init__(self, world, entries, job, attempt, rph, fault, culprit, seed, fmt, comm_lib_version):
        self.world, self.entries, self.job, self.attempt = world, entries, job, attempt
        self.rph, self.fault, self.culprit, self.seed, self.fmt = rph, fault, culprit, seed, fmt
        self.comm_lib_version = comm_lib_version
        rng = random.Random(seed * 1_000_003 + 17)
        self.tp = tp = min(TP, world)
        self.n_tp = n_tp = (world + tp - 1) // tp
        self.tp_members = [list(range(g * tp, min(world, (g + 1) * tp))) for g in range(n_tp)]
        self.dp_members = [list(range(j, world, tp)) for j in range(tp)]
        self.hosts = [f"node-{h:04d}" for h in range((world + rph - 1) // rph)]
        self.p2p = world >= 2 and world % 2 == 0

        # pp pairs {r, r + world/2} (only for an even world): all p2p runs there
        self.half = half = world // 2 if self.p2p else 0
        self.pp_members = [[j, j + half] for j in range(half)]

        # group names in creation order: "0" world, then tp blocks, dp stripes, pp pairs
        self.names = (["0"] + [str(1 + g) for g in range(n_tp)] + [str(1 + n_tp + j) for j in range(tp)]
                      + [str(1 + n_tp + tp + j) for j in range(half)])
        self.descs = ["default_pg"] + ["tp"] * n_tp + ["dp"] * tp + ["pp"] * half
        self.pg_tuples = [(n, d) for n, d in zip(self.names, self.descs)]
        members = [list(range(world))] + self.tp_members + self.dp_members + self.pp_members
        self.pg_conf = [{"name": n, "desc": d, "ranks": str(m)}
                        for n, d, m in zip(self.names, self.descs, members)]
        self.members = members

        # the hang group for missing_last: the culprit's dp stripe if it has peers,
        # else its tp block
        self.hang_kind = None
        if fault == "missing_last":
            if len(self.dp_members[culprit % tp]) > 1:
                self.hang_kind = DPG
            elif len(self.tp_members[culprit // tp]) > 1:
                self.hang_kind = TPG

        # program: full steps S0..F-1 and a final step cut after the grad-norm all_reduce
        steps = {}
        for variant in (0, 1):
            for metrics in (False, True):
                steps[variant, metrics] = _step_template(world, self.p2p, variant, metrics)
        final_cut = next(i for i, o in enumerate(steps[0, False]) if o[2] == "norm") + 1
        per_step = len(steps[0, False])
        n_full = max(1, math.ceil((entries + 2 - final_cut) / per_step) + 1)
        final = n_full + 500 + rng.randrange(20_000)
        start = final - n_full

        def step_ops(s):
            return steps[1 if s % 10 == 0 else 0, s % 5 == 0]

        # counters before step `start` (every group of a kind runs the same program)
        cnt = {k: 0 for k in ("w", "pp", "tp", "dp")}
        for v in (0, 1):
            for m in (False, True):
                n_steps = sum(1 for s in range(start) if (s % 10 == 0) == bool(v) and (s % 5 == 0) == m)
                ops = steps[v, m]
                cnt["w"] += n_steps * sum(1 for o in ops if o[0] == WORLD)
                cnt["pp"] += n_steps * sum(1 for o in ops if o[0] == PPG)
                cnt["tp"] += n_steps * sum(1 for o in ops if o[0] == TPG)
                cnt["dp"] += n_steps * sum(1 for o in ops if o[0] == DPG)
        self.record_base = cnt["w"] + cnt["pp"] + cnt["tp"] + cnt["dp"]
        # per group kind, as ProcessGroupNCCL keeps them: seqCollective_, seqP2P_, op_id_
        coll = [cnt["w"], cnt["tp"], cnt["dp"], 0]
        p2p_seq = [0, 0, 0, cnt["pp"]]
        op_id = [cnt["w"], cnt["tp"], cnt["dp"], cnt["pp"]]

        t0 = T0_NS + rng.randrange(10**15)
        self.slots = slots = []       # per slot: (gk, name, sid, stacks, thread, t_nom, cs, ps, oid, dur, pos)
        self.cum = cum = []           # per kind, the seq pg_status tracks, after each slot
        shape_kinds = {}
        for s in range(start, final + 1):
            ops = step_ops(s)
            if s == final:
                ops = ops[:final_cut]
            t_step = t0 + (s - start) * STEP_NS + rng.randrange(-20_000_000, 20_000_000)
            for gk, op, kind, stacks, thread, t_ms, dkind, pos in ops:
                if pos >= 0:
                    p2p_seq[gk] += 1
                    name = None
                else:
                    coll[gk] += 1
                    name = "nccl:" + op
                op_id[gk] += 1
                sid = shape_kinds.setdefault(kind, len(shape_kinds))
                slots.append((gk, name, sid, stacks, thread, t_step + int(t_ms * 1e6),
                              coll[gk], p2p_seq[gk], op_id[gk], dkind, pos))
                cum.append((coll[WORLD], coll[TPG], coll[DPG], p2p_seq[PPG]))
        self.shape_kinds = list(shape_kinds)
        self.end = len(slots) - 1     # the grad-norm world all_reduce
        self.hang_slot = self.end - 1 if self.hang_kind == DPG else max(
            i for i in range(self.end) if slots[i][0] == TPG)
        self.dump_ns = slots[self.end][5] + (TIMEOUT_MS * 1_000_000 if fault == "missing_last" else 60_000_000)
        self._shape_cache = {}
        self.dur_pool = {k: [_f32(lo + (hi - lo) * rng.random()) for _ in range(POOL)]
                         for k, (lo, hi) in _DUR.items()}
        # straggler delay per slot (ns), the same draw for the culprit and its peers
        # (24..46 ms, so that with +-4 ms of jitter and host skew the culprit is
        # 20..50 ms behind every single peer)
        self.delay = [rng.randrange(24_000_000, 46_000_000) for _ in slots] if fault == "straggler" else None
        self.host_skew = [rng.randrange(-HOST_SKEW_NS, HOST_SKEW_NS) for _ in self.hosts]

    def shapes_for(self, gsize: tuple) -> list:
        got = self._shape_cache.get(gsize)
        if got is None:
            got = []
            for kind in self.shape_kinds:
                g = gsize[DPG] if kind.startswith("dp") else gsize[TPG] if kind.startswith("tp") else gsize[WORLD]
                got.append(_shape(kind, g, self.world))
            self._shape_cache[gsize] = got
        return got

    def path(self, r: int) -> str:
        name = f"rank_{r}.json" if self.fmt == "json" else f"rank_{r}"
        return os.path.join(self.job, f"attempt-{self.attempt}", self.hosts[r // self.rph], name)


# ----------------------------------------------------------------------------
# one rank


def _rank_dump(J: _Job, r: int) -> dict:
    world, c, fault = J.world, J.culprit, J.fault
    tpg, dpg = r // J.tp, r % J.tp
    gidx = (0, 1 + tpg, 1 + J.n_tp + dpg)
    if J.p2p:  # its pp pair
        gidx += (1 + J.n_tp + J.tp + r % J.half,)
    pgt = [J.pg_tuples[i] for i in gidx]
    shapes = J.shapes_for((world, len(J.tp_members[tpg]), len(J.dp_members[dpg])))
    rng = random.Random((J.seed * 1_000_003 + r) * 2_654_435_761 + 1)
    rand = rng.random
    main_tid = str(0x7F0000000000 + (rng.getrandbits(24) << 16) + 0x1740)
    bwd_tid = str(0x7F0000000000 + (rng.getrandbits(24) << 16) + 0x6640)
    threads = (("pt_main_thread", main_tid), ("pt_autograd_0", bwd_tid))
    skew = J.host_skew[r // J.rph]
    phase = rng.randrange(WATCHDOG_NS)

    # p2p peer and direction: the low half sends first. Names carry group-local
    # ranks, as ProcessGroupNCCL writes them: "send <me>-><peer>", "recv <me><-<peer>"
    half = J.half
    peer = (r + half) % world if half else r
    lo = r < half
    p2p_names = (("nccl:send 0->1", "nccl:recv 0<-1") if lo
                 else ("nccl:recv 1<-0", "nccl:send 1->0"))
    role = 0 if lo else 1

    # which group kinds contain the culprit (for straggler waits / missing_last)
    has_c = (True, c is not None and c // J.tp == tpg, c is not None and c % J.tp == dpg,
             c is not None and c in (r, peer))
    is_c = c is not None and r == c

    end = J.end
    states = {}
    if fault == "missing_last" and J.hang_kind is not None:
        if is_c:
            end = J.hang_slot - 1
        elif has_c[J.hang_kind]:
            states = {J.hang_slot: "started", J.end: "scheduled"}
        else:
            states = {J.end: "started"}
    else:
        states = {J.end: "scheduled", J.end - 1: "started"}
    first = end - J.entries + 1
    if first < 0:
        raise ValueError("program too short for the buffer (internal error)")

    straggle = fault == "straggler" and c is not None
    delay = J.delay
    pools = J.dur_pool
    slots = J.slots
    dump_ns = J.dump_ns + rng.randrange(0, 400_000_000)
    record_base = J.record_base
    out = []
    append = out.append
    prev = 0
    for i in range(first, end + 1):
        gk, name, sid, stacks, thread, t_nom, cs, ps, oid, dkind, pos = slots[i]
        tc = t_nom + skew + int(rand() * JITTER_NS)
        if straggle and is_c:
            tc += delay[i]
        if tc <= prev:
            tc = prev + 1000 + int(rand() * 20_000)
        prev = tc
        if pos >= 0:
            name = p2p_names[pos]
            victim = straggle and peer == c
        else:
            victim = straggle and not is_c and has_c[gk]
        ins, ind, outs, outd = shapes[sid]
        tname, tid = threads[thread]
        st = states.get(i, "completed")
        if st == "completed":
            d = pools[dkind][int(rand() * POOL)]
            if victim:  # its kernel sat waiting for the straggler
                d = _f32(d + delay[i] / 1e6)
            t_end = tc + 20_000 + int(rand() * 900_000) + int(d * 1e6)
            dc = phase + -(-(t_end - phase) // WATCHDOG_NS) * WATCHDOG_NS + int(rand() * 400_000)
            append({
                "frames": list(stacks[role]), "record_id": record_base + i, "pg_id": gk,
                "process_group": pgt[gk], "thread_name": tname, "thread_id": tid,
                "collective_seq_id": cs, "p2p_seq_id": ps, "op_id": oid,
                "profiling_name": name, "time_created_ns": tc, "duration_ms": d,
                "input_sizes": [list(x) for x in ins], "input_dtypes": list(ind),
                "output_sizes": [list(x) for x in outs], "output_dtypes": list(outd),
                "state": "completed", "time_discovered_started_ns": dc - 1500 - int(rand() * 4000),
                "time_discovered_completed_ns": dc, "retired": True, "timeout_ms": TIMEOUT_MS,
                "is_p2p": pos >= 0,
            })
        else:
            append({
                "frames": list(stacks[role]), "record_id": record_base + i, "pg_id": gk,
                "process_group": pgt[gk], "thread_name": tname, "thread_id": tid,
                "collective_seq_id": cs, "p2p_seq_id": ps, "op_id": oid,
                "profiling_name": name, "time_created_ns": tc,
                "input_sizes": [list(x) for x in ins], "input_dtypes": list(ind),
                "output_sizes": [list(x) for x in outs], "output_dtypes": list(outd),
                "state": st,
                "time_discovered_started_ns": dump_ns + int(rand() * 2_000_000) if st == "started" else None,
                "time_discovered_completed_ns": None, "retired": False, "timeout_ms": TIMEOUT_MS,
                "is_p2p": pos >= 0,
            })

    # pg_status from the rank's whole history, not just the buffer. The watchdog
    # records each work's own seq: collective_seq_id, or p2p_seq_id for a p2p
    # work, so a pp group's status follows its p2p_seq_id (all its ops completed)
    status = {}
    last = J.cum[end]
    for gk in (WORLD, TPG, DPG, PPG)[:len(gidx)]:
        enq = last[gk]
        open_seqs = [slots[i][6] for i, s in states.items() if i <= end and slots[i][0] == gk and slots[i][10] < 0]
        started = [slots[i][6] for i, s in states.items()
                   if i <= end and s == "started" and slots[i][0] == gk and slots[i][10] < 0]
        done = min(open_seqs) - 1 if open_seqs else enq
        status[str(gk)] = {"last_enqueued_collective": enq,
                           "last_started_collective": max(started) if started else done,
                           "last_completed_collective": done}
    conf = {J.names[i]: J.pg_conf[i] for i in sorted(set(gidx), key=lambda i: J.names[i])}
    return {"version": VERSION, "pg_config": conf, "comm_lib_version": J.comm_lib_version,
            "pg_status": status, "entries": out}


def _to_json(d: dict) -> bytes:
    """The JSON dump shape: no frames, strings in pg_status, 0 for null times."""
    ents = []
    for e in d["entries"]:
        e = dict(e)
        del e["frames"]
        e["process_group"] = list(e["process_group"])
        if e["time_discovered_started_ns"] is None:
            e["time_discovered_started_ns"] = 0
        if e["time_discovered_completed_ns"] is None:
            e["time_discovered_completed_ns"] = 0
        ents.append(e)
    top = {"version": d["version"], "comm_lib_version": d["comm_lib_version"],
           "pg_config": d["pg_config"],
           "pg_status": {k: {kk: str(vv) for kk, vv in v.items()} for k, v in d["pg_status"].items()},
           "entries": ents, "nccl_comm_state": {}}
    return json.dumps(top, sort_keys=True, separators=(",", ":")).encode()


_JOB: _Job | None = None
_OUT = ""


def _adopt(job: _Job, outdir: str) -> None:
    """A pool worker's copy of the job it writes ranks of."""
    global _JOB, _OUT
    _JOB, _OUT = job, outdir


def _write_ranks(ranks) -> int:
    J, total = _JOB, 0
    was_enabled = gc.isenabled()
    gc.disable()  # millions of fresh containers, no cycles: the collector only costs time
    try:
        for r in ranks:
            d = _rank_dump(J, r)
            data = _to_json(d) if J.fmt == "json" else pickle.dumps(d, protocol=4)
            del d
            with open(os.path.join(_OUT, J.path(r)), "wb") as fh:
                fh.write(data)
            total += len(data)
    finally:
        if was_enabled:
            gc.enable()
    return total


def write_job(outdir: str, world: int, entries: int, *, job: str = "synth", attempt: int = 0,
              ranks_per_host: int = 8, fault: str | None = None, culprit: int | None = None,
              seed: int = 0, fmt: str = "pickle", procs: int | None = None,
              comm_lib_version: str = "2.21.5") -> dict:
    """Write one job attempt of synthetic FR dumps; return the ground truth.

    ``fault``: None/"none", "missing_last" or "straggler". ``culprit`` defaults
    to a seed-chosen rank when a fault is set. ``fmt``: "pickle" (``rank_<r>``)
    or "json" (``rank_<r>.json``). ``procs``: worker processes (default 2 at
    most, started by a forkserver; output is identical for any count).
    """
    global _JOB, _OUT
    fault = "none" if fault in (None, "none") else fault
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}, not {fault!r}")
    if fmt not in ("pickle", "json"):
        raise ValueError("fmt must be 'pickle' or 'json'")
    if world < 1 or entries < 1 or ranks_per_host < 1:
        raise ValueError("world, entries and ranks_per_host must be >= 1")
    if fault == "none":
        culprit = None
    elif culprit is None:
        culprit = random.Random(seed * 7_919 + world).randrange(world)
    elif not 0 <= culprit < world:
        raise ValueError(f"culprit {culprit} is not a rank of a world of {world}")
    if fault == "missing_last" and world < 2:
        raise ValueError("missing_last needs a world of at least 2")
    t_start = time.perf_counter()
    J = _Job(world, entries, job, attempt, ranks_per_host, fault, culprit, seed, fmt, comm_lib_version)
    for h in J.hosts:
        os.makedirs(os.path.join(outdir, job, f"attempt-{attempt}", h), exist_ok=True)
    _JOB, _OUT = J, outdir
    if procs is None:
        procs = min(2, os.cpu_count() or 1)
    try:
        if procs > 1 and world >= 16:
            import multiprocessing as mp
            chunk = max(1, min(32, world // (procs * 8)))
            parts = [range(i, min(world, i + chunk)) for i in range(0, world, chunk)]
            # never a fork of the caller: a forked copy of a process with threads (DuckDB's, a test
            # runner's) can crash in its first garbage collection, and the pool then waits forever. Nor
            # the caller's forkserver: a process has one, and it keeps the modules of whoever started it
            # first; started here, it would give frlake's ingest workers in this process no preloaded
            # frlake (each worker would import it, 0.3 CPU s: the benches measured that, not ingest)
            with mp.get_context("spawn").Pool(procs, initializer=_adopt, initargs=(J, outdir)) as pool:
                total = sum(pool.imap_unordered(_write_ranks, parts))
        else:
            total = _write_ranks(range(world))
    finally:
        _JOB = None

    truth = {
        "job": job, "attempt": attempt, "world": world, "hosts": J.hosts, "format": fmt,
        "scenario": fault, "fault": fault, "culprit_rank": culprit,
        "culprit_host": None if culprit is None else J.hosts[culprit // ranks_per_host],
        "ranks_per_host": ranks_per_host, "entries": entries, "seed": seed,
        "ranks_dumped": list(range(world)),
        "groups": {n: {"desc": d, "ranks": m} for n, d, m in zip(J.names, J.descs, J.members)},
        "comm_lib_version": comm_lib_version, "files": world, "bytes": total,
        "seconds": round(time.perf_counter() - t_start, 3),
    }
    if fault == "missing_last" and J.hang_kind is not None:
        hs, es = J.slots[J.hang_slot], J.slots[J.end]
        g = (1 + culprit // J.tp) if J.hang_kind == TPG else (1 + J.n_tp + culprit % J.tp)
        truth["hang"] = {"group": J.names[g], "desc": J.descs[g], "collective_seq_id": hs[6],
                         "profiling_name": hs[1],
                         "then": {"group": "0", "collective_seq_id": es[6], "profiling_name": es[1]}}
    if fault == "straggler":
        truth["straggler_delay_ms"] = [20, 50]
    return truth


# ----------------------------------------------------------------------------
# self-check


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} in a FR dump")


def _load(path: str) -> dict:
    with open(path, "rb") as fh:
        data = fh.read()
    if path.endswith(".json"):
        return json.loads(data)
    return _PlainUnpickler(io.BytesIO(data)).load()


ENTRY_KEYS = {"frames", "record_id", "pg_id", "process_group", "thread_name", "thread_id",
              "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "time_created_ns",
              "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state",
              "time_discovered_started_ns", "time_discovered_completed_ns", "retired",
              "timeout_ms", "is_p2p"}


def _numel(sizes) -> int:
    n = 0
    for s in sizes:
        k = 1
        for x in s:
            k *= x
        n += k
    return n


def check_job(outdir: str, truth: dict, ranks=None) -> list:
    """Load a few written files and verify structure and cross-rank consistency.

    Returns a list of problems (empty when all is well)."""
    world, fmt = truth["world"], truth["format"]
    rph = truth["ranks_per_host"]
    c = truth["culprit_rank"]
    if ranks is None:
        k = c if c is not None else world // 2
        ranks = sorted({0, 1, world - 1, min(world - 1, 8), k, (k + TP) % world,
                        k // TP * TP + (k + 1) % TP, (k + world // 2) % world} & set(range(world)))
    probs = []

    def path(r):
        name = f"rank_{r}.json" if fmt == "json" else f"rank_{r}"
        return os.path.join(outdir, truth["job"], f"attempt-{truth['attempt']}",
                            truth["hosts"][r // rph], name)

    dumps = {r: _load(path(r)) for r in ranks}
    by_key = {}
    for r, d in dumps.items():
        want_top = {"version", "pg_config", "comm_lib_version", "pg_status", "entries"}
        if fmt == "json":
            want_top.add("nccl_comm_state")
        if set(d) != want_top:
            probs.append(f"rank {r}: top-level keys {sorted(d)}")
        if d.get("version") != VERSION:
            probs.append(f"rank {r}: version {d.get('version')!r}")
        ents = d["entries"]
        if len(ents) != truth["entries"]:
            probs.append(f"rank {r}: {len(ents)} entries, want {truth['entries']}")
        conf = d["pg_config"]
        if "0" not in conf or conf["0"]["desc"] != "default_pg":
            probs.append(f"rank {r}: no default_pg in pg_config")
        for name, g in conf.items():
            if g["name"] != name or json.loads(g["ranks"]) != truth["groups"][name]["ranks"]:
                probs.append(f"rank {r}: pg_config[{name}] disagrees with truth")
            if r not in json.loads(g["ranks"]):
                probs.append(f"rank {r}: pg_config has a group it is not in")
        want_descs = ["default_pg", "dp", "pp", "tp"] if world % 2 == 0 else ["default_pg", "dp", "tp"]
        if sorted(g["desc"] for g in conf.values()) != want_descs:
            probs.append(f"rank {r}: groups {[g['desc'] for g in conf.values()]}")
        local_id = {name: {"default_pg": WORLD, "tp": TPG, "dp": DPG, "pp": PPG}[g["desc"]]
                    for name, g in conf.items()}
        prev_t, prev_id = 0, None
        for e in ents:
            keys = set(e)
            want = set(ENTRY_KEYS) - ({"frames"} if fmt == "json" else set())
            if e["state"] == "completed":
                want.add("duration_ms")
            if keys != want:
                probs.append(f"rank {r} record {e['record_id']}: keys {sorted(keys ^ want)}")
                break
            if e["time_created_ns"] <= prev_t:
                probs.append(f"rank {r} record {e['record_id']}: time_created_ns not increasing")
                break
            prev_t = e["time_created_ns"]
            if prev_id is not None and e["record_id"] != prev_id + 1:
                probs.append(f"rank {r}: record_id gap at {e['record_id']}")
                break
            prev_id = e["record_id"]
            if fmt == "pickle":
                if not 10 <= len(e["frames"]) <= 25 or set(e["frames"][0]) != {"name", "filename", "line"}:
                    probs.append(f"rank {r} record {e['record_id']}: bad frames")
                    break
                if type(e["process_group"]) is not tuple:
                    probs.append(f"rank {r}: process_group is not a tuple")
                    break
            pname, pdesc = e["process_group"]
            if pname not in conf:
                probs.append(f"rank {r}: entry in unknown group {pname}")
                break
            if e["is_p2p"] != e["profiling_name"].startswith(("nccl:send", "nccl:recv")):
                probs.append(f"rank {r}: is_p2p disagrees with {e['profiling_name']}")
            if e["pg_id"] != local_id[pname] or pdesc != conf[pname]["desc"]:
                probs.append(f"rank {r} record {e['record_id']}: pg_id/desc disagree with group {pname}")
                break
            g = json.loads(conf[pname]["ranks"])
            if not e["is_p2p"]:
                ni, no = _numel(e["input_sizes"]), _numel(e["output_sizes"])
                op = e["profiling_name"]
                ok = (ni * len(g) == no if op == "nccl:all_gather" else
                      no * len(g) == ni if op == "nccl:reduce_scatter" else ni == no)
                if not ok:
                    probs.append(f"rank {r}: numel rule broken for {op} {e['input_sizes']} -> {e['output_sizes']}")
                    break
                key = (pname, e["collective_seq_id"])
            else:
                # ProcessGroupNCCL's names, group-local ranks: "send <me>-><peer>", "recv <me><-<peer>"
                op, _, meta = e["profiling_name"].partition(" ")
                arrow = "->" if op == "nccl:send" else "<-"
                me, _, other = meta.partition(arrow)
                if not (me.isdigit() and other.isdigit()) or int(me) != sorted(g).index(r) \
                        or not 0 <= int(other) < len(g) or int(other) == int(me):
                    probs.append(f"rank {r} record {e['record_id']}: bad p2p name {e['profiling_name']!r} in {g}")
                    break
                if e["input_sizes"] != e["output_sizes"] or e["input_dtypes"] != e["output_dtypes"]:
                    probs.append(f"rank {r} record {e['record_id']}: p2p input and output differ")
                    break
                src, dst = (int(me), int(other)) if op == "nccl:send" else (int(other), int(me))
                key = (pname, "p2p", e["p2p_seq_id"], src, dst)
            sig = (e["profiling_name"] if not e["is_p2p"] else e["profiling_name"].split()[0],
                   json.dumps(e["input_sizes"]), tuple(e["input_dtypes"]), json.dumps(e["output_sizes"]),
                   tuple(e["output_dtypes"]))
            by_key.setdefault(key, {})[r] = (sig, e)
        st = d["pg_status"]
        if fmt == "json":
            st = {k: {kk: int(vv) for kk, vv in v.items()} for k, v in st.items()}
        for e in reversed(ents):
            s = st[str(e["pg_id"])]
            if e["is_p2p"]:  # the watchdog records a p2p work's p2p_seq_id
                if s["last_enqueued_collective"] < e["p2p_seq_id"]:
                    probs.append(f"rank {r}: pp pg_status behind its entries")
                continue
            if s["last_enqueued_collective"] < e["collective_seq_id"]:
                probs.append(f"rank {r}: pg_status behind its entries")
            if e["state"] == "completed" and s["last_completed_collective"] < e["collective_seq_id"]:
                probs.append(f"rank {r}: pg_status completed behind entry {e['record_id']}")
    # cross-rank: same op, sizes and dtypes at the same (group, seq)
    for key, per in by_key.items():
        sigs = {}
        for r, (sig, e) in per.items():
            sigs.setdefault(sig if len(key) == 2 else ("p2p", sig[1], sig[2]), []).append(r)
        if len(key) > 2 and len(per) == 2 and sorted(s[0] for s, _ in per.values()) != ["nccl:recv", "nccl:send"]:
            probs.append(f"{key}: not one send and one recv: {sorted(s[0] for s, _ in per.values())}")
        if len(sigs) > 1:
            probs.append(f"{key}: ranks disagree: {sigs}")
            if len(probs) > 20:
                break
    # seq ids start far above 1 (the ring has wrapped)
    e0 = dumps[ranks[0]]["entries"][0]
    if e0["record_id"] < truth["entries"] or e0["p2p_seq_id" if e0["is_p2p"] else "collective_seq_id"] <= 1:
        probs.append("buffer does not look wrapped")
    fault = truth["fault"]
    if fault == "missing_last" and "hang" in truth:
        h = truth["hang"]
        for r, d in dumps.items():
            if str(r) not in {str(x) for x in truth["groups"][h["group"]]["ranks"]}:
                continue
            have = [e for e in d["entries"] if e["process_group"][0] == h["group"]
                    and e["collective_seq_id"] == h["collective_seq_id"] and not e["is_p2p"]]
            pgid = {"default_pg": WORLD, "tp": TPG, "dp": DPG, "pp": PPG}[h["desc"]]  # the rank-local pg_id
            s = d["pg_status"][str(pgid)]
            enq, done = int(s["last_enqueued_collective"]), int(s["last_completed_collective"])
            if r == c:
                if have or enq != h["collective_seq_id"] - 1:
                    probs.append(f"culprit {r} has the hang collective")
            elif enq != h["collective_seq_id"] or done >= h["collective_seq_id"]:
                probs.append(f"rank {r}: pg_status does not show the hang collective pending")
            elif have and have[0]["state"] not in ("started", "scheduled"):
                probs.append(f"rank {r}: hang collective is {have[0]['state']}")
            elif not have and len(d["entries"]) >= 16:  # tiny buffers may have dropped it
                probs.append(f"rank {r}: hang collective not in the buffer")
    if fault == "straggler":
        lags = []
        for key, per in by_key.items():
            if c in per and len(per) > 1:
                tc = per[c][1]["time_created_ns"]
                others = [e["time_created_ns"] for rr, (_, e) in per.items() if rr != c]
                lags.append((tc - max(others)) / 1e6)
                lags.append((tc - min(others)) / 1e6)
        if lags and (min(lags) < 20 or max(lags) > 50):
            probs.append(f"straggler lag out of range: {min(lags or [0]):.1f}..{max(lags or [0]):.1f} ms")
    return probs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write synthetic NCCL Flight Recorder dumps for benchmarks.")
    ap.add_argument("outdir")
    ap.add_argument("--world", type=int, default=256)
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank (ring buffer size)")
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--culprit", type=int, default=None)
    ap.add_argument("--job", default="synth")
    ap.add_argument("--attempt", type=int, default=0)
    ap.add_argument("--ranks-per-host", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--procs", type=int, default=None, help="worker processes (default: up to 2)")
    ap.add_argument("--json", action="store_true", help="write JSON dumps (rank_<r>.json) instead of pickles")
    ap.add_argument("--check", action="store_true", help="reload a few files and verify them")
    a = ap.parse_args(argv)
    truth = write_job(a.outdir, a.world, a.entries, job=a.job, attempt=a.attempt,
                      ranks_per_host=a.ranks_per_host, fault=a.fault, culprit=a.culprit,
                      seed=a.seed, fmt="json" if a.json else "pickle", procs=a.procs)
    print(json.dumps(truth))
    print(f"wrote {truth['files']} files, {truth['bytes']:,} bytes in {truth['seconds']:.2f} s",
          file=sys.stderr)
    if a.check:
        t = time.perf_counter()
        probs = check_job(a.outdir, truth)
        for p in probs:
            print("CHECK FAILED:", p, file=sys.stderr)
        print(f"check: {'ok' if not probs else f'{len(probs)} problem(s)'} "
              f"({time.perf_counter() - t:.2f} s)", file=sys.stderr)
        return 1 if probs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
