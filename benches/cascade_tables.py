#!/usr/bin/env python3
"""The tables of BENCHMARKS.md "Cascades", from what benches/cascade.sh wrote.

    benches/cascade_tables.py [OUT]        # OUT: target/cascade by default

Reads calibrate-ALPHA.json, qa.json, dialogue.json and frontier-ALPHA.json (each `gavel eval
--format json`) and prints markdown. Frontier prompt tokens per 1,000 groups are the simulated judge's
mean prompt tokens per call (characters / 4, an estimate) times its calls; each
group is judged once in use, so calls per 1,000 groups are 1,000 times the share it decided.
"""

import glob
import json
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "target/cascade"


def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None


def result(report, judge):
    return next(r for r in report["results"] if r["judge"] == judge)


def comparison(report, a, b):
    """a − b and its 95 % interval (a report's `difference` is its b − its a)."""
    for c in report["comparisons"]:
        if c["a"]["judge"] == b and c["b"]["judge"] == a:
            return c["difference"], c["ci95"]
        if c["a"]["judge"] == a and c["b"]["judge"] == b:
            return -c["difference"], [-c["ci95"][1], -c["ci95"][0]]
    raise KeyError((a, b))


def cascade(report, judge):
    return next(c for c in report["cascades"] if c["judge"] == judge)


def alpha_of(path):
    return float(path.rsplit("-", 1)[1][: -len(".json")])


def ci(d, lo_hi):
    return f"{d:+.3f} ({lo_hi[0]:+.3f}, {lo_hi[1]:+.3f})"


print("### Thresholds chosen on the 100 dev QA groups (δ 0.1)\n")
print("| α | 0.5B: threshold | kept groups | kept accuracy (bound) | 1.5B: threshold | kept groups | kept accuracy (bound) |")
print("|---:|---:|---:|---|---:|---:|---|")
for path in sorted(glob.glob(os.path.join(out, "calibrate-*.json")), key=alpha_of):
    cells = []
    for judge in ("small-tuned", "large-tuned"):
        c = next(c for c in load(os.path.basename(path))["calibration"] if c["judge"] == judge)
        if c["thresholds"]:
            cells += [f"{c['thresholds'][0]:.4g}", f"{c['kept_groups']} of {c['groups']}",
                      f"{c['accuracy']:.3f} ({c['lower_bound']:.3f})"]
        else:
            cells += ["none", "0", "—"]
    print(f"| {alpha_of(path)} | " + " | ".join(cells) + " |")

print("\n### The 0.5B in front of the 1.5B, on eval rows\n")
print("| set | groups | cascade | 1.5B alone | cascade − 1.5B (95% CI) | decided by the 0.5B (its accuracy there) | 1.5B judgings saved |")
print("|---|---:|---:|---:|---|---|---:|")
for name in ("qa", "dialogue"):
    r = load(f"{name}.json")
    if r is None:
        continue
    c, l = result(r, "small-then-large"), result(r, "large-tuned")
    d, lo_hi = comparison(r, "small-then-large", "large-tuned")
    s = cascade(r, "small-then-large")
    first = s["stages"][0]
    acc = "—" if first["pairwise_accuracy"] is None else f"{first['pairwise_accuracy']:.3f}"
    print(f"| {c['set']} | {c['groups']} | {c['pairwise_accuracy']:.3f} | {l['pairwise_accuracy']:.3f} "
          f"| {ci(d, lo_hi)} | {first['share']:.3f} ({acc}) | {s['last_stage_saved']:.3f} |")

print("\n### The 1.5B in front of a simulated frontier judge (5 % of groups wrong), QA eval rows\n")
print("| α | 1.5B threshold | decided by the 1.5B (its accuracy there) | cascade | simulation alone | cascade − simulation (95% CI) | frontier calls / 1,000 groups | frontier prompt tokens / 1,000 groups |")
print("|---:|---:|---|---:|---:|---|---:|---:|")
frontier = sorted(glob.glob(os.path.join(out, "frontier-*.json")), key=alpha_of)
# Tokens per frontier call: from whichever run asked the simulation (later runs read the cache).
per_call = max([r["usage"]["prompt_tokens"] / r["usage"]["judge_calls"]
                for path in frontier for r in load(os.path.basename(path))["results"]
                if r["judge"] == "sim-frontier" and r["usage"]["judge_calls"]] or [float("nan")])
for path in frontier:
    r = load(os.path.basename(path))
    a = alpha_of(path)
    name = f"large-then-sim-{a}"
    c, sim = result(r, name), result(r, "sim-frontier")
    d, lo_hi = comparison(r, name, "sim-frontier")
    s = cascade(r, name)
    first = s["stages"][0]
    calls = 1000 * (1 - s["last_stage_saved"])
    cal = load(f"calibrate-{a}.json")
    thr = next((cc["thresholds"] for cc in (cal or {}).get("calibration", []) if cc["judge"] == "large-tuned"), [])
    thr = f"{thr[0]:.4g}" if thr else "—"
    acc = "—" if first["pairwise_accuracy"] is None else f"{first['pairwise_accuracy']:.3f}"
    print(f"| {a} | {thr} | {first['share']:.3f} ({acc}) | {c['pairwise_accuracy']:.3f} "
          f"| {sim['pairwise_accuracy']:.3f} | {ci(d, lo_hi)} | {calls:,.0f} | {calls * per_call:,.0f} |")
if frontier:
    print(f"| (no cascade) | | 0 | | | | 1,000 | {1000 * per_call:,.0f} |")
