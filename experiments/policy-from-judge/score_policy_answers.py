#!/usr/bin/env python3
"""Scores a policy's answers to the held-out policy QA questions (policy_qa/test.jsonl next to
this script) against HaluEval's right answers, with a check that does not involve any judge.

    python3 experiments/policy-from-judge/score_policy_answers.py BASE.jsonl [TRAINED.jsonl CONTROL.jsonl ...]
    python3 experiments/policy-from-judge/score_policy_answers.py --json BASE.jsonl TRAINED.jsonl
    python3 experiments/policy-from-judge/score_policy_answers.py --self-test

Answers files: JSONL, one line per test question, each an object with the answer in `text` (or,
if it has no `text`, in `completion`; null counts as an empty answer). Lines are matched to
questions by `id` (the test line's `id`, e.g. "policy_qa-6152") when every line has an `id`;
otherwise by line order (then the file must have exactly one line per test question, in
test.jsonl's order). A file that mixes the two, repeats an id, names an id test.jsonl does not
have, or leaves a question unanswered is refused (--allow-missing scores a missing answer as
wrong instead).

The verifier (primary figure): normalised containment. Both texts are normalised (NFKC,
lowercase, every Unicode punctuation character replaced by a space, the articles a/an/the
removed, whitespace collapsed); an answer is correct when the normalised gold answer occurs in
the normalised answer as whole words (" gold " in " answer "). Secondary figure: SQuAD-style
token F1 between the normalised answer and gold answer (bag-of-words overlap), counted correct at
F1 >= 0.5. build_policy_tasks.py kept only questions whose gold answer is at most 8 words, is not
yes/no, does not occur in the question and occurs in the knowledge.

For two or more files, each file after the first is compared with the first, question by
question: the difference in accuracy (this file minus the first) with a paired bootstrap 95%
interval (10,000 resamples of the questions with replacement, random.Random(20261221), the same
resampled question sets for every comparison and figure; percentile interval, linear
interpolation between order statistics).

Python 3 standard library only.
"""

import argparse
import json
import os
import random
import re
import sys
import unicodedata
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TEST = os.path.join(HERE, "policy_qa", "test.jsonl")
BOOTSTRAP_SEED = 20261221
BOOTSTRAP_RESAMPLES = 10_000
F1_THRESHOLD = 0.5
METRICS = ("containment", "f1_ge_0.5")


# ---------------------------------------------------------------------------------------------
# The verifier


