"""serve_compare.py URL NAME [STREAMS] [N_GEN] - drives a running OpenAI-compatible server
(`edgerunner serve` or `llama-server`) with S concurrent streamed greedy completions of
N_GEN tokens (S in STREAMS, default "1 8 32 64"; N_GEN 128) and prints one markdown row
per S: aggregate generated tokens per second of wall time and the median time to first
token. Standard library only (the GPU machine has no package index); run through
bench/serve_compare.sh, which starts each server in turn on the same file."""
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

URL, NAME = sys.argv[1], sys.argv[2]
STREAMS = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "1 8 32 64").split()]
N_GEN = int(sys.argv[4]) if len(sys.argv) > 4 else 128
host = urllib.parse.urlparse(URL)


def complete(prompt):
    """(seconds to the first token, generated tokens) of one streamed greedy completion."""
    body = json.dumps({"prompt": prompt, "max_tokens": N_GEN, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, chunks, usage = None, 0, None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: {"):
            continue
        msg = json.loads(line[6:])
        usage = msg.get("usage") or usage
        for ch in msg.get("choices", []):
            if ch.get("text"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - t0
    conn.close()
    n = (usage or {}).get("completion_tokens") or chunks
    return (first if first is not None else time.perf_counter() - t0), n


def run(streams):
    results = [None] * streams

    def one(i):
        results[i] = complete(f"Request {i} of {streams}: tell a long story about the number {i * 7 + 3}.")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[1] for r in results)
    return tokens / wall, statistics.median(r[0] for r in results), tokens


complete("Warm up.")
for s in STREAMS:
    tps, ttft, tokens = run(s)
    print(f"| {NAME} | {s} | {tps:,.0f} | {ttft * 1000:.0f} | {tokens} |", flush=True)
