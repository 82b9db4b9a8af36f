#!/usr/bin/env python3
"""tools/gloo_allreduce.py - one rank of PyTorch's gloo allreduce, timed: the
peer's transport alone, to hold beside build/tools/bench_allreduce --algo ring
on the same hosts (tools/cluster.sh). Launched by mpirun, which only starts
the ranks (their rank and world come from Open MPI's environment); gloo makes
its own TCP connections, rendezvous at host 0.

    mpirun $(tools/cluster.sh mpirun-args) -np N /opt/torch-venv/bin/python \\
        tools/gloo_allreduce.py --mib 64 --iters 5 --master-addr 10.77.0.1

Each rank sums a buffer of --mib MiB of floats with dist.all_reduce once
untimed, then --iters times, each after a barrier; rank 0 prints the median
time and the bus bandwidth (2(N-1)/N x bytes / time, as bench_allreduce and
nccl-tests count it). PyTorch is a reference here, not a dependency:
    python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch
Exit status 0; 2 without torch or outside mpirun.
"""
import argparse
import os
import statistics
import sys
import time
from datetime import timedelta


def main():
    ap = argparse.ArgumentParser(description="one rank of a timed gloo allreduce (under mpirun)")
    ap.add_argument("--mib", type=float, default=64, help="buffer size in MiB (default 64)")
    ap.add_argument("--iters", type=int, default=5, help="timed allreduces (default 5)")
    ap.add_argument("--master-addr", required=True, help="host 0's address on the cluster")
    ap.add_argument("--master-port", type=int, default=29600)
    ap.add_argument("--ifname", default="eth0", help="GLOO_SOCKET_IFNAME (default eth0, the hosts' link)")
    a = ap.parse_args()
    if "OMPI_COMM_WORLD_RANK" not in os.environ:
        print("gloo_allreduce.py: run it under mpirun (Open MPI gives each rank its number)", file=sys.stderr)
        sys.exit(2)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("gloo_allreduce.py: no torch in this python (python3 -m venv /opt/torch-venv && "
              "/opt/torch-venv/bin/pip install torch)", file=sys.stderr)
        sys.exit(2)
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=300))
    nbytes = int(a.mib * 2**20) // 4 * 4
    x = torch.ones(nbytes // 4)
    dist.all_reduce(x)
    times = []
    for _ in range(a.iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        m = statistics.median(times)
        print(f"gloo allreduce, {world} ranks, {a.mib:g} MiB: median {m * 1e3:.1f} ms of {a.iters}, "
              f"bus bandwidth {2 * (world - 1) / world * nbytes / m / 1e9:.3f} GB/s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
