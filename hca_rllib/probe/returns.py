"""The return outcome: one classifier per return horizon K, fitted on the fit episodes,
read on the held-out ones, with the peak horizon's whereabouts and the episode's end."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from hca_rllib import credit
from hca_rllib.probe.classifier import build_classifier, fit_classifier, log_q_taken
from hca_rllib.probe.information import episode_end_information, horizon_estimate, where
from hca_rllib.probe.settings import ProbeSettings, horizon_name
from hca_rllib.probe.target import ProbeTarget

BOUND = ("held-out mean of log q(a|s,Z) - log pi(a|s): a variational lower bound on I(A; Z | S), "
         "low by E[KL(posterior || q)]; CI: 95% percentile bootstrap over held-out episodes")


def measure_horizons(target: ProbeTarget, settings: ProbeSettings, data: Dict[str, Any],
                     split: Dict[str, np.ndarray], say: Callable[[str], None]
                     ) -> Tuple[List[Dict[str, Any]], Dict[str, np.ndarray]]:
    """Per horizon K: a fresh classifier fitted on the fit rows, its held-out estimate
    (`information.horizon_estimate`) and the held-out pointwise values, by horizon name."""
    import torch

    ep, held, fit_rows = data["episode_ids"], split["held_out"], split["fit"]
    taken_pi = data["log_pi"][np.arange(len(ep)), data["actions"]]

    def taken_log_q(classifier, returns, rows):
        return log_q_taken(classifier, data["obs"][rows], data["log_pi"][rows], returns[rows], data["actions"][rows])

    per_horizon, pointwise_by_horizon = [], {}
    for k in settings.horizons:
        returns = credit.horizon_returns(data["rewards"], ep, settings.gamma, k)
        torch.manual_seed(settings.seed)
        classifier = build_classifier(target.info.module_observation_space, target.info.action_space,
                                      target.model_config)
        record = fit_classifier(classifier, data, returns, fit_rows, split["validation"], seed=settings.seed,
                                fit=settings.fit)
        pointwise = credit.pointwise_information(taken_log_q(classifier, returns, held), taken_pi[held])
        pointwise_fit = credit.pointwise_information(taken_log_q(classifier, returns, fit_rows), taken_pi[fit_rows])
        estimate = horizon_estimate(pointwise, ep[held], data["time_steps"][held], pointwise_fit,
                                    settings.threshold)
        start = estimate.pop("start_state")
        row = {"horizon": horizon_name(k), **estimate,
               "fit": {key: value for key, value in record.items() if key != "validation_history"},
               "start_state": start}
        per_horizon.append(row)
        pointwise_by_horizon[horizon_name(k)] = pointwise
        say(f"horizon {horizon_name(k):>4}: {row['information']:.4f} nats/decision [{row['ci'][0]:.4f}, "
            f"{row['ci'][1]:.4f}] ({record['epochs']} epochs, {record['updates']} updates)")
    return per_horizon, pointwise_by_horizon


def return_outcome(target: ProbeTarget, settings: ProbeSettings, data: Dict[str, Any],
                   split: Dict[str, np.ndarray], say: Callable[[str], None]
                   ) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """The return outcome's figures (the result's own part: `run_probe` adds what every
    outcome's result holds, and the reading) and the held-out pointwise values."""
    per_horizon, pointwise = measure_horizons(target, settings, data, split, say)
    peak = max(per_horizon, key=lambda r: r["information"])
    held, ep = split["held_out"], data["episode_ids"]
    steps_to_end = credit.steps_to_episode_end(ep)[held]
    result = {
        "horizons": per_horizon,
        "peak_horizon": peak["horizon"],
        "where": where(pointwise[peak["horizon"]], data, held),
        "episode_end": episode_end_information(per_horizon, pointwise, ep[held], steps_to_end),
    }
    return result, pointwise
