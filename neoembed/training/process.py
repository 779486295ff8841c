"""The process a training run executes in: its threads and seed at the start, its process group at the end."""

from __future__ import annotations

from neoembed.training.settings import RunSettings


def configure_process(run: RunSettings) -> None:
    """Set torch's CPU threads (`train.threads`) and seed every generator (`train.seed`) before anything is
    built, so the initial weights depend on the recipe's seed only."""
    import torch
    from transformers import set_seed

    if run.threads:
        torch.set_num_threads(run.threads)
    set_seed(run.seed)


def release_process_group() -> None:
    """Tear down the process group the Trainer started under torchrun, once every rank is done.

    Left to interpreter exit, gloo's threads can outlive a rank whose peer has already gone, and that rank
    aborts ("terminate called without an active exception") after a successful run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
