"""loom.distributed: training on the ranks of an MPI job, in torch.distributed's names.

Launched with ``mpirun -np N python3 script.py``, every rank runs the script
on its own share of the data; Loom moves the bytes with MPI (Open MPI, from
scripts/setup.sh). The collectives here act on real tensors, in place, as
torch.distributed's do. ``DistributedDataParallel(module)`` starts every
rank from rank 0's parameters and buffers, and from then on every optimizer
step of the process averages the gradients across the ranks before it
updates: the traced steps (whatever segments and branches each rank took)
and loom.compile's captured training steps alike. See docs/distributed.md.

    import loom, loom.distributed as dist
    dist.init_process_group()
    model = dist.DistributedDataParallel(Net())
    opt = loom.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in batches(rank=dist.get_rank(), ranks=dist.get_world_size()):
        loss = loom.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    dist.destroy_process_group()
"""
from . import _C
from .nn.module import Module

_averaging = False  # DistributedDataParallel made: optimizer steps average gradients


class ReduceOp:
    SUM = 0
    AVG = 1  # torch.distributed's name for the mean
    MAX = 2


def init_process_group(backend="mpi"):
    """Joins the job's ranks (MPI_COMM_WORLD; MPI is initialized if the
    program has not). backend: "mpi", the one Loom has."""
    if backend != "mpi":
        raise ValueError(f"loom.distributed: backend {backend!r}: Loom's is 'mpi'")
    _C._dist_init()


def destroy_process_group():
    """Ends the step in progress, then leaves the group (MPI is finalized
    with it when Loom initialized it, and cannot start again)."""
    global _averaging
    _C._dist_destroy()
    _averaging = False


def is_initialized():
    return _C._dist_rank_size()[0] >= 0


def get_rank():
    rank, _ = _C._dist_rank_size()
    if rank < 0:
        raise RuntimeError("loom.distributed.get_rank: the process group is not initialized")
    return rank


def get_world_size():
    _, size = _C._dist_rank_size()
    if size < 0:
        raise RuntimeError("loom.distributed.get_world_size: the process group is not "
                           "initialized")
    return size


def all_reduce(tensor, op=ReduceOp.SUM):
    """tensor, on every rank, becomes the reduction of every rank's (in place)."""
    if op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX):
        raise ValueError(f"loom.distributed.all_reduce: op {op!r} is none of ReduceOp.SUM, "
                         "AVG, MAX")
    _C._dist_all_reduce(tensor, op)
    return tensor


def broadcast(tensor, src=0):
    """tensor, on every rank, becomes rank src's (in place)."""
    _C._dist_broadcast(tensor, int(src))
    return tensor


def barrier():
    """Returns once every rank has called it."""
    from . import tensor
    all_reduce(tensor(1.0), ReduceOp.SUM)


class DistributedDataParallel(Module):
    """module, trained data-parallel: rank 0's parameters and buffers are
    broadcast to every rank now, and every optimizer step from now on
    averages the gradients across the ranks (in buckets of about 25 MiB,
    in the order the parameters were entered). Calls go to module; its
    parameters are this one's, under "module." as in PyTorch. Buffers
    (BatchNorm's statistics) are broadcast once, here: each rank's then
    follow its own batches."""

    def __init__(self, module):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError("loom.distributed.DistributedDataParallel: a loom.nn.Module is "
                            f"needed, not {type(module).__name__}")
        self.module = module
        for p in module.parameters():
            broadcast(p, 0)
        for b in module.buffers():
            broadcast(b, 0)
        _C._dist_average_gradients(list(module.parameters()))
        global _averaging
        _averaging = True

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def _average_grads(params):
    """Every rank's .grad of params replaced by the average over the ranks,
    for an optimizer step that works from .grad (one the user changed, as
    clip_grad_norm_ does, or several param groups): a parameter with no
    .grad on a rank counts zeros there, and has a .grad on every rank if
    any rank gave it one. The ranks pass the same parameters in the same
    order (one model): one collective for which have a gradient, then one
    a parameter."""
    from . import tensor, zeros, int64
    if not _averaging:
        return
    had = tensor([1 if p.grad is not None else 0 for p in params], dtype=int64)
    all_reduce(had, ReduceOp.MAX)
    for p, anywhere in zip(params, had.tolist()):
        if not anywhere:
            continue
        g = p.grad if p.grad is not None else zeros(*p.shape, dtype=p.dtype)
        all_reduce(g, ReduceOp.AVG)
        p.grad = g
