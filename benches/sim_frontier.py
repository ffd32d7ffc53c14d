#!/usr/bin/env python3
"""A simulated frontier judge for the cascade benchmark: an OpenAI-compatible server on
127.0.0.1 that answers gavel's listwise verdicts *from the labels* of the eval rows it was
given, wrong on a set share of the groups. It stands in for a strong remote judge that does
not run here; it is named for what it is in every figure it produces.

    benches/sim_frontier.py --port 8766 --error-rate 0.05 evals/halueval_qa.jsonl ...

How it answers: the `<trajectory id="...">` sections of the prompt are matched to the labelled
group whose last assistant messages appear (as text or as a JSON string) one in each section (the most text matched wins). A
group is answered wrongly (its scores mirrored, so the worse trajectory ranks first) when a
hash of its row id and the seed falls under the error rate: the same group is wrong in every
order and on every run, as a real judge's systematic mistakes are. Right answers score 0.9 for label 1 and
0.1 for label 0 (in between for other labels). Prompt tokens are counted as characters / 4: an
estimate, said so wherever the figure is used. Python 3 standard library only.
"""

import argparse
import hashlib
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def last_assistant(traj):
    texts = [m.get("content") or "" for m in traj.get("messages", []) if m.get("role") == "assistant"]
    return texts[-1] if texts else ""


def load(paths):
    """[(row id, [(answer text, label)], min label, max label)]."""
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                labels = [float(x) for x in row["labels"]]
                answers = [last_assistant(t).strip() for t in row["trajectories"]]
                rows.append((row.get("id") or f"{path}:{n}", list(zip(answers, labels)),
                             min(labels), max(labels)))
    return rows


def match(rows, bodies):
    """The row whose answers appear one in each section, and the label of each section: the
    row with the most answer text matched wins (short answers such as "Yes" occur in many)."""
    best, best_len = None, -1
    for rid, answers, lo, hi in rows:
        if len(answers) != len(bodies):
            continue
        free, labels, total = set(range(len(bodies))), [None] * len(bodies), 0
        # Longest answers first, each to the first free section that holds it.
        for text, label in sorted(answers, key=lambda a: -len(a[0])):
            # The prompt carries each trajectory as JSON lines: the answer as a JSON string, with
            # &, < and > escaped as \u0026, \u003c, \u003e (tags in it stay text).
            quoted = json.dumps(text, ensure_ascii=False)[1:-1]
            for ch in "&<>":
                quoted = quoted.replace(ch, "\\u%04x" % ord(ch))
            k = next((k for k in sorted(free) if text and (text in bodies[k] or quoted in bodies[k])), None)
            if k is None:
                break
            free.discard(k)
            labels[k] = label
            total += len(text)
        else:
            if total > best_len:
                best, best_len = (rid, labels, lo, hi), total
    return best


def sections(prompt):
    out, rest = [], prompt
    while True:
        start = rest.find('<trajectory id="')
        if start < 0:
            return out
        after = rest[start + 16:]
        q = after.find('"')
        end = after.find("</trajectory>")
        end = len(after) if end < 0 else end
        out.append((after[:q], after[q:end]))
        rest = after[end:]


def wrong(rid, seed, rate):
    h = hashlib.sha256(f"{seed}:{rid}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < rate


class Judge(BaseHTTPRequestHandler):
    index, seed, rate = [], 0, 0.05
    calls = 0

    def log_message(self, *_):
        pass

    def send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self.send(200, {"object": "list", "data": [{"id": "sim-frontier", "object": "model"}]})
        else:
            self.send(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        prompt = next((m.get("content") or "" for m in req.get("messages", []) if m.get("role") == "user"), "")
        secs = sections(prompt)
        hit = match(self.index, [body for _, body in secs])
        if hit is None:
            self.send(400, {"error": {"message": "no labelled group has these answers", "type": "invalid_request_error"}})
            return
        rid, labels, lo, hi = hit
        scores = []
        for (tid, _), label in zip(secs, labels):
            x = 0.5 if hi == lo else (label - lo) / (hi - lo)
            if wrong(rid, self.seed, self.rate):
                x = 1.0 - x
            scores.append({"trajectory_id": tid, "explanation": "simulated from the labels", "score": round(0.1 + 0.8 * x, 4)})
        Judge.calls += 1
        system = "".join(m.get("content") or "" for m in req.get("messages", []) if m.get("role") != "user")
        tokens = (len(system) + len(prompt)) // 4
        content = json.dumps({"scores": scores})
        self.send(200, {
            "id": f"chatcmpl-sim-{Judge.calls}", "object": "chat.completion", "created": 0,
            "model": req.get("model", "sim-frontier"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": len(content) // 4,
                      "total_tokens": tokens + len(content) // 4},
        })


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--error-rate", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("rows", nargs="+", help="labelled eval files whose groups it may be asked")
    a = ap.parse_args()
    Judge.index, Judge.seed, Judge.rate = load(a.rows), a.seed, a.error_rate
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Judge)
    print(f"sim-frontier: {len(Judge.index)} labelled groups, error rate {a.error_rate}, "
          f"http://127.0.0.1:{a.port}/v1", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
