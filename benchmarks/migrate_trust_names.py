"""One-time migration of the stored runs to the names of issue 11 (kept so that it can be
repeated and checked; idempotent).

* The trust in the classifier has one name: the diagnostic `credit/reliability` is now
  `credit/trust`, and the config fields `reliability_*` are `trust_*` (`reliability_z:
  None`, the pure estimator, is `trust: None`).
* The runs of the old default `hca` (trust from each batch's mean information, before
  `trust="evidence"`) are the method `hca_batch`, with the override written out:
  `{"credit": "hca", "trust": "batch"}`. The other modes stored with the old default
  trust (`c2a2c`, `c2a2c_hard`, `mix`) keep their names and get `"trust": "batch"` in
  their overrides, so that they stay what they were whatever the package default is.
* Every field a stored run left at a package default that issue 11 changed (trust, its
  decay, the classifier's size, learning rate, epochs and memory) is written out with
  its old value (`common.before_issue_11`), so the runs keep naming what they ran.

    .venv/bin/python benchmarks/migrate_trust_names.py           # the run stores
    .venv/bin/python benchmarks/migrate_trust_names.py --check   # exit 1 if any is not migrated
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from common import before_issue_11, raw_path, write_json  # noqa: E402

RESULTS = BENCH_DIR / "results"
STORES = ("credit_modes", "learning", "credit_analysis", "a2c_parity", "classifier_keepup")
# Stores whose runs train the classifier with the package defaults of their time.
CLASSIFIER_STORES = ("credit_modes", "learning", "credit_analysis")
OLD_DEFAULT_TRUST = ("hca", "c2a2c", "c2a2c_hard", "mix")
RENAMED_FIELDS = {"reliability_z": "trust_z", "reliability_information": "trust_information",
                  "reliability_decay": "trust_decay"}


def migrate_overrides(method: str, overrides: dict) -> dict:
    out = {}
    for key, value in overrides.items():
        if key == "reliability_z" and value is None:
            out["trust"] = None
        else:
            out[RENAMED_FIELDS.get(key, key)] = value
    if method in OLD_DEFAULT_TRUST and "trust" not in out:
        out["trust"] = "batch"
    return out


def migrate(data: dict, store: str) -> dict:
    text = json.dumps(data).replace('"credit/reliability"', '"credit/trust"')
    data = json.loads(text)
    method = data.get("method")
    if "overrides" in data and data["overrides"] is not None:
        data["overrides"] = migrate_overrides(method, data["overrides"])
        if store in CLASSIFIER_STORES:
            # Every field left at a package default is written out as it was then
            # (trust, its decay and the classifier changed defaults in issue 11).
            data["overrides"] = before_issue_11(data["overrides"])
    if store == "classifier_keepup":
        import classifier_keepup

        data["overrides"] = classifier_keepup.overrides(data["option"])
    if method == "hca":
        data["method"] = "hca_batch"
    return data


def target_path(path: Path) -> Path:
    name = path.name
    if name.startswith("hca_seed"):
        return path.with_name("hca_batch_seed" + name[len("hca_seed"):])
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    pending = 0
    for store in STORES:
        for path in sorted((RESULTS / store).glob("*/*_seed*.json")):
            data = json.loads(path.read_text())
            new = migrate(data, store)
            target = target_path(path)
            if new == data and target == path:
                continue
            pending += 1
            if args.check:
                print(f"not migrated: {path}")
                continue
            write_json(target, new)
            if target != path:
                path.unlink()
            raw = raw_path(path)
            if raw.exists():  # the full record beside it (not in git)
                full = migrate(json.loads(gzip.decompress(raw.read_bytes())), store)
                raw_path(target).write_bytes(gzip.compress(
                    json.dumps(full, separators=(",", ":")).encode(), mtime=0))
                if raw_path(target) != raw:
                    raw.unlink()
    print(f"{pending} run(s) {'to migrate' if args.check else 'migrated'}")
    return 1 if args.check and pending else 0


if __name__ == "__main__":
    sys.exit(main())
