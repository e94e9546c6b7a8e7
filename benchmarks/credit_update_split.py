"""Where one learner update's time goes: perf_counter splits of the Learner's update on one
captured MinAtar Breakout batch (8 envs x 64 steps, `tuned_examples/common.py`
`minatar_config`), A2C (`A2CConfig`) and/or the default credit (`DEFAULT_CREDIT`), one torch
thread. Each variant: 3 training iterations, one more whose batch (episodes) is captured,
5 untimed updates on copies of it, then 60 timed ones. Every listed function is wrapped
with a timer; the times are inclusive (a piece's time contains the pieces it calls), as
the median per call times the calls per update, in ms. Prints a markdown table; writes
`--out` (json) if given.

    .venv/bin/python benchmarks/credit_update_split.py a2c hca --out benchmarks/results/credit_cost_trim/split.json
"""
import sys, time, copy, statistics, collections, functools, json
from pathlib import Path
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO)); sys.path.insert(0, str(REPO / 'benchmarks'))
import ray, torch
from ray.rllib.core.learner.training_data import TrainingData
from common import DEFAULT_CREDIT
from tuned_examples.common import minatar_config
torch.set_num_threads(1)
ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=300*2**20, log_to_driver=False)
from hca_rllib import connectors, learner as L, module as M, credit
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.learner import Learner
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
T = collections.defaultdict(list)
ON = [False]
def wrap(owner, name, label=None):
    f = getattr(owner, name)
    label = label or f"{owner.__name__}.{name}"
    @functools.wraps(f)
    def g(*a, **k):
        if not ON[0]: return f(*a, **k)
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: T[label].append(time.perf_counter() - t)
    setattr(owner, name, g)
for owner, name in [(L.HCATorchLearner, "update"), (Learner, "_make_batch_if_necessary"),
                    (connectors.LeanEpisodesToBatch, "__call__"),
                    (M.HCATorchRLModule, "_forward_train"), (L.HCATorchLearner, "compute_loss_for_module"),
                    (L.HCATorchLearner, "_run_credit"),
                    (connectors.ComputeReturnsAndAdvantages, "from_outputs"),
                    (connectors.ComputeHindsightLogProbs, "run"), (connectors.ComputeCreditWeights, "run"),

                    (connectors.ComputeCreditWeights, "_trust"), (connectors.ComputeCreditWeights, "_diagnostics"),
                    (credit, "credit_weights"), (credit, "calibration_evidence"), (credit, "evidence_trust"),
                    (credit, "returns_from_next_values"), (credit, "gae_from_next_values"),
                    (TorchLearner, "compute_gradients"), (L.HCATorchLearner, "apply_gradients"),
                    (L.HCATorchLearner, "_classifier_passes"), (MetricsLogger, "reduce"), (MetricsLogger, "log_value"), (MetricsLogger, "log_dict"),
                    (credit, "mutual_information"), (credit, "argmax_accuracy"), (credit, "correlation"),
                    (credit, "ratio_statistics"), (credit, "decision_trust"), (credit, "evidence_bins"),
                    (credit, "hindsight_ratio"), (credit, "expected_hca_weights"), (credit, "one_hot_weights"),
                    (M.HCATorchRLModule, "update_return_statistics"), (M.HCATorchRLModule, "update_trust_evidence"),
                    (M.HCATorchRLModule, "hindsight_logits"), (credit, "next_values"), (credit, "chunk_ids_from_ends"),
                    (credit, "policy_gradient_loss"), (credit, "explained_variance"), (L, "all_finite"),
                    ]:
    wrap(owner, name)
# credit_weights is looked up via module attribute in connectors: connectors.credit is the same module: ok
out = {}
args = [a for a in sys.argv[1:] if not a.startswith('--')]
dest = sys.argv[sys.argv.index('--out') + 1] if '--out' in sys.argv else None
for which in [a for a in args if a != dest]:
    cfg = minatar_config("Breakout", algo="A2C" if which == "a2c" else "HCA")
    if which != "a2c": cfg = cfg.training(**DEFAULT_CREDIT)
    algo = cfg.debugging(seed=0).build_algo()
    for _ in range(3): algo.train()
    lrn = algo.learner_group._learner
    cap = {}
    orig = lrn.update
    def grab(*a, **k):
        cap['k'] = k; return orig(*a, **k)
    lrn.update = grab; algo.train(); del lrn.update
    k = cap['k']
    def run():
        kw = dict(k); kw['training_data'] = TrainingData(episodes=copy.deepcopy(k['training_data'].episodes))
        lrn.update(**kw)
    for _ in range(5): run()
    T.clear(); ON[0] = True
    for _ in range(60): run()
    ON[0] = False
    out[which] = {lab: 1000 * statistics.median(v) * len(v) / 60 for lab, v in T.items()}
    algo.stop()
ray.shutdown()
labs = sorted(set().union(*[o.keys() for o in out.values()]))
print("| piece | " + " | ".join(out) + " |")
for lab in labs:
    print(f"| {lab} | " + " | ".join(f"{out[w].get(lab, 0):.2f}" for w in out) + " |")
if dest:
    json.dump(out, open(dest, "w"), indent=1)
