#!/usr/bin/env python3
"""How much a judge's rewards say about correctness, within the groups a policy trains on.

    python3 experiments/policy-from-judge/judge_signal.py \
        --test experiments/policy-from-judge/policy_qa/dev.jsonl SCORED [SCORED ...]
    python3 experiments/policy-from-judge/judge_signal.py --self-test

Each SCORED file holds one scored group per line, in the order of the --test file's questions:
`gavel train sample --output` lines (`trajectories`, `rewards`) or `gavel rescore` lines
(`line`, 1-based, and `rewards`; their trajectories are taken from the first file, which must
hold them). Every completion (the last message of a trajectory) is checked against the
question's gold answer with score_policy_answers.py's normalised containment; no judge is
involved in that check. Per file:

  AUC          over every (right, wrong) pair of completions of one group: the share the reward
               ranks right above wrong (a tie counts half). 0.5 is a reward that carries no
               information about correctness; 1.0 one that always prefers a right answer.
  best-of-N    the share of groups whose highest-rewarded completion is right (first on ties):
               what picking by the reward would reach from these samples.

Beside them, for the samples: the share right, and the share of groups with any right one.
The reward is what GRPO's advantages are made from, so these bound what the policy can learn
about being right from it. Python 3 standard library only.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from score_policy_answers import contains_answer, read_jsonl, read_test  # noqa: E402


def completion(trajectory):
    messages = trajectory.get("messages") or []
    return (messages[-1].get("content") or "") if messages else ""


def signal(correct, rewards):
    """(right-above-wrong pairs, pairs, best is right) for one group."""
    good = pairs = 0.0
    for i, ci in enumerate(correct):
        for j, cj in enumerate(correct):
            if ci and not cj:
                pairs += 1
                if rewards[i] > rewards[j]:
                    good += 1
                elif rewards[i] == rewards[j]:
                    good += 0.5
    best = max(range(len(rewards)), key=lambda k: (rewards[k], -k))
    return good, pairs, correct[best]


def report(test, files):
    first = [obj for _, obj in read_jsonl(files[0])]
    if len(first) != len(test):
        raise SystemExit(f"{files[0]}: {len(first)} groups for {len(test)} questions")
    correct = []
    for n, (g, t) in enumerate(zip(first, test), 1):
        if "trajectories" not in g:
            raise SystemExit(f"{files[0]}:{n}: no trajectories (the first file must hold them)")
        correct.append([contains_answer(completion(tr), t["answer"]) for tr in g["trajectories"]])
    samples = sum(len(c) for c in correct)
    print(f"samples: {samples} in {len(correct)} groups; right {sum(map(sum, correct)) / samples:.3f}; "
          f"groups with a right one {sum(any(c) for c in correct) / len(correct):.3f}; "
          f"groups mixed {sum(0 < sum(c) < len(c) for c in correct)}")
    out = {}
    for path in files:
        good = pairs = best = groups = 0
        for n, (_, g) in enumerate(read_jsonl(path), 1):
            k = g["line"] - 1 if "line" in g else n - 1
            if not 0 <= k < len(correct):
                raise SystemExit(f"{path}:{n}: group {k + 1} is not one of the {len(correct)}")
            rewards = g.get("rewards")
            if not isinstance(rewards, list) or len(rewards) != len(correct[k]):
                raise SystemExit(f"{path}:{n}: expected {len(correct[k])} rewards")
            a, b, c = signal(correct[k], rewards)
            good, pairs, best, groups = good + a, pairs + b, best + c, groups + 1
        auc = good / pairs if pairs else float("nan")
        out[path] = {"groups": groups, "pairs": pairs, "auc": auc, "best_of_n": best / groups}
        print(f"{path}: AUC {auc:.3f} over {int(pairs)} pairs; best-of-N {best / groups:.3f} "
              f"({groups} groups)")
    return out


def self_test():
    # A reward that ranks every right answer first, one that ranks them last, and ties.
    assert signal([True, False, False], [0.9, 0.1, 0.2]) == (2, 2, True)
    assert signal([True, False, False], [0.0, 0.1, 0.2]) == (0, 2, False)
    assert signal([True, False], [0.5, 0.5]) == (0.5, 1, True)
    assert signal([False, True], [0.5, 0.5]) == (0.5, 1, False)
    assert signal([True, True], [0.2, 0.1])[1] == 0
    print("self-test passed")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--test", default="experiments/policy-from-judge/policy_qa/dev.jsonl")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("scored", nargs="*")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.scored:
        p.error("give at least one scored file")
    report(read_test(a.test), a.scored)


if __name__ == "__main__":
    main()
