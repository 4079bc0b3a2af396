"""memgrad.distributed in one process (no mpiexec): the world of one, collectives as the
identity, DistributedDataParallel as the plain module, the launcher's command line, and the
errors."""

import datetime
import sys

import numpy as np
import pytest

import memgrad as mg
import memgrad.distributed as dist
from memgrad import nn
from memgrad.distributed import comm, launch


def test_world_of_one():
    dist.init()
    assert dist.is_initialized()
    assert (dist.rank(), dist.world_size()) == (0, 1)
    assert not dist.launched_by_mpi()
    dist.barrier()
    t = mg.tensor([1.5, -2.0])
    assert dist.all_reduce(t) is t and t.tolist() == [1.5, -2.0]
    assert dist.all_reduce(t, op="mean").tolist() == [1.5, -2.0]
    assert dist.broadcast(t, src=0).tolist() == [1.5, -2.0]
    assert dist.all_gather_object({"a": 1}) == [{"a": 1}]
    assert dist.broadcast_object((1, "x")) == (1, "x")


def test_collective_errors():
    with pytest.raises(ValueError, match=r"all_reduce: op must be one of \('sum', 'mean'\)"):
        dist.all_reduce(mg.ones(2), op="max")
    with pytest.raises(TypeError, match="all_reduce: expected a Tensor, got ndarray"):
        dist.all_reduce(np.ones(2))
    with pytest.raises(TypeError, match="op='mean' needs a floating tensor, got int64"):
        dist.all_reduce(mg.tensor([1, 2]), op="mean")
    with pytest.raises(ValueError, match=r"must be contiguous.*t.contiguous\(\)"):
        dist.all_reduce(mg.ones(3, 4).transpose(0, 1))
    with pytest.raises(ValueError, match=r"broadcast: src must be a rank in \[0, 1\), got 1"):
        dist.broadcast(mg.ones(2), src=1)
    with pytest.raises(ValueError, match=r"broadcast_object: src must be a rank in \[0, 1\)"):
        dist.broadcast_object(1, src=True)


