"""The probe's classifier for the return outcome, and the one fit loop every outcome's
classifier uses: Adam on minibatches of the fit rows, early stopping on the validation
rows' mean information, the best state kept (the initial `q = pi` included)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from hca_rllib import credit
from hca_rllib.probe.settings import FIT

# What the probe asks of the training module's hindsight head: its own torso of the
# training network's shape, `q = softmax(log pi + f(s, Z))`, conditioned on the return
# (whatever outcome the checkpoint's run trained on).
CLASSIFIER_OPTIONS = {"torso": "separate", "parameterization": "policy_relative", "outcome": "return"}


def build_classifier(observation_space, action_space, model_config: Optional[Dict[str, Any]] = None):
    """A fresh `HCATorchRLModule` whose hindsight head (with its own torso, of the training
    network's shape, and the return encoder) is the probe's classifier."""
    from hca_rllib.module import HCATorchRLModule

    config = dict(model_config or {})
    config["hindsight"] = {**(config.get("hindsight") or {}), **CLASSIFIER_OPTIONS}
    return HCATorchRLModule(observation_space=observation_space, action_space=action_space,
                            inference_only=False, model_config=config)


def classifier_parameters(module) -> List[Any]:
    return list(module.hindsight_torso.parameters()) + list(module.hindsight.parameters())


def log_q_taken(module, obs, log_pi, returns, actions, batch_size=2048) -> np.ndarray:
    """`log q(a_t | s_t, Z_t)` of the taken actions, in eval batches, no gradient."""
    import torch

    out = []
    with torch.no_grad():
        for start in range(0, len(actions), batch_size):
            sl = slice(start, start + batch_size)
            logits = module.hindsight_logits(torch.as_tensor(obs[sl]), None, torch.as_tensor(log_pi[sl]).float(),
                                             torch.as_tensor(returns[sl]))
            log_q = torch.log_softmax(logits.double(), -1)
            out.append(log_q.gather(-1, torch.as_tensor(actions[sl]).unsqueeze(-1)).squeeze(-1).numpy())
    return np.concatenate(out) if out else np.zeros(0)


def fit_early_stopped(module, parameters: Sequence[Any], batch_loss: Callable[[np.ndarray], Any],
                      validation_information: Callable[[], float], fit_rows: np.ndarray, seed: int = 0,
                      fit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Fit `parameters` by Adam on `batch_loss(rows)` over minibatches of `fit_rows`, an
    epoch at a time, stopping after `patience` epochs without a gain in
    `validation_information()`; the best state is restored (the initial one if no epoch
    beat it). `module`'s train/eval mode is set around the passes. Returns the record."""
    import torch

    fit = {**FIT, **(fit or {})}
    rng = np.random.default_rng(seed + 2)
    optimizer = torch.optim.Adam(parameters, lr=fit["lr"])
    module.eval()
    best, since, updates, epochs = validation_information(), 0, 0, 0
    improved = False  # False: no epoch beat the initial state (q = pi), which is kept
    best_state = [p.detach().clone() for p in parameters]
    history = [best]
    while epochs < fit["max_epochs"] and updates < fit["max_updates"] and since < fit["patience"]:
        module.train()
        order = rng.permutation(fit_rows)
        for start in range(0, len(order), fit["batch_size"]):
            loss = batch_loss(order[start:start + fit["batch_size"]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            if updates >= fit["max_updates"]:
                break
        epochs += 1
        module.eval()
        value = validation_information()
        history.append(value)
        if value > best + 1e-5:
            best, since, improved = value, 0, True
            best_state = [p.detach().clone() for p in parameters]
        else:
            since += 1
    with torch.no_grad():
        for p, saved in zip(parameters, best_state):
            p.copy_(saved)
    module.eval()
    return {"epochs": epochs, "updates": updates, "validation_information": best, "improved": improved,
            "validation_history": history}


def fit_classifier(module, data: Dict[str, Any], returns: np.ndarray, fit_rows: np.ndarray,
                   val_rows: np.ndarray, seed: int = 0, fit: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Fit `module`'s hindsight classifier on the `fit_rows` by cross-entropy, with early
    stopping on the validation rows' mean information; the best state is kept. Returns the
    fit's record (epochs, updates, validation information)."""
    import torch

    torch.manual_seed(seed)
    obs, log_pi, actions = data["obs"], data["log_pi"], data["actions"]
    module.update_return_statistics(torch.as_tensor(returns[fit_rows]))
    taken_pi_val = log_pi[val_rows, actions[val_rows]]

    def validation_information() -> float:
        log_q = log_q_taken(module, obs[val_rows], log_pi[val_rows], returns[val_rows], actions[val_rows])
        return float(np.mean(credit.pointwise_information(log_q, taken_pi_val)))

    def batch_loss(rows: np.ndarray):
        logits = module.hindsight_logits(torch.as_tensor(obs[rows]), None, torch.as_tensor(log_pi[rows]).float(),
                                         torch.as_tensor(returns[rows]))
        return torch.nn.functional.cross_entropy(logits, torch.as_tensor(actions[rows]))

    return fit_early_stopped(module, classifier_parameters(module), batch_loss, validation_information, fit_rows,
                             seed=seed, fit=fit)
