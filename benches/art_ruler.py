#!/usr/bin/env python3
"""Runs OpenPipe ART's RULER on the benchmark groups, with the judge pointed at gavel's mock judge.

Started by `cargo bench --bench compare_art` (see benches/compare_art.sh), which owns the mock
judge, records the request each RULER call sends, and replays it to time the raw HTTP call. This
script only calls ART's public API and times each call; it contains no ART code.

    art_ruler.py --api-base http://127.0.0.1:PORT/v1 --model art-ruler \
                 --groups benches/data/groups.jsonl --rounds 3 --out results.jsonl

For every round, for every group in file order, it calls `art.rewards.ruler_score_group` once
and writes one JSON line to --out: {"round", "id", "kind", "seconds", "scores"}. Before the
rounds it makes one warm-up call on the first group (written with "round": -1), so litellm's lazy
imports and connection setup are not counted. Calls are sequential: the i-th line belongs to the
i-th request the mock judge records with this model name.

Only 127.0.0.1 is ever contacted: litellm is told to use its bundled model-cost map, and an audit
hook refuses any socket connection or name lookup that is not for the loopback address.
"""

import argparse
import asyncio
import ipaddress
import json
import os
import sys
import time

# litellm fetches a model-cost map from the internet at import time unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("LITELLM_LOG", "ERROR")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WEAVE_DISABLED", "true")
os.environ.setdefault("DISABLE_AIOHTTP_TRANSPORT", "True")
for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ.pop(proxy, None)

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", None}


def _is_loopback(host):
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_only(event, args):
    if event == "socket.getaddrinfo" and not _is_loopback(args[0]):
        raise ConnectionRefusedError(f"art_ruler.py: refusing name lookup of {args[0]!r} (loopback only)")
    if event == "socket.connect":
        addr = args[1]
        if isinstance(addr, tuple) and not _is_loopback(addr[0]):
            raise ConnectionRefusedError(f"art_ruler.py: refusing connection to {addr!r} (loopback only)")


sys.addaudithook(_loopback_only)

import art  # noqa: E402
from art.rewards import ruler_score_group  # noqa: E402


def load_groups(path):
    groups = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                groups.append(json.loads(line))
    return groups


def art_group(g):
    """The group as ART's training loop holds it: one art.Trajectory per rollout."""
    tools = g.get("tools")
    return art.TrajectoryGroup(
        art.Trajectory(messages_and_choices=t["messages"], tools=tools, reward=0.0)
        for t in g["trajectories"]
    )


async def score(g, args):
    group = art_group(g)
    start = time.perf_counter()
    out = await ruler_score_group(
        group,
        judge_model=f"openai/{args.model}",
        extra_litellm_params={"api_base": args.api_base, "api_key": "sk-mock-art"},
    )
    seconds = time.perf_counter() - start
    if out is None:
        raise RuntimeError(f"ruler_score_group returned None for {g['id']}")
    return seconds, [t.reward for t in out.trajectories]


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api-base", required=True)
    p.add_argument("--model", default="art-ruler")
    p.add_argument("--groups", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if not _is_loopback(args.api_base.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]):
        sys.exit("art_ruler.py: --api-base must be a loopback address")
    groups = load_groups(args.groups)
    # Build each group once outside the timed region too, so pydantic's first-use costs are paid.
    for g in groups:
        art_group(g)
    with open(args.out, "w", encoding="utf-8") as out:
        def write(rnd, g, seconds, scores):
            out.write(json.dumps({"round": rnd, "id": g["id"], "kind": g["kind"],
                                 "seconds": seconds, "scores": scores}) + "\n")
            out.flush()

        seconds, scores = await score(groups[0], args)
        write(-1, groups[0], seconds, scores)
        for rnd in range(args.rounds):
            for g in groups:
                seconds, scores = await score(g, args)
                write(rnd, g, seconds, scores)
    import importlib.metadata as md

    print(f"art_ruler.py: openpipe-art {md.version('openpipe-art')}, litellm {md.version('litellm')}: "
          f"{len(groups)} groups x {args.rounds} rounds scored", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
