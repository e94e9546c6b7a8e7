"""Hindsight credit assignment for deep RL on Ray RLlib's new API stack.

`import hca_rllib` registers the algorithms "HCA" and "A2C" with Ray Tune and
RLlib's algorithm registry, and the known-answer environments with gymnasium.
"""

from hca_rllib import envs  # noqa: F401  (registers the known-answer envs)
from hca_rllib.hca import ALGORITHMS, A2C, HCA, A2CConfig, HCAConfig, training_module
from hca_rllib.module import HCATorchRLModule

__all__ = ["A2C", "A2CConfig", "HCA", "HCAConfig", "HCATorchRLModule", "training_module"]
__version__ = "0.2.0"


def _register() -> None:
    from ray.rllib.algorithms import registry
    from ray.tune import register_trainable

    for name, algo_class in ALGORITHMS.items():
        register_trainable(name, algo_class)
        registry.ALGORITHMS[name] = lambda c=algo_class: (c, c.get_default_config())
        registry.ALGORITHMS_CLASS_TO_NAME[algo_class.__name__] = name


_register()
