#!/usr/bin/python3
"""`clade serve` end to end, with Python's standard library only.

usage: test_serve.py CLADE_CLI SOURCE_ROOT

Writes a small random model with the trained model's vocabulary and the
ChatML template, starts three servers on free loopback ports (one plain,
one with an API key and small limits, one with one sequence slot and a
queue of one) and checks: every endpoint, greedy results equal alone and
in a concurrent batch, streaming equal to the whole answer, n samples, stop
strings, log-probabilities (the model's distribution before the sampler's
truncation: N alternatives, descending, the same at any temperature), a
client closing its stream mid-answer and clients without stream closing
their connections (cancelled at the next step, the server still
answering), a table of bad requests each with its status, field and
message, the API key (401), the limits (400 naming each, 413 for the
body), a full queue (429 with Retry-After), the /metrics histograms
(time to first token, queue time, inter-token time: their counts those of
the requests served), prefix reuse of a shared system prompt in /metrics,
/health answering throughout, the README's curl command and Python client,
and SIGTERM: a drain where running and queued requests finish and new ones
get 503, then exit 0; past --drain-timeout, the streams left end with an
error event. Exits 1 after all checks when one failed, naming each.
"""
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

CLI, ROOT = sys.argv[1], sys.argv[2]
failures = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    failures.append(msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


class Server:
    def __init__(self, model, *flags):
        self.proc = subprocess.Popen([CLI, "serve", "-m", model, "--port", "0", "--threads", "2", *flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        line = self.proc.stderr.readline()
        self.log.append(line)
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            sys.exit("FAIL: the server did not start: " + line + self.proc.stderr.read())
        self.host, self.port = m.group(1), int(m.group(2))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60, with_headers=False):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        if with_headers:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        return r.status, r.getheader("Content-Type") or "", data

    def post(self, path, body, **kw):
        st, ct, data = self.request("POST", path, body, **kw)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, {"raw": data.decode("utf-8", "replace")}

    def stream(self, path, body):
        """The parsed events of a streamed answer, and whether it ended with [DONE]."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=60)
        c.request("POST", path, body=json.dumps(dict(body, stream=True)), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        check(r.status == 200, "stream %s: status %d" % (path, r.status))
        check((r.getheader("Content-Type") or "").startswith("text/event-stream"),
              "stream: Content-Type %s" % r.getheader("Content-Type"))
        events, done = [], False
        for raw in r:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            events.append(json.loads(line[6:]))
        c.close()
        return events, done

    def metrics(self, headers=None):
        st, ct, data = self.request("GET", "/metrics", headers=headers)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.split(" ")
                out[name] = float(value)
        return out

    def open_raw(self, path, body):
        """A request sent on a socket of its own (closed by the caller), without reading the answer."""
        sock = socket.create_connection((self.host, self.port), timeout=30)
        data = json.dumps(body)
        sock.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n%s" % (path, len(data), data)).encode())
        return sock

    def wait_metrics(self, cond, seconds=20, headers=None):
        """/metrics until cond(metrics) holds (for at most `seconds`); the last metrics read."""
        deadline = time.time() + seconds
        while True:
            m = self.metrics(headers)
            if cond(m) or time.time() > deadline:
                return m
            time.sleep(0.02)

    def wait_log(self, part, seconds=10):
        deadline = time.time() + seconds
        while not any(part in line for line in self.log) and time.time() < deadline:
            time.sleep(0.01)
        return any(part in line for line in self.log)

    def stop(self, sig=signal.SIGTERM, send=True, seconds=10):
        if send:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after %d s" % seconds
        time.sleep(0.1)
        return rc, "".join(self.log)


def histogram(m, name):
    """A /metrics histogram: ([(le, cumulative count)], sum, count)."""
    buckets = [(float(k[len(name) + 12:-2]), v) for k, v in m.items() if k.startswith(name + '_bucket{le="')]
    return sorted(buckets), m.get(name + "_sum"), m.get(name + "_count")


def main():
    tmp = tempfile.mkdtemp(prefix="clade-serve-")
    model = os.path.join(tmp, "m.gguf")
    vocab = os.path.join(ROOT, "models", "kjv-target-f16.gguf")
    subprocess.run([CLI, "model", "random", "-o", model, "--layers", "2", "--dim", "64", "--heads", "4",
                    "--kv-heads", "2", "--ff", "128", "--type", "f16", "--vocab-from", vocab,
                    "--chat-template", "chatml"], check=True, stdout=subprocess.DEVNULL)
    s = Server(model, "--parallel", "4", "--ctx", "4096", "--drain-timeout", "0.2")
    # 96K of KV: 384 tokens of this model (2 layers, 2 KV heads of 16, f16)
    keyed = Server(model, "--parallel", "2", "--ctx", "512", "--api-key", "sekret", "--max-body", "4K",
                   "--kv-budget", "96K", "--max-prompt-tokens", "480", "--max-n", "1", "--max-tokens-limit", "32")
    # one sequence slot, a queue of one, the default drain timeout
    q = Server(model, "--parallel", "1", "--max-queue", "1", "--ctx", "4096", "--verbose")

    # /health is polled throughout; every answer must be 200.
    health = {"ok": 0, "bad": []}
    polling = threading.Event()
    polling.set()

    def poll():
        while polling.is_set():
            try:
                st, ct, data = s.request("GET", "/health", timeout=5)
                if st == 200 and json.loads(data) == {"status": "ok"}:
                    health["ok"] += 1
                else:
                    health["bad"].append((st, data))
            except Exception as e:  # noqa: BLE001 (a refused or timed-out poll is the failure)
                health["bad"].append(repr(e))
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()

    # ---- endpoints
    st, ct, data = s.request("GET", "/v1/models")
    models = json.loads(data)
    check(st == 200 and models["object"] == "list" and models["data"][0]["id"], "/v1/models: %d %s" % (st, data))
    m0 = s.metrics()
    for name in ["clade_requests_total", "clade_requests_queued", "clade_sequences_live",
                 "clade_prompt_tokens_per_second", "clade_decode_tokens_per_second",
                 "clade_prompt_tokens_reused_total", "clade_kv_used_bytes"]:
        check(name in m0, "/metrics has no " + name)

    base = {"prompt": "In the beginning God created", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    st, r = s.post("/v1/completions", base)
    check(st == 200, "completions: %d %s" % (st, r))
    greedy = r["choices"][0]["text"]
    check(r["object"] == "text_completion" and r["choices"][0]["finish_reason"] == "length",
          "completions: object/finish_reason %s" % r)
    check(r["usage"]["completion_tokens"] == 12 and r["usage"]["prompt_tokens"] > 0, "completions usage %s" % r)
    st, r2 = s.post("/v1/completions", base)
    check(r2["choices"][0]["text"] == greedy, "greedy twice: %r != %r" % (r2["choices"][0]["text"], greedy))
    # (greedy without logprobs takes each step's argmax; with them, the
    # sampler reads the logits: the same text)
    st, r3 = s.post("/v1/completions", dict(base, logprobs=0))
    check(st == 200 and r3["choices"][0]["text"] == greedy,
          "greedy from the logits: %r != %r" % (r3["choices"][0]["text"], greedy))
    reuse = "prefix cache on" in s.log[0]
    if not reuse:
        print("note: this library has no clade_tree_append_prefix: the prefix reuse checks are skipped")
    check(not reuse or r2["usage"]["prompt_tokens_details"]["cached_tokens"] == r2["usage"]["prompt_tokens"] - 1,
          "the same prompt again reuses all its tokens but the last: %s" % r2["usage"])

    # a seed gives the same sample; n samples of one prompt are different streams
    samp = dict(base, temperature=0.9, seed=7, n=3)
    st, a = s.post("/v1/completions", samp)
    st, b = s.post("/v1/completions", samp)
    texts = [c["text"] for c in a["choices"]]
    check(st == 200 and len(texts) == 3 and [c["index"] for c in a["choices"]] == [0, 1, 2], "n=3: %s" % a)
    check(texts == [c["text"] for c in b["choices"]], "seed 7 twice: %s / %s" % (a, b))
    check(len(set(texts)) > 1, "n=3 samples all equal: %s" % texts)
    check(a["usage"]["completion_tokens"] == 36, "n=3 usage: %s" % a["usage"])

    # streaming gives the same text, piece by piece, then [DONE]
    events, done = s.stream("/v1/completions", base)
    check(done, "completions stream: no [DONE]")
    check("".join(e["choices"][0]["text"] for e in events) == greedy, "stream text != whole text")
    check(events[-1]["choices"][0]["finish_reason"] == "length" and
          all(e["choices"][0]["finish_reason"] is None for e in events[:-1]), "stream finish_reason")

    # chat: whole and streamed, n = 2
    chat = {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}],
            "max_tokens": 10, "temperature": 0, "ignore_eos": True, "n": 2}
    st, c = s.post("/v1/chat/completions", chat)
    check(st == 200 and c["object"] == "chat.completion" and len(c["choices"]) == 2, "chat: %d %s" % (st, c))
    answer = c["choices"][0]["message"]["content"]
    check(c["choices"][0]["message"]["role"] == "assistant" and c["choices"][1]["message"]["content"] == answer,
          "chat greedy n=2: %s" % c)
    events, done = s.stream("/v1/chat/completions", dict(chat, stream_options={"include_usage": True}))
    check(done, "chat stream: no [DONE]")
    by = {0: "", 1: ""}
    roles = set()
    for e in events:
        for ch in e["choices"]:
            by[ch["index"]] += ch["delta"].get("content", "")
            if "role" in ch["delta"]:
                roles.add(ch["index"])
    check(by[0] == answer and by[1] == answer, "chat stream %r != %r" % (by, answer))
    check(roles == {0, 1}, "chat stream: the role delta of each choice")
    check(events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 20,
          "chat stream: the usage chunk %s" % events[-1])

    # stop strings: cut before the earliest match, finish_reason stop
    if len(greedy) > 6:
        stop = greedy[3:6]
        st, r = s.post("/v1/completions", dict(base, stop=[stop, "zzzzqq"]))
        want = greedy[:greedy.find(stop)]
        check(r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop",
              "stop %r: %r, want %r" % (stop, r["choices"][0], want))
        events, done = s.stream("/v1/completions", dict(base, stop=stop))
        check("".join(e["choices"][0]["text"] for e in events) == want, "stream with stop string")

    # logprobs: the log-softmax of the model's row, before the sampler's
    # truncation (greedy keeps one token: its distribution says nothing)
    st, r = s.post("/v1/completions", dict(base, logprobs=2))
    lp = r["choices"][0]["logprobs"]
    check(st == 200 and r["choices"][0]["text"] == greedy, "completions logprobs: the greedy text %s" % r)
    check(len(lp["tokens"]) == 12 and len(lp["token_logprobs"]) == 12 and "".join(lp["tokens"]).endswith(greedy[-3:])
          and all(1 <= len(t) <= 2 for t in lp["top_logprobs"]), "completions logprobs: %s" % lp)
    for tok, tlp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        check(tlp < 0 and max(top.values()) == tlp and sum(math.exp(v) for v in top.values()) <= 1 + 1e-6,
              "completions logprobs at temperature 0: %r %g %s" % (tok, tlp, top))
    lchat = dict(chat, n=1, logprobs=True, top_logprobs=3)
    st, r = s.post("/v1/chat/completions", lchat)
    content = r["choices"][0]["logprobs"]["content"]
    check(st == 200 and len(content) == 10, "chat logprobs: %s" % r)
    for t in content:
        top = t["top_logprobs"]
        lps = [a["logprob"] for a in top]
        check(len(top) == 3 and lps == sorted(lps, reverse=True) and top[0]["bytes"] == t["bytes"] and
              top[0]["logprob"] == t["logprob"] and t["logprob"] < 0 and
              len({tuple(a["bytes"]) for a in top}) == 3 and sum(math.exp(v) for v in lps) <= 1 + 1e-6,
              "chat top_logprobs 3 at temperature 0: %s" % t)
    # independent of the sampler: temperature 1.5 truncated to the top
    # token (top_k 1) samples the same tokens with the same numbers
    st, r2 = s.post("/v1/chat/completions", dict(lchat, temperature=1.5, top_k=1, seed=1))
    check(st == 200 and r2["choices"][0]["logprobs"]["content"] == content,
          "top_logprobs with temperature 1.5, top_k 1 differ from greedy's: %s" % r2["choices"][0]["logprobs"])
    events, done = s.stream("/v1/chat/completions", lchat)
    streamed = [t for e in events for ch in e["choices"] if ch.get("logprobs") for t in ch["logprobs"]["content"]]
    check(done and streamed == content, "streamed logprobs differ: %s" % streamed[:2])
    # after the grammar's mask (stage 0): every alternative is a token the
    # grammar admits, and its row's probability is all theirs
    st, r = s.post("/v1/chat/completions", dict(lchat, grammar='root ::= "yes" | "no"', top_logprobs=5))
    if check(st == 200 and r["choices"][0]["message"]["content"] in ("yes", "no"),
             "grammar and logprobs: %s %s" % (st, r)):
        top = r["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        texts = [bytes(a["bytes"]).decode() for a in top]
        check(top and all(t and ("yes".startswith(t) or "no".startswith(t)) for t in texts) and
              (len(top) == 5 or abs(sum(math.exp(a["logprob"]) for a in top) - 1) < 1e-4),
              "the first token's alternatives under the grammar: %s" % top)

    # /metrics histograms: time to first token and queue time once per
    # request served, inter-token time once per token after a choice's first
    hist = ["clade_time_to_first_token_seconds", "clade_queue_time_seconds", "clade_inter_token_seconds"]
    before = s.metrics()
    served = [s.post("/v1/completions", base), s.post("/v1/chat/completions", dict(chat, max_tokens=12))]
    events, done = s.stream("/v1/completions", base)
    after = s.metrics()
    check(all(st == 200 for st, _ in served) and done, "the requests for the histograms: %s" % served)
    for name in hist:
        buckets, total, count = histogram(after, name)
        check(len(buckets) > 5 and buckets[-1][0] == math.inf and buckets[-1][1] == count and total is not None and
              total >= 0 and all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])) and
              ("# TYPE %s histogram" % name) in s.request("GET", "/metrics")[2].decode(),
              "/metrics histogram %s: %s sum %s count %s" % (name, buckets, total, count))
    d = {name: histogram(after, name)[2] - histogram(before, name)[2] for name in hist}
    check(d == {hist[0]: 3, hist[1]: 3, hist[2]: 11 + 2 * 11 + 11},
          "histogram counts for 3 requests (1 + 2 + 1 choices of 12 tokens): %s" % d)

    # concurrency: 7 requests on 4 slots (queued, admitted at step
    # boundaries); each greedy result equals the same request alone
    prompts = ["And God said", "Blessed are the meek", "The LORD is my shepherd", "In the beginning was",
               "Now the serpent", "And the earth was", "Let there be light"]
    alone = {}
    for p in prompts:
        st, r = s.post("/v1/completions", dict(base, prompt=p, max_tokens=20))
        alone[p] = r["choices"][0]["text"]
    together = {}

    def one(p):
        st, r = s.post("/v1/completions", dict(base, prompt=p, max_tokens=20))
        together[p] = r["choices"][0]["text"] if st == 200 else "status %d" % st

    ts = [threading.Thread(target=one, args=(p,)) for p in prompts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for p in prompts:
        check(together[p] == alone[p], "batched %r: %r, alone %r" % (p, together[p], alone[p]))

    # cancellation: a streaming client reads one event and closes
    before = s.metrics()
    sock = socket.create_connection((s.host, s.port), timeout=30)
    body = json.dumps(dict(base, stream=True, max_tokens=4000, temperature=0.8))
    sock.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = b""
    while b"data: " not in got:
        got += sock.recv(4096)
    sock.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        m = s.metrics()
        if m["clade_requests_cancelled_total"] > before["clade_requests_cancelled_total"] and \
                m["clade_sequences_live"] == 0:
            break
        time.sleep(0.05)
    check(m["clade_requests_cancelled_total"] == before["clade_requests_cancelled_total"] + 1,
          "a closed stream was not cancelled: %s" % m)
    check(m["clade_decode_tokens_total"] - before["clade_decode_tokens_total"] < 3999,
          "the cancelled request ran to its end")
    st, r = s.post("/v1/completions", base)
    check(st == 200 and r["choices"][0]["text"] == greedy, "after a cancellation: %d %s" % (st, r))

    # prefix reuse: two chats sharing a long system prompt
    system = " ".join(["And it came to pass in those days, that there went out a decree."] * 12)
    before = s.metrics()
    ask = lambda text: {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
                      "max_tokens": 4, "temperature": 0}
    st, r1 = s.post("/v1/chat/completions", ask("Who went out?"))
    st, r2 = s.post("/v1/chat/completions", ask("What was the decree?"))
    n1 = r1["usage"]["prompt_tokens"]
    m = s.metrics()
    reused = m["clade_prompt_tokens_reused_total"] - before["clade_prompt_tokens_reused_total"]
    check(n1 > 150 and (not reuse or r2["usage"]["prompt_tokens_details"]["cached_tokens"] > 150),
          "the second chat reused %s of %d tokens" % (r2["usage"]["prompt_tokens_details"], n1))
    check(not reuse or reused >= 150, "/metrics: %g prompt tokens reused (want the system prompt's, > 150)" % reused)

    # an answer's tokens stay cached too: a prompt that continues prompt +
    # answer (the next turn of a conversation) reuses them
    p1 = "In the beginning God created the heaven and the earth."
    st, r1 = s.post("/v1/completions", dict(base, prompt=p1, max_tokens=16))
    st, r2 = s.post("/v1/completions", dict(base, prompt=p1 + r1["choices"][0]["text"] + " And", max_tokens=2))
    check(not reuse or r2["usage"]["prompt_tokens_details"]["cached_tokens"] > r1["usage"]["prompt_tokens"] + 8,
          "prompt + answer again: %s reused, the prompt alone had %d tokens" % (
              r2["usage"]["prompt_tokens_details"], r1["usage"]["prompt_tokens"]))

    # ---- bad requests: (endpoint, body, headers, status, param, message part)
    C, H = "/v1/completions", "/v1/chat/completions"
    bad = [
        (C, '{"prompt": ', None, 400, "body", "malformed JSON"),
        (C, "[1, 2]", None, 400, "body", "JSON object"),
        (C, {"max_tokens": 3}, None, 400, "prompt", "'prompt' is required"),
        (C, {"prompt": 5}, None, 400, "prompt", "must be a string"),
        (C, {"prompt": [999999]}, None, 400, "prompt", "outside the vocabulary"),
        (C, {"prompt": [1, -1]}, None, 400, "prompt", "outside the vocabulary"),
        (C, {"prompt": "a", "max_tokens": "ten"}, None, 400, "max_tokens", "must be an integer"),
        (C, {"prompt": "a", "max_tokens": 0}, None, 400, "max_tokens", "at least 1"),
        (C, {"prompt": "a", "max_tokens": 100000}, None, 400, "max_tokens", "past the context"),
        (C, {"prompt": "a", "temperature": "hot"}, None, 400, "temperature", "must be a number"),
        (C, {"prompt": "a", "temperature": -1}, None, 400, "temperature", "between"),
        (C, {"prompt": "a", "top_p": 0}, None, 400, "top_p", "above 0"),
        (C, {"prompt": "a", "top_k": 1.5}, None, 400, "top_k", "must be an integer"),
        (C, {"prompt": "a", "presence_penalty": 9}, None, 400, "presence_penalty", "between"),
        (C, {"prompt": "a", "stop": 5}, None, 400, "stop", "string or a list"),
        (C, {"prompt": "a", "stop": [""]}, None, 400, "stop", "must not be empty"),
        (C, {"prompt": "a", "n": 0}, None, 400, "n", "between 1 and 4"),
        (C, {"prompt": "a", "n": 100}, None, 400, "n", "limit of 4 (--max-n)"),
        (C, {"prompt": "a", "stream": "yes"}, None, 400, "stream", "true or false"),
        (C, {"prompt": "a", "seed": "x"}, None, 400, "seed", "must be an integer"),
        (C, {"prompt": "a", "logprobs": 50}, None, 400, "logprobs", "between 0 and 20"),
        (C, {"prompt": "a", "logit_bias": {"abc": 1}}, None, 400, "logit_bias", "not a token id"),
        (C, {"prompt": "a", "model": 7}, None, 400, "model", "must be a string"),
        (C, {"prompt": ["a", "b"]}, None, 400, "prompt", "several prompts"),
        (H, {"messages": []}, None, 400, "messages", "must not be empty"),
        (H, {"messages": "hi"}, None, 400, "messages", "must be a list"),
        (H, {"prompt": "hi"}, None, 400, "messages", "'messages' is required"),
        (H, {"messages": [{"content": "hi"}]}, None, 400, "messages[0].role", "'role' must be a string"),
        (H, {"messages": [{"role": "user", "content": 5}]}, None, 400, "messages[0].content", "string or a list"),
        (H, {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, None, 400, "top_logprobs",
         "needs 'logprobs'"),
        (H, {"messages": [{"role": "user", "content": "hi"}], "logprobs": 2}, None, 400, "logprobs", "true or false"),
        (H, {"messages": [{"role": "user", "content": "x " * 5000}]}, None, 400, "messages", "the context is 4096"),
    ]
    bad.append((C, b'{"prompt": "\xff\xfe"}', None, 400, "body", "malformed JSON"))  # not UTF-8
    for ep, body, headers, status, param, part in bad:
        st, r = s.post(ep, body, headers=headers)
        err = r.get("error", {}) if isinstance(r, dict) else {}
        check(st == status and err.get("param") == param and part in err.get("message", "") and
              err.get("type") == "invalid_request_error",
              "bad request %s %s: %d %s (want %d, param %s, message with %r)" % (ep, body, st, r, status, param, part))
    # the keyed server: a missing or wrong key (401), its limits: a 400
    # naming each (413 for the body), with the limit as the error's code
    ok_body = {"prompt": "a", "max_tokens": 2}
    key = {"Authorization": "Bearer sekret"}
    ok_chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    keyed_bad = [
        (C, ok_body, {}, 401, "authorization", "missing API key", "invalid_api_key"),
        (C, ok_body, {"Authorization": "Bearer wrong"}, 401, "authorization", "invalid API key", "invalid_api_key"),
        (C, ok_body, {"Authorization": "Bearer sekret2"}, 401, "authorization", "invalid API key", "invalid_api_key"),
        (C, ok_body, {"Authorization": "sekret"}, 401, "authorization", "invalid API key", "invalid_api_key"),
        (H, ok_chat, {"Authorization": "Bearer wrong"}, 401, "authorization", "invalid API key", "invalid_api_key"),
        (C, {"prompt": "a" * 5000}, key, 413, "body", "over the server's limit of 4096 bytes (--max-body)",
         "request_too_large"),
        (C, {"prompt": [7] * 490, "max_tokens": 2}, key, 400, "prompt",
         "490 tokens: the server's limit is 480 (--max-prompt-tokens)", "prompt_too_long"),
        (H, dict(ok_chat, messages=[{"role": "user", "content": "light " * 490}]), key, 400, "messages",
         "the server's limit is 480 (--max-prompt-tokens)", "prompt_too_long"),
        (C, {"prompt": [7] * 600, "max_tokens": 2}, key, 400, "prompt", "(--max-prompt-tokens)", "prompt_too_long"),
        (C, dict(ok_body, n=2), key, 400, "n", "'n' (2) is over the server's limit of 1 (--max-n)", "n_too_large"),
        (C, dict(ok_body, max_tokens=33), key, 400, "max_tokens",
         "'max_tokens' (33) is over the server's limit of 32 (--max-tokens-limit)", "max_tokens_too_large"),
        (H, dict(ok_chat, max_completion_tokens=100), key, 400, "max_completion_tokens",
         "(100) is over the server's limit of 32 (--max-tokens-limit)", "max_tokens_too_large"),
    ]
    for ep, body, headers, status, param, part, code in keyed_bad:
        st, hs, data = keyed.request("POST", ep, body, headers=headers, with_headers=True)
        err = json.loads(data).get("error", {})
        check(st == status and err.get("param") == param and part in err.get("message", "") and
              err.get("code") == code and err.get("type") == "invalid_request_error" and
              (status != 401 or hs.get("www-authenticate") == "Bearer"),
              "keyed %s %s: %d %s %s (want %d %s %r %s)" % (ep, headers, st, hs, data[:300], status, param, part,
                                                           code))
    st, r = keyed.post(C, ok_body, headers=key)
    check(st == 200 and r["usage"]["completion_tokens"] >= 1, "keyed server, right key: %d %s" % (st, r))
    st, r = keyed.post(H, ok_chat, headers=key)
    check(st == 200 and r["choices"][0]["message"]["role"] == "assistant", "keyed chat, right key: %d %s" % (st, r))
    # max_tokens at its limit: accepted; none: the default within --max-tokens-limit
    st, r = keyed.post(C, {"prompt": "a", "max_tokens": 32, "ignore_eos": True}, headers=key)
    check(st == 200 and r["usage"]["completion_tokens"] == 32, "keyed max_tokens at its limit: %d %s" % (st, r))
    st, r = keyed.post(C, {"prompt": "a", "ignore_eos": True}, headers=key)
    check(st == 200 and r["usage"]["completion_tokens"] == 32, "keyed default max_tokens: %d %s" % (st, r))
    for path in ["/v1/models", "/metrics", "/v1/tree"]:
        st, ct, data = keyed.request("GET", path, headers={"Authorization": "Bearer wrong"})
        check(st == 401, "keyed GET %s with a wrong key: %d" % (path, st))
        st, ct, data = keyed.request("GET", path, headers=key)
        check(st == 200, "keyed GET %s with the key: %d" % (path, st))
    # the KV budget: a prompt past it is refused, the server goes on, and
    # cached prompts are evicted least recently used to make room
    st, r = keyed.post(C, {"prompt": [5] * 450, "max_tokens": 2}, headers=key)
    check(st == 400 and r["error"]["param"] == "prompt" and "KV budget" in r["error"]["message"],
          "a prompt past the KV budget: %d %s" % (st, r))
    for i in range(6):
        st, r = keyed.post(C, {"prompt": [10 + i] + [7] * 99, "max_tokens": 2}, headers=key)
        check(st == 200, "prompt %d of 100 tokens under a 96K budget: %d %s" % (i, st, r))
    km = keyed.metrics(headers=key)
    check(km["clade_kv_used_bytes"] <= 96 * 1024, "KV used %g past the budget" % km["clade_kv_used_bytes"])
    check(not reuse or km["clade_prefix_evictions_total"] > 0, "no cached prompt evicted under the budget: %s" % km)
    st, ct, data = keyed.request("GET", "/health")
    check(st == 200, "/health needs no key")
    # a request line that is not HTTP: 400, and the server goes on
    sock = socket.create_connection((s.host, s.port), timeout=10)
    sock.sendall(b"GARBAGE\r\n\r\n")
    got = sock.recv(4096)
    sock.close()
    check(got.startswith(b"HTTP/1.1 400"), "a garbage request line: %r" % got[:80])
    st, ct, data = s.request("GET", "/nowhere")
    check(st == 404 and "no such endpoint" in json.loads(data)["error"]["message"], "404: %d %s" % (st, data))
    n_bad = len(bad) + len(keyed_bad) + 1
    m = s.metrics()
    check(m["clade_requests_rejected_total"] == len(bad), "rejected_total %g, want %d" % (
        m["clade_requests_rejected_total"], len(bad)))
    st, r = s.post("/v1/completions", base)
    check(st == 200 and r["choices"][0]["text"] == greedy, "after the bad requests: %d %s" % (st, r))

    # ---- docs/server.md's examples, unchanged (the server's URL from CLADE_URL)
    readme = open(os.path.join(ROOT, "docs", "server.md"), encoding="utf-8").read()
    sec = readme[readme.find("## Server"):]
    py = re.search(r"```python\n(.*?)```", sec, re.S)
    if check(py is not None, "docs/server.md: no python block in its Server section"):
        env = dict(os.environ, CLADE_URL="http://%s:%d" % (s.host, s.port))
        p = subprocess.run(["/usr/bin/python3", "-c", py.group(1)], env=env, capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 0 and p.stdout.strip(), "README python client: rc %d\n%s%s" % (
            p.returncode, p.stdout, p.stderr))
    curl = re.search(r"```sh\n(curl .*?)```", sec, re.S)
    if check(curl is not None, "docs/server.md: no curl block in its Server section") and shutil.which("curl"):
        cmd = curl.group(1).replace("127.0.0.1:8080", "%s:%d" % (s.host, s.port))
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "data: [DONE]" in p.stdout and '"content"' in p.stdout,
              "README curl: rc %d\n%s%s" % (p.returncode, p.stdout[-500:], p.stderr))

    # Structured output (issue 43): response_format json_schema (n, stream,
    # stop), json_object, llama-server's grammar and json_schema; a schema
    # that does not compile is a 400 naming the keyword.
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["name", "age"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": person, "strict": True}}
    gbody = {"prompt": "In the beginning God created", "max_tokens": 120, "temperature": 1.0, "seed": 3}
    st, r = s.post("/v1/completions", dict(gbody, response_format=rf, n=3))
    if check(st == 200, "json_schema: status %d %s" % (st, r)):
        for c in r["choices"]:
            if c["finish_reason"] != "stop":
                continue
            try:
                v = json.loads(c["text"])
                check(set(v) == {"name", "age"} and 0 <= v["age"] <= 99, "json_schema: %r" % c["text"])
            except ValueError:
                fail("json_schema: not JSON: %r" % c["text"])
        check(any(c["finish_reason"] == "stop" for c in r["choices"]), "json_schema: none finished: %s" % r)
    st, r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Who?"}], "max_tokens": 120,
                                             "temperature": 0, "response_format": rf})
    if check(st == 200, "chat json_schema: status %d %s" % (st, r)):
        c = r["choices"][0]
        if c["finish_reason"] == "stop":
            try:
                v = json.loads(c["message"]["content"])
                check(set(v) == {"name", "age"}, "chat json_schema: %r" % v)
            except ValueError:
                fail("chat json_schema: not JSON: %r" % c["message"]["content"])
    events, done = s.stream("/v1/completions", dict(gbody, response_format=rf, temperature=0))
    text = "".join(e["choices"][0].get("text", "") for e in events if e.get("choices"))
    st, whole = s.post("/v1/completions", dict(gbody, response_format=rf, temperature=0))
    check(done and st == 200 and text == whole["choices"][0]["text"], "json_schema stream: %r / %r" % (text, whole))
    st, r = s.post("/v1/completions", dict(gbody, response_format={"type": "json_object"}))
    if check(st == 200, "json_object: status %d" % st) and r["choices"][0]["finish_reason"] == "stop":
        check(isinstance(json.loads(r["choices"][0]["text"]), dict), "json_object: %r" % r["choices"][0]["text"])
    st, r = s.post("/v1/completions", dict(gbody, grammar='root ::= "yes" | "no"'))
    check(st == 200 and r["choices"][0]["text"] in ("yes", "no"), "grammar: %s %s" % (st, r))
    st, r = s.post("/v1/completions", dict(gbody, json_schema={"enum": ["alpha", "beta"]}, stop=["et"]))
    check(st == 200 and r["choices"][0]["text"] in ('"alpha"', '"beta"', '"b'), "llama json_schema: %s %s" % (st, r))
    bad_rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}}
    st, r = s.post("/v1/completions", dict(gbody, response_format=bad_rf))
    check(st == 400 and "uniqueItems" in r.get("error", {}).get("message", ""), "bad schema: %s %s" % (st, r))
    st, r = s.post("/v1/completions", dict(gbody, grammar="root ::= ("))
    check(st == 400 and r.get("error", {}).get("param") == "grammar", "bad grammar: %s %s" % (st, r))
    st, r = s.post("/v1/completions", dict(gbody, grammar='root ::= "a"', json_schema={}))
    check(st == 400, "grammar and json_schema both: %s %s" % (st, r))

    # The requests above can all end before the poller's sixth answer on a
    # quick, idle machine (seen once: 4 polls in a 0.76 s run): let it
    # answer at least six times, for at most 10 s more, before stopping it.
    deadline = time.time() + 10
    while health["ok"] + len(health["bad"]) <= 5 and time.time() < deadline:
        time.sleep(0.05)
    polling.clear()
    poller.join()
    check(health["ok"] > 5 and not health["bad"], "/health: %d ok, failures %s" % (health["ok"], health["bad"][:3]))

    # ---- q (one sequence slot, a queue of one): A runs, B waits, C finds
    # the queue full (429, Retry-After); then the clients of B and A (no
    # stream) close their connections: B leaves the queue, A's sequence the
    # batch, and no token is decoded for them after
    slow = {"prompt": "In the beginning", "max_tokens": 4000, "temperature": 0.8, "ignore_eos": True}
    a_sock = q.open_raw("/v1/completions", slow)
    m = q.wait_metrics(lambda m: m["clade_sequences_live"] == 1)
    check(m["clade_sequences_live"] == 1, "q: request A is not running: %s" % m)
    b_sock = q.open_raw("/v1/chat/completions", {"messages": [{"role": "user", "content": "Wait"}], "max_tokens": 5})
    m = q.wait_metrics(lambda m: m["clade_requests_queued"] == 1)
    check(m["clade_requests_queued"] == 1, "q: request B is not queued: %s" % m)
    st, hs, data = q.request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2}, with_headers=True)
    err = json.loads(data).get("error", {})
    check(st == 429 and hs.get("retry-after") == "1" and err.get("code") == "queue_full" and
          "(--max-queue 1)" in err.get("message", "") and err.get("type") == "rate_limit_error",
          "q: a request past a full queue: %d %s %s" % (st, hs, data))
    check(q.metrics()["clade_requests_queue_full_total"] == 1, "q: clade_requests_queue_full_total")
    b_sock.close()
    m = q.wait_metrics(lambda m: m["clade_requests_cancelled_total"] == 1 and m["clade_requests_queued"] == 0)
    check(m["clade_requests_cancelled_total"] == 1 and m["clade_requests_queued"] == 0 and
          m["clade_requests_client_gone_total"] == 1 and m["clade_sequences_live"] == 1,
          "q: the queued request whose client closed its connection: %s" % m)
    a_sock.close()
    m = q.wait_metrics(lambda m: m["clade_requests_cancelled_total"] == 2 and m["clade_sequences_live"] == 0)
    check(m["clade_requests_cancelled_total"] == 2 and m["clade_sequences_live"] == 0 and
          m["clade_requests_client_gone_total"] == 2, "q: the running request whose client closed: %s" % m)
    time.sleep(0.3)
    m2 = q.metrics()
    check(m2["clade_decode_tokens_total"] == m["clade_decode_tokens_total"] < 3999 and
          m2["clade_requests_running"] == 0, "q: tokens decoded after the cancellations: %s then %s" % (
              m["clade_decode_tokens_total"], m2["clade_decode_tokens_total"]))
    check(m2["clade_time_to_first_token_seconds_count"] == 1 and m2["clade_queue_time_seconds_count"] == 1,
          "q: histogram counts with one request admitted: %s" % {k: v for k, v in m2.items() if "_count" in k})
    check(q.wait_log("the client went away, cancelled"), "q: no log line for a client gone away")

    # q drains on SIGTERM: D (streaming, running; sampled at temperature
    # 0.8, slower than a greedy step) and E (queued) finish,
    # a request after the signal gets 503 with Retry-After, /health 503,
    # then the server exits 0
    got = {}

    def run_d():
        got["d"] = q.stream("/v1/completions", dict(base, max_tokens=1500, temperature=0.8))

    def run_e():
        got["e"] = q.post("/v1/completions", dict(base, max_tokens=20))

    td, te = threading.Thread(target=run_d), threading.Thread(target=run_e)
    td.start()
    q.wait_metrics(lambda m: m["clade_sequences_live"] == 1)
    te.start()
    m = q.wait_metrics(lambda m: m["clade_requests_queued"] == 1)
    check(m["clade_sequences_live"] == 1 and m["clade_requests_queued"] == 1, "q: D running, E queued: %s" % m)
    q.proc.send_signal(signal.SIGTERM)
    check(q.wait_log("draining"), "q: no 'draining' line after SIGTERM")
    try:
        st, hs, data = q.request("POST", "/v1/completions", dict(base, max_tokens=2), with_headers=True, timeout=10)
        check(st == 503 and hs.get("retry-after") == "1" and "draining" in json.loads(data)["error"]["message"],
              "q: a request while draining: %d %s %s" % (st, hs, data))
        st, ct, data = q.request("GET", "/health", timeout=10)
        check(st == 503 and json.loads(data) == {"status": "draining"}, "q: /health while draining: %d %s" % (st, data))
    except OSError as e:  # the drain ended first: the connection is refused (allowed, but said)
        print("note: q had stopped before the request after SIGTERM: %r" % e)
    td.join()
    te.join()
    rc, log = q.stop(send=False, seconds=40)
    events, done = got.get("d", ([], False))
    check(done and events and events[-1]["choices"][0]["finish_reason"] == "length",
          "q: the stream running at SIGTERM did not finish: %s" % events[-1:])
    st, r = got.get("e", (0, {}))
    check(st == 200 and r["usage"]["completion_tokens"] == 20, "q: the request queued at SIGTERM: %d %s" % (st, r))
    check(rc == 0 and "drained" in log and "stopped" in log, "q: SIGTERM drain: exit %s, log:\n%s" % (rc, log))

    # s: SIGTERM with streams running past its --drain-timeout of 0.2 s:
    # each ends with an error event and [DONE] (a whole chunked response),
    # and the server exits 0
    ends = []

    def long_stream():
        c = http.client.HTTPConnection(s.host, s.port, timeout=30)
        c.request("POST", "/v1/completions", json.dumps(dict(base, stream=True, max_tokens=4000, temperature=0.8)),
                  {"Content-Type": "application/json"})
        lines = []
        try:
            for raw in c.getresponse():
                lines.append(raw.decode())
        except Exception as e:  # noqa: BLE001 (a cut stream is the failure)
            lines.append("exception %r" % e)
        ends.append([x.strip() for x in lines if x.strip()][-2:])

    streams = [threading.Thread(target=long_stream) for _ in range(3)]
    for t in streams:
        t.start()
    deadline = time.time() + 10
    while s.metrics()["clade_sequences_live"] < 3 and time.time() < deadline:
        time.sleep(0.02)
    rc, log = s.stop()
    for t in streams:
        t.join()
    check(rc == 0 and "stopped" in log and "3 requests still in flight after 0.2 s are cancelled" in log,
          "SIGTERM: exit %s, log:\n%s" % (rc, log))
    for e in ends:
        check(len(e) == 2 and "shutting down" in e[0] and e[1] == "data: [DONE]",
              "a stream at SIGTERM ended with %r" % e)
    rc, log = keyed.stop(signal.SIGINT)
    check(rc == 0 and "SIGINT, stopping" in log and "stopped" in log, "SIGINT: exit %s, log:\n%s" % (rc, log))
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("serve: all checks passed (%d bad requests, /health answered %d times)" % (n_bad, health["ok"]))


if __name__ == "__main__":
    main()