def normalize(text):
    """NFKC, lowercase, punctuation -> space, articles a/an/the removed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def contains_answer(response, gold):
    """The verifier: the normalised gold answer occurs in the normalised response as whole
    words. An empty gold answer (after normalisation) never matches."""
    g = normalize(gold)
    return bool(g) and f" {g} " in f" {normalize(response)} "


def token_f1(response, gold):
    """SQuAD-style token F1 of the normalised texts (multiset overlap of words)."""
    r, g = normalize(response).split(), normalize(gold).split()
    if not r or not g:
        return float(r == g)
    common = sum((Counter(r) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(r), common / len(g)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------------------------------------
# Statistics


def quantile(sorted_values, q):
    """Linear interpolation between order statistics (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def resamples(n, count=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED):
    """`count` bootstrap resamples of the indices 0..n-1 (with replacement), from a fixed seed."""
    rng = random.Random(seed)
    return [[rng.randrange(n) for _ in range(n)] for _ in range(count)]


def paired_bootstrap(base, other, draws):
    """Mean of other - base (0/1 per question) and its percentile 95% interval over `draws`."""
    diffs = [o - b for b, o in zip(base, other)]
    n = len(diffs)
    means = sorted(sum(diffs[i] for i in idx) / n for idx in draws)
    return {
        "difference": sum(diffs) / n,
        "ci95": [quantile(means, 0.025), quantile(means, 0.975)],
        "better": sum(d > 0 for d in diffs),
        "worse": sum(d < 0 for d in diffs),
    }


# ---------------------------------------------------------------------------------------------
# Files


def read_jsonl(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{n}: not valid JSON: {e}")
                if not isinstance(obj, dict):
                    raise SystemExit(f"{path}:{n}: expected a JSON object")
                out.append((n, obj))
    return out


def read_test(path):
    test = [obj for _, obj in read_jsonl(path)]
    ids = [t["id"] for t in test]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"{path}: an id appears twice")
    for t in test:
        if not isinstance(t.get("answer"), str) or not normalize(t["answer"]):
            raise SystemExit(f"{path}: {t['id']}: no answer")
    return test


def answer_text(obj, where):
    for key in ("text", "completion"):
        if key in obj:
            v = obj[key]
            if v is None:
                return ""
            if not isinstance(v, str):
                raise SystemExit(f"{where}: {key}: expected a string")
            return v
    raise SystemExit(f"{where}: no `text` or `completion` field")


def read_answers(path, test, allow_missing=False):
    """The answer text for each test question (None if missing), and how lines were matched."""
    lines = read_jsonl(path)
    with_id = [("id" in obj) for _, obj in lines]
    if lines and all(with_id):
        known = {t["id"] for t in test}
        by_id = {}
        for n, obj in lines:
            key = obj["id"]
            if key not in known:
                raise SystemExit(f"{path}:{n}: id {key!r} is not in the test file")
            if key in by_id:
                raise SystemExit(f"{path}:{n}: id {key!r} appears twice")
            by_id[key] = answer_text(obj, f"{path}:{n}")
        texts = [by_id.get(t["id"]) for t in test]
        matched = "id"
    elif any(with_id):
        raise SystemExit(f"{path}: some lines have an `id` and some do not")
    else:
        if len(lines) > len(test) or (len(lines) < len(test) and not allow_missing):
            raise SystemExit(f"{path}: {len(lines)} lines for {len(test)} test questions "
                             "(matched by line order: one line per question)")
        texts = [answer_text(obj, f"{path}:{n}") for n, obj in lines]
        texts += [None] * (len(test) - len(texts))
        matched = "line order"
    missing = sum(t is None for t in texts)
    if missing and not allow_missing:
        raise SystemExit(f"{path}: {missing} test questions have no answer "
                         "(--allow-missing scores them as wrong)")
    return texts, matched, missing


def score_file(texts, test):
    cont, f1s = [], []
    for text, t in zip(texts, test):
        text = text or ""
        cont.append(int(contains_answer(text, t["answer"])))
        f1s.append(token_f1(text, t["answer"]))
    return {"containment": cont, "f1_ge_0.5": [int(f >= F1_THRESHOLD) for f in f1s], "f1": f1s}


def evaluate(test, files, allow_missing=False):
    """The report for answers files `files` (paths) against `test` (list of test lines)."""
    results, per_q = [], []
    for path in files:
        texts, matched, missing = read_answers(path, test, allow_missing)
        s = score_file(texts, test)
        per_q.append(s)
        n = len(test)
        results.append({
            "file": path,
            "matched_by": matched,
            "questions": n,
            "missing": missing,
            "containment_correct": sum(s["containment"]),
            "containment_accuracy": sum(s["containment"]) / n,
            "f1_ge_0.5_correct": sum(s["f1_ge_0.5"]),
            "f1_ge_0.5_accuracy": sum(s["f1_ge_0.5"]) / n,
            "mean_f1": sum(s["f1"]) / n,
        })
    comparisons = []
    if len(files) > 1:
        draws = resamples(len(test))
        for k in range(1, len(files)):
            comparisons.append({
                "file": files[k],
                "versus": files[0],
                **{m: paired_bootstrap(per_q[0][m], per_q[k][m], draws) for m in METRICS},
            })
    return {
        "test": None,
        "verifier": "normalised containment: NFKC, lowercase, punctuation -> space, articles "
                    "a/an/the removed, whitespace collapsed; correct when the normalised gold "
                    "answer occurs in the normalised answer as whole words",
        "secondary": f"SQuAD-style token F1 of the normalised texts >= {F1_THRESHOLD}",
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED,
                      "interval": "paired, percentile 95%, difference = file - first file"},
        "files": results,
        "comparisons": comparisons,
    }


def print_report(report):
    print(f"test: {report['test']} ({report['files'][0]['questions']} questions)")
    print("verifier: " + report["verifier"])
    for r in report["files"]:
        extra = f", {r['missing']} missing (scored wrong)" if r["missing"] else ""
        print(f"{r['file']}: containment {r['containment_accuracy']:.3f} "
              f"({r['containment_correct']}/{r['questions']}); F1>=0.5 "
              f"{r['f1_ge_0.5_accuracy']:.3f} ({r['f1_ge_0.5_correct']}/{r['questions']}); "
              f"mean F1 {r['mean_f1']:.3f}; matched by {r['matched_by']}{extra}")
    for c in report["comparisons"]:
        for m in METRICS:
            b = c[m]
            print(f"{c['file']} - {c['versus']}: {m} {b['difference']:+.3f} "
                  f"[{b['ci95'][0]:+.3f}, {b['ci95'][1]:+.3f}] (paired bootstrap 95%, "
                  f"{BOOTSTRAP_RESAMPLES} resamples; {b['better']} questions better, "
                  f"{b['worse']} worse)")


# ---------------------------------------------------------------------------------------------
# Self-test


