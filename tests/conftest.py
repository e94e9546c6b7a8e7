import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test starts with one torch thread (what the package's runs use): a test then
    computes the same numbers whichever tests ran before it in the same worker (a
    multi-threaded kernel may sum in another order, and a learning test's seed would
    then give another run)."""
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def ray_local():
    """One embedded Ray for the session, bound to loopback, sized for 2 cores."""
    import ray

    from hca_rllib.runner import start_local_ray

    if not ray.is_initialized():
        start_local_ray(  # tried once more if the node start times out on a loaded machine
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=300 * 2**20,
            log_to_driver=False,
        )
    yield ray
    ray.shutdown()