def test_ddp_in_one_process_is_the_module():
    mg.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    reference = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    reference.load_state_dict(net.state_dict())
    model = dist.DistributedDataParallel(net, bucket_bytes=64)
    assert model.module is net
    assert [id(p) for p in model.parameters()] == [id(p) for p in net.parameters()]
    assert list(model.state_dict()) == [f"module.{k}" for k in net.state_dict()]
    x = mg.randn(5, 3)
    with model.no_sync():
        model(x).pow(2).sum().backward()
    model(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    reference(x).pow(2).sum().backward()
    for p, q in zip(net.parameters(), reference.parameters()):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_ddp_errors():
    with pytest.raises(TypeError, match="DistributedDataParallel: expected an nn.Module"):
        dist.DistributedDataParallel(lambda x: x)
    for bad in (0, -5, 2.5, True, "25MB"):
        with pytest.raises(ValueError, match="bucket_bytes must be a positive int"):
            dist.DistributedDataParallel(nn.Linear(2, 2), bucket_bytes=bad)


def test_mpiexec_command(monkeypatch, tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.11'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    launch._is_open_mpi.cache_clear()
    monkeypatch.setattr(launch, "_cores", lambda: 2)
    monkeypatch.setattr(launch.os, "geteuid", lambda: 0)
    cmd = launch.mpiexec_command(3, ["-m", "memgrad", "train"])
    assert cmd == [str(fake), "-n", "3", "--bind-to", "none", "--oversubscribe",
                   "--allow-run-as-root", str(tmp_path / "python"), "-m", "memgrad", "train"]
    monkeypatch.setattr(launch.os, "geteuid", lambda: 1000)
    assert launch.mpiexec_command(2, ["x.py"], python="py") == [
        str(fake), "-n", "2", "--bind-to", "none", "py", "x.py"]
    launch._is_open_mpi.cache_clear()
    with pytest.raises(ValueError, match="nproc must be a positive int, got 0"):
        launch.mpiexec_command(0, [])


def test_mpiexec_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(dist.DistributedError, match=r"pip install 'memgrad\[dist\]'"):
        launch.find_mpiexec()


def test_rank_environment(monkeypatch):
    monkeypatch.setattr(launch, "_cores", lambda: 8)
    env = launch.rank_environment(2, {"OMP_NUM_THREADS": "3", "PATH": "/bin"})
    assert env == {"OMP_NUM_THREADS": "3", "PATH": "/bin", "OPENBLAS_NUM_THREADS": "4",
                   "MKL_NUM_THREADS": "4"}
    assert launch.rank_environment(16, {})["OPENBLAS_NUM_THREADS"] == "1"


def test_launched_without_mpi4py(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setattr(comm, "_world", None)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails
    assert dist.launched_by_mpi()
    with pytest.raises(dist.DistributedError, match=r"mpi4py is not installed.*memgrad\[dist\]"):
        dist.init()
    assert not dist.is_initialized()


def test_timeout(monkeypatch):
    monkeypatch.setattr(comm._get(), "timeout", comm._get().timeout)  # restored afterwards
    assert comm._DEFAULT_TIMEOUT == datetime.timedelta(minutes=30)
    for given, seconds in [(datetime.timedelta(minutes=2), 120.0), (3, 3.0), (0.5, 0.5),
                           (np.float32(4), 4.0)]:
        dist.init(timeout=given)
        assert comm._get().timeout == seconds
    dist.init()  # without a timeout: the one in force stays
    assert comm._get().timeout == 4.0
    for bad in (-1, 0, float("nan"), float("inf"), datetime.timedelta(seconds=-5)):
        with pytest.raises(ValueError, match="init: timeout must be positive and finite, got"):
            dist.init(timeout=bad)
    for bad in ("30", True, [1]):
        with pytest.raises(TypeError, match="init: timeout must be a datetime.timedelta or a "
                                            "number of seconds, got"):
            dist.init(timeout=bad)
    assert comm._get().timeout == 4.0  # a bad timeout changes nothing


def test_join_in_one_process():
    mg.manual_seed(0)
    net = nn.Linear(3, 2)
    model = dist.DistributedDataParallel(net)
    x = mg.randn(4, 3)
    with model.join():
        model(x).sum().backward()
    assert net.bias.grad.tolist() == [4.0, 4.0]  # the plain gradient
    with pytest.raises(TypeError, match="divide_by_initial_world_size must be True or False"):
        with model.join(divide_by_initial_world_size=1):
            pass
    with pytest.raises(RuntimeError, match="already inside join"):
        with model.join(), model.join():
            pass
    with model.join():  # usable again after the error
        pass


def test_all_gather_and_reduce_scatter_in_a_world_of_one_copy_the_tensor():
    out = [mg.zeros(2, 2)]
    x = mg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert dist.all_gather(out, x) is out and out[0].tolist() == x.tolist()
    assert out[0].numpy() is not x.numpy()
    y = mg.zeros(3, dtype=mg.int64)
    assert dist.reduce_scatter(y, [mg.tensor([1, 2, 3])]) is y and y.tolist() == [1, 2, 3]
    assert dist.reduce_scatter(mg.zeros(1), [mg.tensor([2.5])], op="mean").tolist() == [2.5]


def test_all_gather_and_reduce_scatter_errors():
    with pytest.raises(ValueError, match=r"all_gather: tensor_list must be a list of "
                                         r"world_size\(\) = 1 tensors, one per rank, got 2"):
        dist.all_gather([mg.zeros(2), mg.zeros(2)], mg.ones(2))
    with pytest.raises(ValueError, match=r"all_gather: tensor_list\[0\] must have the shape "
                                         r"and dtype of the tensor, \(2,\) float32, got \(3,\)"):
        dist.all_gather([mg.zeros(3)], mg.ones(2))
    with pytest.raises(ValueError, match="reduce_scatter: input_list must be a list"):
        dist.reduce_scatter(mg.zeros(2), mg.ones(2))
    with pytest.raises(ValueError, match="reduce_scatter: op must be one of"):
        dist.reduce_scatter(mg.zeros(2), [mg.ones(2)], op="max")
    with pytest.raises(TypeError, match="reduce_scatter: op='mean' needs a floating tensor"):
        dist.reduce_scatter(mg.zeros(2, dtype=mg.int64), [mg.ones(2, dtype=mg.int64)], op="mean")
    with pytest.raises(ValueError, match="all_gather: the tensor must be contiguous"):
        dist.all_gather([mg.zeros(2, 2).t()], mg.ones(2, 2))


def test_destroy_process_group_leaves_and_a_collective_joins_again():
    dist.init()
    dist.destroy_process_group()
    assert not dist.is_initialized()
    with pytest.raises(dist.DistributedError, match="destroy_process_group: no process group"):
        dist.destroy_process_group()
    assert dist.all_reduce(mg.ones(1)).tolist() == [1.0] and dist.is_initialized()
