#!/usr/bin/env python3
"""Generates the benchmark corpus benches/data/groups.jsonl, deterministically.

    python3 benches/data/make_groups.py            # rewrites benches/data/groups.jsonl
    python3 benches/data/make_groups.py --check    # exits 1 if the file is not what this script makes

Every line is a gavel request body {"trajectories": [...], "tools": [...]?} plus two labels that
are not part of gavel's API and must be stripped before sending: "kind" (the group kind, for
per-kind figures) and "id" (a name for the group). Standard library only; a fixed seed per group,
so the file is byte-for-byte the same on every run and machine.

Kinds:
- agent_sheet: spreadsheet agent, 8 rollouts; recurring long tool results (workbook metadata,
  the same range reads), random per-rollout tool-call ids, some rollouts identical but for ids,
  some detouring through a decoy sheet.
- agent_docs: research agent, 8 rollouts; search results and fetched documents recur across
  rollouts, random tool-call ids.
- rag: one user turn with retrieved passages (the shared prefix), answers of varied length;
  group sizes 4-16.
- short: single-turn questions with short answers, some answers repeated verbatim; sizes 4-16.
- multilingual: German user turns, Chinese and Russian tool results and documents, German or
  English answers; 8 rollouts.
- agent_sheet_shared_ids, agent_docs_shared_ids: the two agent kinds as frameworks that number
  tool calls deterministically write them ("call_1", "call_2", ... in each rollout, so the ids
  of the same call agree across rollouts) and with every tool result JSON, as spreadsheet and
  search tools return it (range reads as {"range", "values"}, fetched documents as
  {"url", "title", "text"}); same seeds' structure, new seeds.
- single: groups of one trajectory (an agent rollout, a RAG answer, a short answer).

The first five kinds are unchanged since the corpus's first version (their lines are
byte-identical); the later kinds were added after it.
"""

import json
import random
import string
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "groups.jsonl"

# ---------------------------------------------------------------------------------------------
# Building blocks


def call_id(rng):
    """A per-rollout random tool-call id, as real inference servers hand out."""
    return "call_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


