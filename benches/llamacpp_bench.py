"""llama.cpp (llama-cpp-python) on the same GGUF and the same prompt as benches/local_judge.rs,
then the two side by side. Run by benches/local_vs_llamacpp.sh; by hand:

    python benches/llamacpp_bench.py MODEL.gguf target/bench-local/prompt.txt target/bench-local/candle.json

Prefill: the whole prompt evaluated on an empty context (n_batch 512). Decode: greedy
single-token steps after it. Group: prefill plus as many greedy tokens as gavel's constrained
verdict for the group took (llama.cpp does no constraint work here). Best of 3 for each, as in
the Rust bench. Threads: all cores, as candle's default.
"""
import json
import os
import sys
import time

from llama_cpp import Llama

DECODE_STEPS = 64
REPEATS = 3


def main():
    model, prompt_path, candle_path = sys.argv[1:4]
    ours = json.load(open(candle_path))
    prompt = open(prompt_path, encoding="utf-8").read()
    threads = os.cpu_count()
    t0 = time.perf_counter()
    llm = Llama(model_path=model, n_ctx=8192, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    load = time.perf_counter() - t0
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)

    def prefill():
        llm.reset()
        t = time.perf_counter()
        llm.eval(tokens)
        return time.perf_counter() - t

    def decode(n):
        t = time.perf_counter()
        for _ in range(n):
            tok = llm.sample(temp=0.0)
            llm.eval([tok])
        return time.perf_counter() - t

    llm.eval(tokens[:16])  # warm-up
    prefills, decodes, groups = [], [], []
    verdict_tokens = int(ours.get("group_completion_tokens") or DECODE_STEPS)
    for _ in range(REPEATS):
        prefills.append(prefill())
        decodes.append(decode(DECODE_STEPS))
        groups.append(prefill() + decode(verdict_tokens))
    theirs = {
        "engine": "llama.cpp (llama-cpp-python)",
        "threads": threads,
        "load_s": load,
        "prompt_tokens": len(tokens),
        "prefill_s": min(prefills),
        "prefill_tok_s": len(tokens) / min(prefills),
        "decode_tok_s": DECODE_STEPS / min(decodes),
        "group_s": min(groups),
        "group_tokens": verdict_tokens,
    }
    print(json.dumps(theirs, indent=2))
    rows = [
        ("prompt tokens", ours["prompt_tokens"], theirs["prompt_tokens"], None),
        ("prefill tok/s", ours["prefill_tok_s"], theirs["prefill_tok_s"], True),
        ("decode tok/s", ours["decode_tok_s"], theirs["decode_tok_s"], True),
        ("time per group, s", ours["group_cold_s"], theirs["group_s"], False),
    ]
    print(f"\n| {'':18} | gavel (candle) | llama.cpp | gavel / llama.cpp |")
    print("|---|---:|---:|---:|")
    for name, a, b, higher_better in rows:
        ratio = "" if higher_better is None else f"{a / b:.2f}"
        print(f"| {name} | {a:.1f} | {b:.1f} | {ratio} |")
    print(f"\nfour orders of the group through gavel: {ours['four_orders_s']:.1f} s, "
          f"{ours['four_orders_new_calls']} new calls, {ours['four_orders_cached_prompt_tokens']} of "
          f"{ours['four_orders_prompt_tokens']} prompt tokens reused from the prefix cache")
    print(f"CPU features: {' '.join(ours.get('cpu_features', []))}")
    modes = ours.get("modes") or {}
    if modes:
        base = modes["listwise"]["group_s"]
        print("\n| judging mode, one cold group | s | × listwise | judge calls | prefilled | reused | forward passes |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, m in modes.items():
            print(f"| {name} | {m['group_s']:.1f} | {m['group_s'] / base:.2f} | {m['judge_calls']} | "
                  f"{m['prefilled_tokens']} | {m['reused_tokens']} | {m['forward_passes']} |")


if __name__ == "__main__":
    main()
