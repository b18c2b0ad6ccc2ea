#!/usr/bin/python3
"""Load test of OpenAI-compatible chat servers (clade serve, llama.cpp's
llama-server) with Python's standard library only.

N chat requests, C at a time, share one system prompt of about P tokens,
each with its own question, and ask for M new tokens each (streamed, with
ignore_eos so every answer has M tokens). Reported per server and round:
requests/s, output tokens/s (all answers' tokens over the round's wall
time), time to first token and latency (p50, p99), and the reused-prefix
fraction: from clade's /metrics (prompt tokens reused over prompt tokens),
and from the answers' usage.prompt_tokens_details.cached_tokens where a
server gives it.

Targets are servers already running (--target NAME=URL) or commands this
script starts and stops itself (--launch NAME='COMMAND', {port} replaced by
a free port; ready when /health answers 200). With several targets and
--rounds R, the targets run alternately, R times each, in one run; each
round's system prompt starts with its own tag, so no server finds it cached
from an earlier round. Loopback addresses only; bounded by --requests
(at most 4096) and --max-seconds (the whole run).

  python3 bench/serve_load.py --launch clade='build/tools/clade/clade serve -m M --port {port} --parallel 64' \\
      --launch llama='llama-server -m M --port {port} -np 64 -c 81920' --requests 64 --concurrency 64 \\
      --system-tokens 1000 --max-tokens 128 --rounds 2 --csv out.csv
"""
import argparse
import http.client
import json
import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def die(msg):
    sys.exit("serve_load: " + msg)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Target:
    def __init__(self, name, url=None, command=None, log_dir="."):
        self.name, self.command, self.proc = name, command, None
        self.log_path = os.path.join(log_dir, "serve_load-%s.log" % name)
        if url:
            self.set_url(url)

    def set_url(self, url):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or u.hostname not in LOOPBACK:
            die("%s: only http:// on a loopback address (%s)" % (self.name, url))
        self.host, self.port = u.hostname, u.port or 80

    def request(self, method, path, body=None, timeout=30):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        c.request(method, path, body=None if body is None else json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def start(self, deadline):
        if not self.command:
            return
        port = free_port()
        self.set_url("http://127.0.0.1:%d" % port)
        cmd = self.command.replace("{port}", str(port))
        log = open(self.log_path, "a")
        log.write("\n$ %s\n" % cmd)
        log.flush()
        self.proc = subprocess.Popen(shlex.split(cmd), stdout=log, stderr=subprocess.STDOUT)
        while time.time() < deadline:
            if self.proc.poll() is not None:
                die("%s exited with %s before it was ready (see %s)" % (self.name, self.proc.returncode,
                                                                         self.log_path))
            try:
                st, _ = self.request("GET", "/health", timeout=2)
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        die("%s not ready before the deadline" % self.name)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def metrics(self):
        """clade's counters (name -> value); {} where /metrics is absent or another format."""
        try:
            st, data = self.request("GET", "/metrics", timeout=10)
        except OSError:
            return {}
        out = {}
        if st == 200:
            for line in data.decode("utf-8", "replace").splitlines():
                m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*) ([-+0-9.eE]+|NaN)$", line)
                if m:
                    out[m.group(1)] = float(m.group(2))
        return out


def words_from(path):
    if path and os.path.exists(path):
        text = open(path, encoding="utf-8", errors="replace").read()
        w = text.split()
        if len(w) > 100:
            return w
    return ("and it came to pass in those days that there went out a decree from the king that all the land "
            "should be taxed and every one went into his own city").split()


def make_system(words, n_words, tag, rng):
    start = rng.randrange(0, max(1, len(words) - n_words))
    body = words[start:start + n_words]
    while len(body) < n_words:
        body += words[:n_words - len(body)]
    return "Session %s. You answer questions about this text. %s" % (tag, " ".join(body))