def self_test():
    import tempfile

    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    expect("normalize", normalize("  The Eiffel   Tower!  "), "eiffel tower")
    expect("normalize run-together", normalize("Nixon.First for Women"), "nixon first for women")
    expect("normalize range", normalize("(1844\u20131846)"), "1844 1846")
    expect("normalize articles only as words", normalize("An anthem, a theme"), "anthem theme")
    expect("normalize curly apostrophe", normalize("Arthur\u2019s"), normalize("Arthur's"))
    expect("contains", contains_answer("It was Arthur's Magazine.", "Arthur's Magazine"), True)
    expect("contains case/article", contains_answer("THE BEATLES did.", "The Beatles"), True)
    expect("contains whole words", contains_answer("She was born in 19845.", "1984"), False)
    expect("contains partial name", contains_answer("Barack Obama", "Barack Hussein Obama"),
           False)
    expect("contains empty gold", contains_answer("anything", "The"), False)
    expect("contains empty response", contains_answer("", "Paris"), False)
    expect("f1 exact", token_f1("Paris.", "paris"), 1.0)
    expect("f1 partial", round(token_f1("the cat sat", "cat sat on mat"), 6), round(2 / 3, 6))
    expect("f1 none", token_f1("dog", "cat"), 0.0)
    expect("f1 empty", token_f1("", "cat"), 0.0)
    expect("quantile", quantile([0.0, 1.0, 2.0, 3.0, 4.0], 0.5), 2.0)
    expect("quantile interpolated", quantile([0.0, 10.0], 0.25), 2.5)

    draws = resamples(6, count=500)
    same = paired_bootstrap([1, 0, 1, 1, 0, 0], [1, 0, 1, 1, 0, 0], draws)
    expect("bootstrap identical", (same["difference"], same["ci95"]), (0.0, [0.0, 0.0]))
    const = paired_bootstrap([0, 0, 0, 0], [1, 1, 1, 1], resamples(4, count=200))
    expect("bootstrap constant", (const["difference"], const["ci95"]), (1.0, [1.0, 1.0]))
    mixed = paired_bootstrap([0] * 10, [1] * 5 + [0] * 5, resamples(10, count=2000))
    lo, hi = mixed["ci95"]
    expect("bootstrap mixed difference", mixed["difference"], 0.5)
    expect("bootstrap mixed interval", (0.1 <= lo < 0.5 < hi <= 0.9), True)
    expect("bootstrap deterministic", resamples(5, 3), resamples(5, 3))

    # End to end on temporary files: gold answers score 1, empty 0, identical files differ by
    # exactly 0 with interval [0, 0], ids and line order give the same scores.
    test = [
        {"id": "q1", "answer": "Arthur's Magazine"},
        {"id": "q2", "answer": "1998"},
        {"id": "q3", "answer": "Barack Hussein Obama II"},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, lines):
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(x) + "\n" for x in lines))
            return path

        gold = write("gold.jsonl", [{"id": t["id"], "text": t["answer"]} for t in reversed(test)])
        gold2 = write("gold2.jsonl", [{"completion": t["answer"]} for t in test])
        empty = write("empty.jsonl", [{"id": t["id"], "text": ""} for t in test])
        some = write("some.jsonl", [{"text": "It was Arthur's Magazine."},
                                    {"text": "It came out in 1999."},
                                    {"text": "Barack Obama II"}])
        rep = evaluate(test, [gold, gold2, empty, some])
        acc = [r["containment_accuracy"] for r in rep["files"]]
        expect("end to end accuracy", acc, [1.0, 1.0, 0.0, 1 / 3])
        expect("end to end matched", [r["matched_by"] for r in rep["files"]],
               ["id", "line order", "id", "line order"])
        c = rep["comparisons"]
        expect("end to end identical", (c[0]["containment"]["difference"],
                                         c[0]["containment"]["ci95"]), (0.0, [0.0, 0.0]))
        expect("end to end empty", (c[1]["containment"]["difference"],
                                    c[1]["containment"]["ci95"]), (-1.0, [-1.0, -1.0]))
        expect("end to end f1 secondary", rep["files"][3]["f1_ge_0.5_correct"], 2)
        bad = write("bad.jsonl", [{"id": "q1", "text": "x"}])
        try:
            evaluate(test, [bad])
            failures.append("a file with missing answers was accepted")
        except SystemExit:
            pass
        rep = evaluate(test, [bad], allow_missing=True)
        expect("allow missing", (rep["files"][0]["missing"],
                                 rep["files"][0]["containment_correct"]), (2, 0))

    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    print(f"self-test: {'FAILED' if failures else 'ok'} ({len(failures)} failures)",
          file=sys.stderr)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("answers", nargs="*", help="answers files (JSONL); the first is the baseline")
    ap.add_argument("--test", default=DEFAULT_TEST, help="test file (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--allow-missing", action="store_true",
                    help="score an unanswered question as wrong instead of refusing the file")
    ap.add_argument("--self-test", action="store_true", help="run the built-in checks")
    a = ap.parse_args()
    if a.self_test:
        sys.exit(self_test())
    if not a.answers:
        ap.error("give at least one answers file (or --self-test)")
    test = read_test(a.test)
    report = evaluate(test, a.answers, a.allow_missing)
    report["test"] = a.test
    if a.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print_report(report)


if __name__ == "__main__":
    main()
