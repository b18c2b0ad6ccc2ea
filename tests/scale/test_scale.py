#!/usr/bin/python3
"""`clade serve` replicas behind nginx (tools/serve/scale/), stdlib only.

usage: test_scale.py CLADE_CLI SOURCE_ROOT

Writes a small random model, starts 3 replicas and Debian's nginx on
loopback with tools/serve/scale/run.sh, and sends 48 chats over 4 distinct
system prompts through nginx, first with consistent hashing on
X-Clade-Prefix-Key (the key the client computes: FNV-1a of the system
message, which the server must return the same), then on fresh replicas
with round-robin. Checks, from each replica's /metrics: with affinity every
system prompt's tokens were evaluated on one replica only, with round-robin
on more than one, and the prompt tokens evaluated by all replicas together
with affinity are at most half of round-robin's; prints both figures. Then
drains the busiest replica (tools/serve/scale/drain.sh) while 24 requests run
through nginx: none may fail. Exits 77 (skipped) without nginx.
"""
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

CLI, ROOT = sys.argv[1], sys.argv[2]
SCALE = os.path.join(ROOT, "tools", "serve", "scale")
failures = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    failures.append(msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def fnv1a(text):
    h = 14695981039346656037
    for b in (text if isinstance(text, bytes) else text.encode()):
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


WORDS = ("and the lord said unto moses go in unto pharaoh and speak unto him thus saith the lord god of the "
         "hebrews let my people go that they may serve me for if thou refuse to let them go and wilt hold them "
         "still behold the hand of the lord is upon thy cattle which is in the field upon the horses upon the "
         "asses upon the camels upon the oxen and upon the sheep there shall be a very grievous murrain").split()


def system_prompt(k, phase):
    # about 400 words, different for each k (and each phase, so that the
    # second phase finds nothing cached from the first)
    words = [WORDS[(i * (k + 3) + 7 * k) % len(WORDS)] for i in range(400)]
    return "You are helper %d of %s. Keep to these words: %s." % (k, phase, " ".join(words))


class Setup:
    """run.sh N MODEL in a temporary folder; its replicas from DIR/replicas."""

    def __init__(self, model, round_robin):
        self.dir = tempfile.mkdtemp(prefix="clade-scale-")
        args = ["bash", os.path.join(SCALE, "run.sh"), "3", model, "--dir", self.dir, "--clade", CLI]
        if round_robin:
            args.append("--round-robin")
        args += ["--", "--threads", "1", "--parallel", "4", "--ctx", "2048"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        m = re.search(r"nginx on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            sys.exit("FAIL: run.sh did not start: " + line + self.proc.stderr.read())
        self.port = int(m.group(1))
        self.replicas = []  # (index, port, pid)
        for row in open(os.path.join(self.dir, "replicas")):
            i, p, pid = row.split()
            self.replicas.append((int(i), int(p), int(pid)))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            fail("run.sh did not stop in 30 s on SIGTERM")
        shutil.rmtree(self.dir, ignore_errors=True)


def request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheader("X-Clade-Prefix-Key"), data


def metrics(port):
    st, _, data = request(port, "GET", "/metrics")
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def chat(port, sys_text, i, key=True, stream=False, max_tokens=8):
    body = {"messages": [{"role": "system", "content": sys_text}, {"role": "user", "content": "Question %d?" % i}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream, "ignore_eos": max_tokens > 8}
    h = {"X-Clade-Prefix-Key": fnv1a(sys_text)} if key else {}
    st, got_key, data = request(port, "POST", "/v1/chat/completions", body, h)
    if st != 200:
        return st, got_key, data.decode("utf-8", "replace")[:300]
    if stream:
        ok = data.decode("utf-8", "replace").rstrip().endswith("data: [DONE]") and b'"error"' not in data
        return (200 if ok else 599), got_key, data.decode("utf-8", "replace")[-300:]
    return st, got_key, json.loads(data)


def phase(model, round_robin, name):
    s = Setup(model, round_robin)
    prompts = [system_prompt(k, name) for k in range(4)]
    keys = [fnv1a(p) for p in prompts]
    jobs = [(prompts[i % 4], i) for i in range(48)]
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        results = list(ex.map(lambda a: chat(s.port, a[0], a[1]), jobs))
    for (p, i), (st, got, data) in zip(jobs, results):
        check(st == 200, "%s: chat %d: status %d: %s" % (name, i, st, data))
        check(got == fnv1a(p), "%s: chat %d: X-Clade-Prefix-Key %r, sent %r" % (name, i, got, fnv1a(p)))
    per = {r[0]: metrics(r[1]) for r in s.replicas}
    evaluated = sum(m["clade_prompt_tokens_total"] for m in per.values())
    reused = sum(m["clade_prompt_tokens_reused_total"] for m in per.values())
    where = {}
    for k in keys:
        label = 'clade_prefix_key_prompt_tokens_total{key="%s"}' % k
        where[k] = {i: int(m.get(label, 0)) for i, m in per.items() if m.get(label, 0) > 0}
    print("%s: prompt tokens evaluated %d, reused %d (all replicas); per replica: %s" %
          (name, evaluated, reused, ", ".join("%d: %d evaluated, %d reused, %d requests" %
                                               (i, m["clade_prompt_tokens_total"],
                                                m["clade_prompt_tokens_reused_total"],
                                                sum(v for n, v in m.items()
                                                    if n.startswith("clade_prefix_key_requests_total")))
                                               for i, m in sorted(per.items()))), flush=True)
    for k in keys:
        print("  system prompt %s: tokens evaluated per replica %s" % (k, where[k]), flush=True)
    return s, keys, where, evaluated, reused, prompts


def drain_test(s, prompts, victim):
    """24 requests through nginx (half streamed) while replica `victim` drains."""
    start = threading.Event()

    def one(i):
        start.wait()
        time.sleep(0.05 * i)
        return chat(s.port, prompts[i % 4], 100 + i, key=True, stream=i % 2 == 1, max_tokens=256)

    with concurrent.futures.ThreadPoolExecutor(12) as ex:
        futs = [ex.submit(one, i) for i in range(24)]
        start.set()
        time.sleep(0.3)
        d = subprocess.run(["bash", os.path.join(SCALE, "drain.sh"), s.dir, str(victim), "60"], capture_output=True,
                           text=True, timeout=120)
        results = [f.result() for f in futs]
    check(d.returncode == 0, "drain.sh failed: " + d.stdout + d.stderr)
    lost = [(i, st, data) for i, (st, _, data) in enumerate(results) if st != 200]
    check(not lost, "requests lost while draining replica %d: %s" % (victim, lost[:3]))
    _, _, pid = s.replicas[victim]
    gone = False
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            gone = True
            break
        # a zombie until run.sh reaps it: look at its state
        try:
            if open("/proc/%d/stat" % pid).read().split(") ")[1][0] == "Z":
                gone = True
                break
        except OSError:
            gone = True
            break
        time.sleep(0.1)
    check(gone, "replica %d still runs after drain.sh" % victim)
    # From nginx's log: the drain's requests that the victim served, and
    # those it refused (503 while draining) that nginx sent on.
    vport = ":%d" % s.replicas[victim][1]
    log = [l for l in open(os.path.join(s.dir, "access.log")) if '"POST' in l][-24:]
    ups = [l.split("upstream=")[1].split(" time=")[0].split(", ") for l in log]
    served = sum(1 for u in ups if u[-1].endswith(vport))
    retried = sum(1 for u in ups if any(x.endswith(vport) for x in u[:-1]))
    print("drain: %d requests through nginx while replica %d drained, %d lost (%d finished on it, %d refused by it "
          "and retried by nginx); drain.sh said: %s" % (len(results), victim, len(lost), served, retried,
                                                         " / ".join(d.stdout.strip().splitlines())), flush=True)
    # after the drain, requests for every prompt still answer
    for k in range(4):
        st, _, data = chat(s.port, prompts[k], 200 + k)
        check(st == 200, "after the drain: prompt %d: status %d %s" % (k, st, data))


def replica_checks(port, system):
    """One replica directly: a bad key, /v1/tree, and what draining changes."""
    st, _, data = chat_raw(port, system, {"X-Clade-Prefix-Key": "two words"})
    check(st == 400 and json.loads(data)["error"]["param"] == "X-Clade-Prefix-Key",
          "a key with a space: %d %s" % (st, data[:200]))
    st, _, data = chat_raw(port, system, {"X-Clade-Prefix-Key": "k" * 129})
    check(st == 400, "a key of 129 characters: %d" % st)
    st, got, data = chat_raw(port, system, {"X-Clade-Prefix-Key": "tenant-7/conv:42"})
    check(st == 200 and got == "tenant-7/conv:42", "a client's own key comes back: %d %r" % (st, got))
    # /v1/completions: the key hashes the prompt's first 256 bytes
    prompt = system * 2
    st, got, _ = request(port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2})
    check(st == 200 and got == fnv1a(prompt.encode()[:256]), "completion key %r, expected %r" %
          (got, fnv1a(prompt.encode()[:256])))
    st, _, data = request(port, "GET", "/v1/tree")
    tree = json.loads(data) if st == 200 else {}
    check(st == 200 and tree["nodes"][0]["id"] == 0 and tree["nodes"][0]["parent"] == -1 and len(tree["nodes"]) > 4,
          "/v1/tree: %d %s" % (st, data[:200]))
    check(all(n["sequences"] == 0 for n in tree.get("nodes", [])), "/v1/tree: live sequences on an idle server")
    st, _, _ = request(port, "GET", "/health")
    check(st == 200, "/health before the drain: %d" % st)
    st, _, data = request(port, "POST", "/admin/drain")
    check(st == 200 and json.loads(data)["draining"] is True, "POST /admin/drain: %d %s" % (st, data))
    st, _, data = request(port, "GET", "/health")
    check(st == 503 and json.loads(data)["status"] == "draining", "/health while draining: %d %s" % (st, data))
    st, _, data = chat_raw(port, system, {})
    check(st == 503 and b"draining" in data, "a request while draining: %d %s" % (st, data[:200]))
    m = metrics(port)
    check(m.get("clade_draining") == 1 and m.get("clade_requests_in_flight") == 0,
          "metrics while draining: draining %s, in flight %s" % (m.get("clade_draining"),
                                                                 m.get("clade_requests_in_flight")))
    st, _, _ = request(port, "GET", "/v1/tree")
    check(st == 200, "/v1/tree while draining: %d" % st)
    check(m.get("clade_prefix_keys_seen_total", 0) >= 2, "clade_prefix_keys_seen_total %s" %
          m.get("clade_prefix_keys_seen_total"))


def chat_raw(port, system, headers):
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}], "max_tokens": 2}
    return request(port, "POST", "/v1/chat/completions", body, headers)


