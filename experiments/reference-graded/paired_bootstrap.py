#!/usr/bin/env python3
"""Paired percentile bootstrap of accuracy(B) - accuracy(A) over the same labelled groups, from
two `gavel eval --format json` reports of one set (runs that could not share one `gavel eval`,
e.g. two configs with separate stores), or from the per-group outcome counts those reports give.

    paired_bootstrap.py A.json B.json            # the reports' first set, or --set NAME
    paired_bootstrap.py --counts GROUPS A_ONLY_WRONG BOTH_WRONG B_ONLY_WRONG

A group's accuracy is 1 unless the report lists it among its misranked groups (then the accuracy
listed there): exact while each report lists every misranked group (gavel keeps up to 50).
2,000 resamples of the groups with a fixed seed, so the same inputs print the same interval.
"""
import argparse
import json
import random

RESAMPLES = 2000
SEED = 20261206


def accuracies(path, set_name):
    report = json.load(open(path))
    results = report["results"]
    result = next((r for r in results if set_name in (None, r["set"])), None)
    if result is None:
        raise SystemExit(f"{path}: no result for set {set_name!r}")
    missed = {m["id"]: m["accuracy"] for m in result["misranked"]}
    if len(missed) >= 50:
        raise SystemExit(f"{path}: 50 misranked groups listed, maybe more: not exact")
    return result["groups"], missed


def interval(diffs):
    rng = random.Random(SEED)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    return sum(diffs) / n, means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="*", help="A.json B.json")
    p.add_argument("--set", default=None)
    p.add_argument("--counts", nargs=4, type=int, metavar=("GROUPS", "A_ONLY", "BOTH", "B_ONLY"))
    a = p.parse_args()
    if a.counts:
        groups, a_only, both, b_only = a.counts
        diffs = [1.0] * a_only + [-1.0] * b_only + [0.0] * (groups - a_only - b_only)
        del both  # wrong under both: a difference of 0, like the groups both rank right
    else:
        if len(a.reports) != 2:
            p.error("two reports, or --counts")
        (na, missed_a), (nb, missed_b) = (accuracies(r, a.set) for r in a.reports)
        if na != nb:
            raise SystemExit(f"the reports judged {na} and {nb} groups: not the same set")
        ids = set(missed_a) | set(missed_b)
        diffs = [missed_b.get(i, 1.0) - missed_a.get(i, 1.0) for i in ids] + [0.0] * (na - len(ids))
    mean, lo, hi = interval(diffs)
    print(f"accuracy(B) - accuracy(A) = {mean:+.3f} (95% CI {lo:+.3f}, {hi:+.3f}), {len(diffs)} groups")


if __name__ == "__main__":
    main()
