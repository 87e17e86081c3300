"""pytest set-up for flashattn.distributed's tests, which run under `mpirun -np W python3 -m pytest` (every
rank runs every test; tests/python.cmake registers W = 1, 2, 3, 4). The single-process runs over
tests/python skip this directory. Fixtures: `comm` (mpi4py's COMM_WORLD) and `group` (torch.distributed's
default gloo group over the same ranks, set up once through a TCP rendezvous on 127.0.0.1 and destroyed
at the end). The parent conftest.py gives each test a generator seeded by its name, the
same on every rank."""

import datetime
import os
import socket

import pytest


def pytest_ignore_collect(collection_path, config):
    return "OMPI_COMM_WORLD_SIZE" not in os.environ


@pytest.fixture(scope="session")
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def group(comm):
    import torch.distributed as dist

    port = comm.bcast(_free_port() if comm.rank == 0 else None)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=comm.rank,
        world_size=comm.size,
        timeout=datetime.timedelta(seconds=120),
    )
    yield dist.group.WORLD
    # Before MPI ends the process: gloo's threads must not outlive their group.
    dist.barrier()
    dist.destroy_process_group()
