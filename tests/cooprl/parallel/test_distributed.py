"""Unit tests of cooprl/parallel/distributed.py: each process's device, joining the processes, sharded work's
generators. Where a GPU is needed, the CUDA calls are observed instead (no GPU runs these tests)."""

import pytest
import torch

from tests.cooprl.test_gpu_paths import as_second_of_two_processes


class FakeCudaGenerators:
    """Two CUDA devices' generator states, kept as torch keeps them (get/set_rng_state, seeded by manual_seed_all),
    on a machine without CUDA."""

    def __init__(self, monkeypatch):
        self.states = {0: torch.tensor([10]), 1: torch.tensor([11])}
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": self.states[self.index(device)].clone())
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": self.states.update(
            {self.index(device): state.clone()}))
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states.values()])
        monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: self.states.update(
            {d: torch.tensor([seed]) for d in self.states}))

    @staticmethod
    def index(device) -> int:
        return device if isinstance(device, int) else (torch.device(device).index or 0)


def test_sharded_work_restores_the_cuda_generators(monkeypatch):
    from cooprl.parallel import distributed
    cuda = FakeCudaGenerators(monkeypatch)
    assert distributed.run_sharded([1, 2], 7, lambda task, rng: int(cuda.states[0])) == [7, distributed.item_seed(7, 1)]
    assert [int(s) for s in cuda.states.values()] == [10, 11]


def test_rank_device_gives_each_process_its_own_gpu(monkeypatch):
    from cooprl.parallel import distributed
    ranks = distributed.Ranks(rank=1, world_size=2, local_rank=1)
    assert [distributed.rank_device(d, ranks) for d in ("cuda", "cuda:0", "cuda:3", "cpu")] == \
        ["cuda:1", "cuda:1", "cuda:1", "cpu"]
    assert distributed.rank_device("cuda:0", distributed.Ranks()) == "cuda:0"   # one process: as configured
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert distributed.rank_device("auto", ranks) == "cuda:1"
    # a CPU model among processes joined over nccl could not average its gradients: refused, saying why
    monkeypatch.setattr(distributed, "_backend", lambda: "nccl")
    with pytest.raises(distributed.DistributedError, match="on cpu under data-parallel training on GPUs.*nccl"):
        distributed.rank_device("cpu", ranks)


def test_processes_join_with_their_gpu_bound_and_barriers_name_it(monkeypatch):
    from cooprl.parallel import distributed
    joined, barriers = [], []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, **kwargs: joined.append((backend,
                                                                                                          kwargs)))
    monkeypatch.setattr(torch.distributed, "new_group", lambda **kwargs: None)
    distributed.setup("cuda")
    assert joined[0][0] == "nccl" and joined[0][1]["device_id"] == torch.device("cuda", 1)
    as_second_of_two_processes(monkeypatch)
    monkeypatch.setattr(distributed, "_backend", lambda: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.distributed, "barrier", lambda **kwargs: barriers.append(kwargs))
    distributed.barrier()
    assert barriers == [{"device_ids": [1]}]


def test_ddp_averaging_sums_in_float32_buckets_and_writes_the_gradients_back_in_place(monkeypatch, tmp_path):
    """average_gradients (one gloo process): a gradient longer than a bucket is reduced in pieces, so the float32
    buffer never exceeds BUCKET_ELEMENTS (no float32 copy of a whole embedding); bf16 gradients are summed in float32
    and written back into their own storage; a missing gradient becomes zeros."""
    from cooprl.parallel import distributed
    monkeypatch.setattr(distributed, "BUCKET_ELEMENTS", 8)
    reduced = []
    all_reduce = torch.distributed.all_reduce

    def recorded(tensor, *args, **kwargs):
        reduced.append((tensor.numel(), tensor.dtype))
        return all_reduce(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.distributed, "all_reduce", recorded)
    big = torch.nn.Parameter(torch.zeros(20, dtype=torch.bfloat16))
    small, unused = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    big.grad = torch.linspace(-1, 1, 20).bfloat16()
    small.grad = torch.tensor([1.0, 2.0, 3.0])
    want, storage = big.grad.clone(), big.grad.data_ptr()
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/group", rank=0, world_size=1)
    try:
        assert distributed.average_gradients([big, small, unused], weight=2.0) == "step"
    finally:
        torch.distributed.destroy_process_group()
    assert reduced[1:] == [(8, torch.float32), (8, torch.float32), (8, torch.float32), (1, torch.float32)]
    assert big.grad.data_ptr() == storage and torch.equal(big.grad, want)   # 1 rank: the mean is its own gradient
    assert torch.equal(small.grad, torch.tensor([1.0, 2.0, 3.0])) and torch.equal(unused.grad, torch.zeros(2))