def main():
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        print("SKIP: nginx is not installed (apt-get install nginx-light)")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="clade-scale-model-")
    model = os.path.join(tmp, "m.gguf")
    vocab = os.path.join(ROOT, "models", "kjv-target-f16.gguf")
    subprocess.run([CLI, "model", "random", "-o", model, "--layers", "2", "--dim", "64", "--heads", "4",
                    "--kv-heads", "2", "--ff", "128", "--type", "f16", "--vocab-from", vocab,
                    "--chat-template", "chatml"], check=True, stdout=subprocess.DEVNULL)
    # Affinity: consistent hashing on the key.
    s, keys, where, aff_eval, aff_reused, prompts = phase(model, False, "affinity")
    for k in keys:
        check(len(where[k]) == 1, "affinity: system prompt %s evaluated on replicas %s, not one" % (k, where[k]))
    # The server computes the same key when the client sends none.
    st, got, _ = chat(s.port, prompts[0], 999, key=False)
    check(st == 200 and got == keys[0], "no header: X-Clade-Prefix-Key %r, expected %r" % (got, keys[0]))
    # Drain the replica that took the most keys, while requests run.
    busiest = max(range(3), key=lambda i: sum(1 for k in keys if i in where[k]))
    drain_test(s, prompts, busiest)
    s.stop()
    # Round-robin, on fresh replicas.
    s, keys, where, rr_eval, rr_reused, prompts = phase(model, True, "round-robin")
    for k in keys:
        check(len(where[k]) > 1, "round-robin: system prompt %s evaluated on replicas %s only" % (k, where[k]))
    replica_checks(s.replicas[2][1], prompts[0])
    s.stop()
    print("prompt tokens evaluated: affinity %d (reused %d), round-robin %d (reused %d): ratio %.2f" %
          (aff_eval, aff_reused, rr_eval, rr_reused, aff_eval / max(rr_eval, 1)), flush=True)
    check(aff_eval * 2 <= rr_eval, "affinity evaluated %d prompt tokens, more than half of round-robin's %d" %
          (aff_eval, rr_eval))
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("scale: all checks passed")


main()
