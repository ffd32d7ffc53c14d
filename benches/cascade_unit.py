#!/usr/bin/env python3
"""Which unit should a cascade escalate: the whole group, or each trajectory alone?

Reads two `gavel rescore` outputs of the same labelled rows — one judged by the cheap stage,
one by the strong stage, each score with its confidence — and replays a two-stage cascade at
each threshold both ways:

  group  a group stands with the cheap stage when every trajectory's confidence reaches the
         threshold; otherwise every score of the group comes from the strong stage.
  item   each trajectory keeps the cheap stage's score when its own confidence reaches the
         threshold and takes the strong stage's otherwise, so one group's rewards can mix two
         judges' scales.

For each it prints the share of trajectories the cheap stage scored (the strong stage's work
saved) and the pairwise accuracy over the labelled (better, worse) pairs; for the item unit
also the pairs whose two scores came from different stages, and their accuracy.

    benches/cascade_unit.py CHEAP.jsonl STRONG.jsonl [--thresholds 0.5,0.6,...]
"""

import argparse
import json


def read(path):
    """{group key: (labels, [(score, confidence)])}, from rescore's output lines."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            key = row.get("group_id") or row.get("line")
            labels = (row.get("input_meta") or {}).get("labels")
            scores = [(s.get("score"), s.get("confidence")) for s in row.get("scores", [])]
            if labels and len(labels) == len(scores):
                out[key] = (labels, scores)
    return out


def credit(a, b):
    """A labelled pair's credit: 1 when the better one scored higher, 0.5 on a tie."""
    return 1.0 if a > b else 0.5 if a == b else 0.0


def replay(cheap, strong, t):
    groups = [k for k in cheap if k in strong]
    res = {}
    for unit in ("group", "item"):
        kept = total = 0
        right = pairs = mixed = mixed_right = 0.0
        for k in groups:
            labels, c = cheap[k]
            _, s = strong[k]
            if any(x[0] is None for x in c + s):
                continue
            sure = [x[1] is not None and x[1] >= t for x in c]
            if unit == "group":
                sure = [all(sure)] * len(c)
            score = [c[i][0] if sure[i] else s[i][0] for i in range(len(c))]
            kept += sum(sure)
            total += len(c)
            for i in range(len(c)):
                for j in range(len(c)):
                    if labels[i] > labels[j]:
                        p = credit(score[i], score[j])
                        right += p
                        pairs += 1
                        if sure[i] != sure[j]:
                            mixed += 1
                            mixed_right += p
        res[unit] = (kept / total if total else 0.0, right / pairs if pairs else 0.0,
                     int(mixed), mixed_right / mixed if mixed else None, int(pairs))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cheap")
    ap.add_argument("strong")
    ap.add_argument("--thresholds", default="0.5,0.6,0.7,0.8,0.9,0.95,0.99")
    a = ap.parse_args()
    cheap, strong = read(a.cheap), read(a.strong)
    both = [k for k in cheap if k in strong]
    print(f"{len(both)} groups judged by both stages")
    print("| threshold | group: cheap share | group: accuracy | item: cheap share | item: accuracy "
          "| item: mixed pairs | item: mixed accuracy |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for t in (float(x) for x in a.thresholds.split(",")):
        r = replay(cheap, strong, t)
        g, i = r["group"], r["item"]
        mixed = "—" if i[3] is None else f"{i[3]:.3f}"
        print(f"| {t} | {g[0]:.3f} | {g[1]:.3f} | {i[0]:.3f} | {i[1]:.3f} | {i[2]} of {i[4]} | {mixed} |")
    # Each stage alone, for reference.
    for name, t in (("strong alone", 2.0), ("cheap alone", -1.0)):
        r = replay(cheap, strong, t)["group"]
        print(f"{name}: accuracy {r[1]:.3f}")


if __name__ == "__main__":
    main()