def tool_call(rng, name, args):
    return {
        "id": call_id(rng),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def tool_def(name, description, properties, required=()):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


class Rollout:
    """Builds one trajectory's messages; tool calls get fresh random ids, or with shared_ids the
    number of the call in the rollout ("call_1", "call_2", ...), drawing nothing from rng."""

    def __init__(self, rng, system, user, shared_ids=False):
        self.rng = rng
        self.shared_ids = shared_ids
        self.calls = 0
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def call(self, name, args, result, say=None):
        tc = tool_call(self.rng, name, args)  # draws the random id either way: same rng stream
        self.calls += 1
        if self.shared_ids:
            tc["id"] = f"call_{self.calls}"
        self.messages.append({"role": "assistant", "content": say, "tool_calls": [tc]})
        self.messages.append({"role": "tool", "tool_call_id": tc["id"], "content": result})

    def answer(self, text):
        self.messages.append({"role": "assistant", "content": text})
        return {"messages": self.messages}


# ---------------------------------------------------------------------------------------------
# Spreadsheet agent

REGIONS = ["North", "South", "East", "West", "Central", "Export"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
PRODUCTS = ["Widget A", "Widget B", "Gadget Pro", "Gadget Lite", "Service Plan", "Spare Parts"]

SHEET_TOOLS = [
    tool_def("get_workbook_metadata", "Sheet names and used ranges of the open workbook", {}),
    tool_def(
        "read_ranges",
        "Read up to 1000 cells from one or more A1 ranges",
        {"ranges": {"type": "array", "items": {"type": "string"}}},
        ["ranges"],
    ),
    tool_def("run_python", "Run sandboxed Python over the workbook (pandas available)",
             {"code": {"type": "string"}}, ["code"]),
]


def sales_table(rng, year, rows, as_json=False):
    head = "Row | Month | Region | Product | Gross (USD) | Returns (USD) | Net (USD)"
    lines = [head, "-" * len(head)]
    data = []
    cells = [["Month", "Region", "Product", "Gross (USD)", "Returns (USD)", "Net (USD)"]]
    for r in range(rows):
        month = MONTHS[r % 12]
        region = rng.choice(REGIONS)
        product = rng.choice(PRODUCTS)
        gross = rng.randint(10_000_00, 250_000_00) / 100
        returns = round(gross * rng.uniform(0.0, 0.08), 2)
        net = round(gross - returns, 2)
        data.append((month, region, net))
        lines.append(f"{r + 2} | {month} {year} | {region} | {product} | {gross:,.2f} | {returns:,.2f} | {net:,.2f}")
        cells.append([f"{month} {year}", region, product, gross, returns, net])
    if as_json:
        return cells, data
    return "\n".join(lines), data


def workbook_metadata(name, sheets):
    return json.dumps({
        "workbook": name,
        "sheets": [{"name": s, "used_range": r, "header_row": 1, "frozen_panes": "A2", "hidden": False}
                   for s, r in sheets],
        "named_ranges": [{"name": "FX_RATE", "refers_to": "Assumptions!B3"},
                         {"name": "TAX_RATE", "refers_to": "Assumptions!B4"}],
        "last_modified_by": "finance-ops@example.com",
    })


def range_read(ref, values):
    """A spreadsheet tool's JSON answer to read_ranges."""
    return json.dumps({"ranges": [{"range": ref, "values": values}]})


def agent_sheet(seed, shared=False):
    """shared: deterministic tool-call ids and JSON tool results (agent_sheet_shared_ids)."""
    rng = random.Random(seed)
    year = 2020 + seed % 5
    region = rng.choice(REGIONS)
    m0 = rng.randint(0, 8)
    months = MONTHS[m0:m0 + 3]
    book = f"sales_{year}_q{m0 // 3 + 1}.xlsx"
    rows = 40
    sales, data = sales_table(rng, year, rows, as_json=shared)
    decoy, _ = sales_table(rng, year - 1, rows, as_json=shared)
    assumption_rows = (
        [["Key", "Value", "Note"], ["FX_RATE", "1.0842", "EUR->USD, month-end average"],
         ["TAX_RATE", "0.19", "blended"], ["RETURN_WINDOW_DAYS", "30", "policy 2022-07"]]
        + [[f"ADJ_{i}", f"{rng.uniform(-2, 2):.4f}", f"seasonal adjustment factor for {MONTHS[i]}"]
           for i in range(12)])
    assumptions = "\n".join(" | ".join(r) for r in assumption_rows)
    if shared:
        sales = range_read(f"Sales!A1:G{rows + 1}", sales)
        decoy = range_read(f"Sales_{year - 1}!A1:G{rows + 1}", decoy)
        assumptions = range_read("Assumptions!A1:C16", assumption_rows)
    meta = workbook_metadata(book, [("Sales", f"A1:G{rows + 1}"), (f"Sales_{year - 1}", f"A1:G{rows + 1}"),
                                    ("Assumptions", "A1:C16"), ("Notes", "A1:A12")])
    truth = round(sum(n for mo, rg, n in data if rg == region and mo in months) * 100)
    system = ("You are a spreadsheet analyst agent working on the user's open workbook. Tools: "
              "get_workbook_metadata, read_ranges, run_python. You have 15 turns. Read only what you "
              "need, do not guess values you have not read, and end with a final line "
              "'ANSWER: <value>' where amounts are integers in cents.")
    user = (f"In {book}, what is the total net revenue for the {region} region over "
            f"{', '.join(months[:-1])} and {months[-1]} {year}, in cents? Use the Sales sheet, "
            "not the prior-year sheet.")
    plans = [None, "Let me look at the workbook structure first.",
             "I'll start with the metadata to find the right sheet.", None]
    trajs = []
    # One path every rollout may take, chosen per rollout; some take the same path and say the
    # same words (so they are identical but for their tool-call ids).
    for i in range(8):
        r = Rollout(rng, system, user, shared_ids=shared)
        path = rng.choice(["direct", "direct", "direct_python", "decoy", "assumptions", "lazy"])
        if path == "lazy":
            r.call("read_ranges", {"ranges": [f"Sales!A1:G{rows + 1}"]}, sales, say=None)
            off = rng.choice([0, 0, rng.randint(1, 900_000)])
            trajs.append(r.answer(f"Summing the {region} rows for {', '.join(months)} gives the total.\n"
                                  f"ANSWER: {truth + off}"))
            continue
        r.call("get_workbook_metadata", {}, meta, say=plans[i % len(plans)] if path != "direct" else None)
        if path == "decoy":
            r.call("read_ranges", {"ranges": [f"Sales_{year - 1}!A1:G{rows + 1}"]}, decoy,
                   say="The prior-year sheet may have the same layout; checking it.")
        if path == "assumptions":
            r.call("read_ranges", {"ranges": ["Assumptions!A1:C16"]}, assumptions,
                   say="Checking whether any adjustment factors apply.")
        r.call("read_ranges", {"ranges": [f"Sales!A1:G{rows + 1}"]}, sales)
        if path == "direct_python":
            code = (f"df = wb['Sales']\nmask = (df.Region == '{region}') & df.Month.str[:3].isin({months!r})\n"
                    "print(int(round(df.loc[mask, 'Net (USD)'].sum() * 100)))")
            out = json.dumps({"stdout": f"{truth}\n", "stderr": "", "exit_code": 0}) if shared else str(truth)
            r.call("run_python", {"code": code}, out, say="Summing with pandas to avoid arithmetic slips.")
        if path == "decoy":
            ans = truth if rng.random() < 0.5 else truth + rng.randint(10_000, 2_000_000)
        else:
            ans = truth if rng.random() < 0.75 else truth - rng.randint(100, 50_000)
        trajs.append(r.answer(f"The {region} net revenue for {months[0]}–{months[-1]} {year} "
                              f"is ${ans / 100:,.2f}.\nANSWER: {ans}"))
    return {"tools": SHEET_TOOLS, "trajectories": trajs}


# ---------------------------------------------------------------------------------------------
# Research agent with document fetches

TOPICS = [
    ("battery recycling", "lithium recovery rates", "Northvolt", "hydrometallurgical"),
    ("offshore wind", "capacity factors", "Ørsted", "floating foundation"),
    ("heat pumps", "seasonal performance", "Viessmann", "R290 refrigerant"),
    ("desalination", "energy per cubic metre", "Acciona", "reverse osmosis"),
    ("green steel", "hydrogen direct reduction", "HYBRIT", "electric arc"),
    ("grid storage", "round-trip efficiency", "Fluence", "iron-air"),
]

SUBJECTS = ["The report", "The operator", "Independent auditors", "The regulator", "The consortium",
            "Analysts at the agency", "The pilot plant", "A 2023 field study", "The company's filing"]
VERBS = ["states that", "estimates that", "found that", "notes that", "projects that", "confirms that"]


def sentence(rng, topic, metric, org, tech):
    n = rng.randint(2, 97)
    year = rng.randint(2018, 2025)
    facts = [
        f"{metric} reached {n}.{rng.randint(0, 9)}% in {year} at the {org} site",
        f"the {tech} process cut costs by {n}% compared with the {year - 3} baseline",
        f"{org} plans {rng.randint(2, 40)} new installations before {year + 4}",
        f"{topic} capacity grew to {rng.randint(100, 9000)} MW across {rng.randint(3, 30)} countries",
        f"permitting remains the main bottleneck, adding {rng.randint(6, 48)} months to typical projects",
        f"unit economics depend on {tech} yields staying above {n}%",
        f"public funding covered {n}% of capital expenditure in {year}",
    ]
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(facts)}."


def document(rng, title, topic, metric, org, tech, paragraphs):
    body = [f"# {title}", ""]
    for p in range(paragraphs):
        body.append(" ".join(sentence(rng, topic, metric, org, tech) for _ in range(rng.randint(4, 7))))
        body.append("")
    return "\n".join(body).strip()


DOC_TOOLS = [
    tool_def("web_search", "Search the web; returns titles, urls and snippets",
             {"query": {"type": "string"}, "k": {"type": "integer"}}, ["query"]),
    tool_def("fetch_document", "Fetch a document by url and return its text",
             {"url": {"type": "string"}}, ["url"]),
]


def agent_docs(seed, shared=False):
    """shared: deterministic tool-call ids and JSON tool results (agent_docs_shared_ids)."""
    rng = random.Random(seed)
    topic, metric, org, tech = TOPICS[seed % len(TOPICS)]
    urls = [f"https://example.org/{topic.replace(' ', '-')}/{k}" for k in ("overview", "annual-report", "study", "news")]
    docs = {u: document(rng, f"{topic.title()}: {u.rsplit('/', 1)[1].replace('-', ' ')}", topic, metric, org, tech,
                        rng.randint(4, 7)) for u in urls}
    def results(q):
        return json.dumps({"query": q, "results": [
            {"title": f"{topic.title()} — {u.rsplit('/', 1)[1]}", "url": u,
             "snippet": sentence(rng, topic, metric, org, tech)} for u in urls]})
    queries = [f"{topic} {metric} {org}", f"{org} {tech} {metric} latest figures"]
    search = {q: results(q) for q in queries}
    system = ("You are a research agent. Use web_search and fetch_document to answer the user's question "
              "from sources, cite the urls you used in brackets, and say so when sources disagree. "
              "Keep the final answer under 150 words.")
    user = f"What are the latest reported {metric} for {topic} at {org}, and what limits further growth?"
    trajs = []
    for i in range(8):
        r = Rollout(rng, system, user, shared_ids=shared)
        q = rng.choice(queries)
        r.call("web_search", {"query": q, "k": 4}, search[q], say=rng.choice([None, "Searching first."]))
        read = rng.sample(urls, rng.randint(1, 3))
        for u in read:
            doc = docs[u]
            if shared:
                title, _, text = doc.partition("\n")
                doc = json.dumps({"url": u, "title": title.lstrip("# "), "text": text.strip()})
            r.call("fetch_document", {"url": u}, doc)
        claim = sentence(rng, topic, metric, org, tech)
        cites = " ".join(f"[{u}]" for u in read)
        trajs.append(r.answer(f"{claim} {sentence(rng, topic, metric, org, tech)} "
                              f"The main limit on growth is permitting and {tech} yield. {cites}"))
    return {"tools": DOC_TOOLS, "trajectories": trajs}


# ---------------------------------------------------------------------------------------------
# RAG answers

def rag(seed, n):
    rng = random.Random(seed)
    topic, metric, org, tech = TOPICS[seed % len(TOPICS)]
    passages = "\n\n".join(
        f"[{k}] " + " ".join(sentence(rng, topic, metric, org, tech) for _ in range(rng.randint(3, 6)))
        for k in range(1, 6))
    system = ("Answer the question using only the retrieved passages. Cite passages as [n]. If the passages "
              "do not contain the answer, say you cannot tell from them. Do not add outside knowledge.")
    user = f"Question: How did {metric} for {topic} develop at {org}?\n\nRetrieved passages:\n\n{passages}"
    trajs = []
    for i in range(n):
        k = rng.randint(1, 5)
        body = " ".join(sentence(rng, topic, metric, org, tech) + f" [{rng.randint(1, 5)}]"
                        for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.15:
            body = "I cannot tell from the passages how this developed over time."
        trajs.append({"messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                                   {"role": "assistant", "content": f"According to passage [{k}], {body}"}]})
    return {"trajectories": trajs}


# ---------------------------------------------------------------------------------------------
# Short single-turn groups

def short(seed, n):
    rng = random.Random(seed)
    a, b = rng.randint(12, 99), rng.randint(12, 99)
    system = "You are a careful assistant. Think briefly, then end with 'ANSWER: <number>'."
    user = f"A crate holds {a} boxes and each box holds {b} bolts. How many bolts are in 3 crates?"
    right = 3 * a * b
    variants = [f"3 × {a} × {b} = {right}.\nANSWER: {right}",
                f"ANSWER: {right}",
                f"Each crate holds {a * b} bolts, so three hold {right}.\nANSWER: {right}",
                f"{a} × {b} = {a * b + 10}, times 3 is {3 * (a * b + 10)}.\nANSWER: {3 * (a * b + 10)}",
                f"ANSWER: {a * b}"]
    trajs = [{"messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                           {"role": "assistant", "content": rng.choice(variants)}]} for _ in range(n)]
    return {"trajectories": trajs}


# ---------------------------------------------------------------------------------------------
# Multilingual

DE = ["Die Lieferung kam drei Tage zu spät an und die Verpackung war beschädigt.",
      "Bitte prüfen Sie, ob die Garantie auch für Wasserschäden gilt.",
      "Laut Handbuch darf das Gerät nicht unter fünf Grad Celsius betrieben werden.",
      "Der Kunde verlangt eine Erstattung oder einen gleichwertigen Ersatz.",
      "Unsere Rückgaberichtlinie gewährt dreißig Tage ab Erhalt der Ware."]
ZH = ["本产品的保修期为自购买之日起二十四个月。", "因用户不当使用造成的损坏不在保修范围内，包括进水和跌落。",
      "设备应在五摄氏度至四十摄氏度之间的环境中使用。", "如需退货，请在收到商品后三十天内联系客服并提供订单号。",
      "电池属于易耗品，保修期为十二个月。", "维修期间，我们可提供备用设备，但需支付押金。"]
RU = ["Гарантийный срок составляет двадцать четыре месяца с даты покупки.",
      "Повреждения, вызванные попаданием воды, не покрываются гарантией.",
      "Устройство не следует эксплуатировать при температуре ниже пяти градусов Цельсия.",
      "Возврат возможен в течение тридцати дней при наличии чека.",
      "Аккумулятор является расходным материалом; гарантия на него — двенадцать месяцев.",
      "На время ремонта клиенту может быть предоставлено подменное устройство под залог."]

ML_TOOLS = [tool_def("lookup_policy", "Return the warranty policy document for a product and language",
                     {"product": {"type": "string"}, "lang": {"type": "string"}}, ["product", "lang"])]


def multilingual_agent(seed):
    rng = random.Random(seed)
    product = f"AquaSense {rng.randint(100, 999)}"
    zh_doc = f"《{product} 保修政策》\n" + "\n".join(rng.choice(ZH) + rng.choice(ZH) for _ in range(14))
    ru_doc = f"Гарантийная политика {product}\n" + "\n".join(rng.choice(RU) + " " + rng.choice(RU) for _ in range(12))
    system = ("Du bist ein Kundenservice-Agent. Nutze lookup_policy, um die Garantiebedingungen zu prüfen, "
              "und antworte dem Kunden auf Deutsch, höflich und knapp.")
    user = f"{rng.choice(DE)} {rng.choice(DE)} Gilt die Garantie für mein {product}, das nass geworden ist?"
    trajs = []
    for i in range(8):
        r = Rollout(rng, system, user)
        langs = rng.choice([["zh"], ["ru"], ["zh", "ru"], ["ru", "zh"]])
        for lang in langs:
            r.call("lookup_policy", {"product": product, "lang": lang}, zh_doc if lang == "zh" else ru_doc,
                   say=rng.choice([None, "Ich prüfe die Garantiebedingungen."]))
        good = rng.random() < 0.6
        text = ("Leider sind Wasserschäden laut den Garantiebedingungen ausgeschlossen. "
                "Gerne bieten wir Ihnen eine kostenpflichtige Reparatur an; während der Reparatur "
                "erhalten Sie gegen Pfand ein Ersatzgerät." if good else
                "Ja, die Garantie gilt 24 Monate ab Kauf, daher wird Ihr Gerät kostenlos ersetzt.")
        trajs.append(r.answer(text))
    return {"tools": ML_TOOLS, "trajectories": trajs}


def multilingual_translate(seed, n):
    rng = random.Random(seed)
    src = " ".join(rng.choice(ZH) for _ in range(6))
    system = "Translate the user's Chinese text into Russian and German. Give the Russian first."
    trajs = []
    for _ in range(n):
        ru = " ".join(rng.choice(RU) for _ in range(rng.randint(3, 6)))
        de = " ".join(rng.choice(DE) for _ in range(rng.randint(2, 4)))
        trajs.append({"messages": [{"role": "system", "content": system}, {"role": "user", "content": src},
                                   {"role": "assistant", "content": f"Русский: {ru}\n\nDeutsch: {de}"}]})
    return {"trajectories": trajs}


# ---------------------------------------------------------------------------------------------

def groups():
    out = []
    for k in range(6):
        out.append(("agent_sheet", f"agent_sheet_{k}", agent_sheet(1000 + k)))
    for k in range(6):
        out.append(("agent_docs", f"agent_docs_{k}", agent_docs(2000 + k)))
    for k, n in enumerate([4, 6, 8, 12, 16, 8]):
        out.append(("rag", f"rag_{k}_n{n}", rag(3000 + k, n)))
    for k, n in enumerate([4, 8, 16, 6, 12, 8]):
        out.append(("short", f"short_{k}_n{n}", short(4000 + k, n)))
    out.append(("multilingual", "multilingual_agent_0", multilingual_agent(5000)))
    out.append(("multilingual", "multilingual_agent_1", multilingual_agent(5001)))
    out.append(("multilingual", "multilingual_translate_n8", multilingual_translate(5002, 8)))
    for k in range(3):
        out.append(("agent_sheet_shared_ids", f"agent_sheet_shared_ids_{k}", agent_sheet(6000 + k, shared=True)))
    for k in range(3):
        out.append(("agent_docs_shared_ids", f"agent_docs_shared_ids_{k}", agent_docs(7000 + k, shared=True)))
    sheet = agent_sheet(8000, shared=True)
    out.append(("single", "single_agent_n1", {"tools": sheet["tools"], "trajectories": sheet["trajectories"][:1]}))
    out.append(("single", "single_rag_n1", rag(8001, 1)))
    out.append(("single", "single_short_n1", short(8002, 1)))
    lines = []
    for kind, gid, body in out:
        line = {"kind": kind, "id": gid}
        line.update(body)
        lines.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def main():
    text = groups()
    if "--check" in sys.argv[1:]:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if same else 'differs from what make_groups.py generates'}")
        sys.exit(0 if same else 1)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({text.count(chr(10))} groups, {len(text.encode())} bytes)")


if __name__ == "__main__":
    main()
