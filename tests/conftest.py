import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("WANDB_MODE", "offline")


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