def one_request(t, system, question, args, out):
    body = {"model": "default", "messages": [{"role": "system", "content": system},
                                             {"role": "user", "content": question}],
            "max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True,
            "ignore_eos": True, "seed": 1, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    rec = {"ttft": None, "latency": None, "tokens": 0, "chunks": 0, "prompt": None, "cached": None, "error": None}
    try:
        c = http.client.HTTPConnection(t.host, t.port, timeout=args.request_timeout)
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = "status %d: %s" % (r.status, r.read()[:200])
        else:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                for ch in ev.get("choices") or []:
                    if (ch.get("delta") or {}).get("content"):
                        if rec["ttft"] is None:
                            rec["ttft"] = time.perf_counter() - t0
                        rec["chunks"] += 1
                u = ev.get("usage")
                if u:
                    rec["tokens"] = u.get("completion_tokens", 0)
                    rec["prompt"] = u.get("prompt_tokens")
                    rec["cached"] = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
                t_ = ev.get("timings")  # llama-server: prompt tokens taken from its cache
                if t_ and rec["cached"] is None and "cache_n" in t_:
                    rec["cached"] = t_["cache_n"]
        c.close()
    except (OSError, ValueError) as e:
        rec["error"] = repr(e)
    rec["latency"] = time.perf_counter() - t0
    if not rec["tokens"]:
        rec["tokens"] = rec["chunks"]  # a server without usage: one chunk per token
    out.append(rec)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_round(t, args, words, tag, deadline):
    rng = random.Random(tag)
    system = make_system(words, args.system_words, tag, rng)
    qs = ["Question %d: what does the text say about %s?" % (i, rng.choice(words)) for i in range(args.requests)]
    before = t.metrics()
    results, lock, next_i = [], threading.Lock(), [0]

    def worker():
        while time.time() < deadline:
            with lock:
                i = next_i[0]
                if i >= len(qs):
                    return
                next_i[0] += 1
            one_request(t, system, qs[i], args, results)

    t0 = time.perf_counter()
    ths = [threading.Thread(target=worker) for _ in range(min(args.concurrency, args.requests))]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    wall = time.perf_counter() - t0
    after = t.metrics()
    ok = [r for r in results if not r["error"]]
    errors = [r["error"] for r in results if r["error"]]
    tokens = sum(r["tokens"] for r in ok)
    row = {"target": t.name, "round": tag, "requests": len(ok), "errors": len(errors), "wall_s": wall,
           "req_per_s": len(ok) / wall, "out_tok_per_s": tokens / wall, "out_tokens": tokens,
           "ttft_p50": pct([r["ttft"] for r in ok if r["ttft"] is not None], 50),
           "ttft_p99": pct([r["ttft"] for r in ok if r["ttft"] is not None], 99),
           "lat_p50": pct([r["latency"] for r in ok], 50), "lat_p99": pct([r["latency"] for r in ok], 99),
           "prompt_tokens": ok[0]["prompt"] if ok else None}
    k_reused, k_eval = "clade_prompt_tokens_reused_total", "clade_prompt_tokens_total"
    if k_reused in after and k_reused in before:
        reused = after[k_reused] - before[k_reused]
        total = reused + after[k_eval] - before[k_eval]
        row["reused_metrics"] = reused / total if total else float("nan")
        row["prompt_evaluated"], row["prompt_reused"] = int(total - reused), int(reused)
    else:
        row["reused_metrics"] = float("nan")
        row["prompt_evaluated"] = row["prompt_reused"] = ""
    cached = [r for r in ok if r["cached"] is not None and r["prompt"]]
    row["reused_usage"] = (sum(r["cached"] for r in cached) / sum(r["prompt"] for r in cached)
                           if cached else float("nan"))
    if errors:
        print("  %s: %d errors, first: %s" % (t.name, len(errors), errors[0]), file=sys.stderr)
    return row


COLS = ["target", "round", "requests", "errors", "wall_s", "req_per_s", "out_tok_per_s", "out_tokens",
        "ttft_p50", "ttft_p99", "lat_p50", "lat_p99", "prompt_tokens", "reused_metrics", "reused_usage",
        "prompt_evaluated", "prompt_reused"]


def fmt(v):
    if isinstance(v, float):
        return "%.3f" % v
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", default=[], metavar="NAME=URL")
    ap.add_argument("--launch", action="append", default=[], metavar="NAME=COMMAND")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--system-tokens", type=int, default=1000, help="about this many (calibrated on the first target)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--text", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                                                   "kjv-heldout.txt"), help="where the prompts' words come from")
    ap.add_argument("--max-seconds", type=float, default=1800)
    ap.add_argument("--request-timeout", type=float, default=600)
    ap.add_argument("--csv", help="write the rows here too")
    ap.add_argument("--log-dir", default=".", help="where launched servers' logs go")
    args = ap.parse_args()
    if not 1 <= args.requests <= 4096:
        die("--requests must be 1 to 4096")
    if not 1 <= args.concurrency <= 1024:
        die("--concurrency must be 1 to 1024")
    if not 1 <= args.rounds <= 20 or args.max_tokens < 1 or args.system_tokens < 0:
        die("--rounds 1..20, --max-tokens >= 1, --system-tokens >= 0")
    targets = []
    for spec in args.target:
        name, _, url = spec.partition("=")
        targets.append(Target(name, url=url))
    for spec in args.launch:
        name, _, cmd = spec.partition("=")
        if "{port}" not in cmd:
            die("--launch %s: the command needs {port}" % name)
        targets.append(Target(name, command=cmd, log_dir=args.log_dir))
    if not targets:
        die("give at least one --target NAME=URL or --launch NAME=COMMAND")
    deadline = time.time() + args.max_seconds
    words = words_from(args.text)

    # Calibrate the system prompt's length in words on the first target.
    t = targets[0]
    t.start(deadline)
    args.system_words = max(1, args.system_tokens * 3 // 4)
    if args.system_tokens > 0:
        for _ in range(3):
            system = make_system(words, args.system_words, "calibration", random.Random(0))
            st, data = t.request("POST", "/v1/chat/completions", {
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": "?"}],
                "max_tokens": 1}, timeout=args.request_timeout)
            if st != 200:
                die("calibration on %s: %d %s" % (t.name, st, data[:300]))
            n = json.loads(data)["usage"]["prompt_tokens"]
            if abs(n - args.system_tokens) < args.system_tokens * 0.03:
                break
            args.system_words = max(1, int(args.system_words * args.system_tokens / max(n, 1)))
    t.stop()

    rows = []
    print("  ".join(COLS))
    run_id = "%x" % random.getrandbits(32)
    for rnd in range(args.rounds):
        for t in targets:
            if time.time() > deadline:
                print("deadline reached", file=sys.stderr)
                break
            t.start(deadline)
            try:
                row = run_round(t, args, words, "%s-%d" % (run_id, rnd), deadline)
            finally:
                t.stop()
            rows.append(row)
            print("  ".join(fmt(row[c]) for c in COLS), flush=True)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(",".join(COLS) + "\n")
            for r in rows:
                f.write(",".join(fmt(r[c]) for c in COLS) + "\n")
    if len(targets) > 1:
        print("\nmedians over rounds, and each target's out_tok_per_s over the first target's (per round):")
        first = targets[0].name
        for t in targets:
            mine = [r for r in rows if r["target"] == t.name]
            if not mine:
                continue
            ratios = [r["out_tok_per_s"] / f["out_tok_per_s"] for r, f in
                      zip(mine, [r for r in rows if r["target"] == first]) if f["out_tok_per_s"] > 0]
            print("%-10s out_tok/s %.1f  req/s %.3f  ttft p50 %.2f s p99 %.2f s  latency p50 %.2f s p99 %.2f s  "
                  "reused %.3f  ratio to %s %s" % (
                      t.name, statistics.median(r["out_tok_per_s"] for r in mine),
                      statistics.median(r["req_per_s"] for r in mine),
                      statistics.median(r["ttft_p50"] for r in mine), statistics.median(r["ttft_p99"] for r in mine),
                      statistics.median(r["lat_p50"] for r in mine), statistics.median(r["lat_p99"] for r in mine),
                      statistics.median(r["reused_metrics"] if r["reused_metrics"] == r["reused_metrics"]
                                        else r["reused_usage"] for r in mine),
                      first, " ".join("%.2f" % x for x in ratios)))


if __name__ == "__main__":
    main()
