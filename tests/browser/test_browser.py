#!/usr/bin/python3
"""`clade serve`'s pages in a real browser: Debian's headless chromium,
driven over the DevTools protocol by the small websocket client below
(stdlib only).

usage: test_browser.py CLADE_CLI SOURCE_ROOT OUT_DIR [--update-docs]

Starts a server on a random model and chromium with a fresh profile, then:
loads / (the chat page), types a message, clicks Send and waits for a
streamed answer in the DOM, then stops a second answer with Stop (the
server must count it cancelled); starts 8 streamed requests that share a system
prompt, loads /tree and waits until a node shows 8 sequences (and checks
/v1/tree says the same). Screenshots of both pages go to OUT_DIR
(chat.png, tree.png); --update-docs also copies tree.png to
docs/images/tree-view.png. Exits 77 (skipped) without chromium.
"""
import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

CLI, ROOT, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
UPDATE_DOCS = "--update-docs" in sys.argv[4:]
failures = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    failures.append(msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


class WebSocket:
    """A client of RFC 6455, text frames only: enough for the DevTools protocol."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" %
                           (u.path, u.hostname, u.port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.sock.recv(1)
            if not b:
                raise OSError("websocket: connection closed during the handshake")
            head += b
        if not head.startswith(b"HTTP/1.1 101"):
            raise OSError("websocket: handshake refused: " + head.decode("latin-1").splitlines()[0])

    def _exact(self, n):
        out = bytearray()
        while len(out) < n:
            b = self.sock.recv(n - len(out))
            if not b:
                raise OSError("websocket: connection closed")
            out += b
        return bytes(out)

    def send(self, text):
        data = text.encode()
        head = bytearray([0x81])
        n = len(data)
        if n < 126:
            head.append(0x80 | n)
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(bytes(head) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            mask = self._exact(4) if b1 & 0x80 else None
            payload = self._exact(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            op = b0 & 0x0F
            if op == 0x8:
                raise OSError("websocket: closed by the browser")
            if op == 0x9:  # ping: pong (masked, as a client must)
                m = os.urandom(4)
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + m +
                                  bytes(b ^ m[i % 4] for i, b in enumerate(payload)))
                continue
            if op in (0x1, 0x2, 0x0):
                message += payload
                if b0 & 0x80:
                    return message.decode()


class Page:
    """One page target of chromium, over the DevTools protocol."""

    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("javascript: %s: %s" % (expr[:80], r["exceptionDetails"].get("text")))
        return r["result"].get("value")

    def wait(self, expr, timeout, what):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if self.js(expr):
                    return True
            except RuntimeError:
                pass
            time.sleep(0.1)
        fail("timed out (%d s) waiting for %s" % (timeout, what))
        return False

    def goto(self, url):
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && location.href === %s" % json.dumps(url), 30,
                  "the page " + url)

    def click(self, selector):
        box = self.js("(() => { const r = document.querySelector(%s).getBoundingClientRect();"
                      " return [r.x + r.width / 2, r.y + r.height / 2]; })()" % json.dumps(selector))
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        print("screenshot: " + path, flush=True)


def start_server(model):
    p = subprocess.Popen([CLI, "serve", "-m", model, "--port", "0", "--threads", "2", "--parallel", "12",
                          "--ctx", "4096"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"listening on http://([\d.]+):(\d+)", line)
    if not m:
        p.kill()
        sys.exit("FAIL: the server did not start: " + line + p.stderr.read())
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, int(m.group(2))


def start_chromium(profile):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    p = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,860",
                          "--user-data-dir=" + profile, "--remote-debugging-port=0", "about:blank"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port, log = None, []
    end = time.time() + 60
    while time.time() < end:
        line = p.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"DevTools listening on ws://[\d.]+:(\d+)/", line)
        if m:
            port = int(m.group(1))
            break
    if not port:
        p.kill()
        sys.exit("FAIL: chromium did not start:\n" + "".join(log))
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    for _ in range(100):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/json/list")
        targets = json.loads(c.getresponse().read())
        c.close()
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            return p, pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.1)
    p.kill()
    sys.exit("FAIL: chromium has no page target")


class Streams:
    """n streamed chats sharing a system prompt, held open until close()."""

    def __init__(self, port, n, system):
        self.conns = []
        for i in range(n):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = {"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": "Tell me about day %d of the journey." % (i + 1)}],
                    "max_tokens": 3500, "ignore_eos": True, "temperature": 0.8, "stream": True}
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            check(r.status == 200, "stream %d: status %d" % (i, r.status))
            r.readline()  # the first event: the request runs
            self.conns.append(c)

    def close(self):
        for c in self.conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def main():
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print("SKIP: chromium is not installed (apt-get install chromium)")
        sys.exit(77)
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="clade-browser-")
    model = os.path.join(tmp, "m.gguf")
    vocab = os.path.join(ROOT, "models", "kjv-target-f16.gguf")
    # larger than test_serve's model, so that 8 long answers stay live
    # for a few seconds while the page polls
    subprocess.run([CLI, "model", "random", "-o", model, "--layers", "4", "--dim", "256", "--heads", "4",
                    "--kv-heads", "2", "--ff", "512", "--type", "f16", "--vocab-from", vocab,
                    "--chat-template", "chatml"], check=True, stdout=subprocess.DEVNULL)
    server, port = start_server(model)
    chrome, ws_url = start_chromium(os.path.join(tmp, "profile"))
    base = "http://127.0.0.1:%d" % port
    streams = None
    try:
        page = Page(ws_url)
        page.call("Page.enable")
        page.call("Runtime.enable")
        # The chat page: type a message, click Send, a streamed answer.
        page.goto(base + "/")
        page.wait("document.getElementById('model').textContent.length > 2", 20, "the model's name on /")
        page.js("(() => { const t = document.getElementById('temperature'); t.value = '0';"
                " document.getElementById('max_tokens').value = '40';"
                " document.getElementById('system').value = 'You are a scribe of the old books.'; })()")
        page.js("document.getElementById('input').focus()")
        page.call("Input.insertText", text="In the beginning, what was created?")
        page.click("#send")
        page.wait("!!document.querySelector('.msg.assistant[data-done]')", 60, "the answer to end")
        ans = page.js("(() => { const a = document.querySelector('.msg.assistant');"
                      " return {text: a.textContent, chunks: Number(a.dataset.chunks), done: a.dataset.done,"
                      " user: document.querySelector('.msg.user').textContent,"
                      " stats: (document.querySelector('.stats') || {}).textContent}; })()")
        print("chat page: %d chunks, finish %s, %r; %s" % (ans["chunks"], ans["done"], ans["text"][:60],
                                                            ans["stats"]), flush=True)
        check(ans["user"] == "In the beginning, what was created?", "the user's message shows %r" % ans["user"])
        check(ans["done"] in ("stop", "length"), "the answer ended with %r" % ans["done"])
        check(len(ans["text"]) > 0 and ans["chunks"] >= 2,
              "no streamed answer in the page (%d chunks, %r)" % (ans["chunks"], ans["text"]))
        page.screenshot(os.path.join(OUT, "chat.png"))
        # Stop: a long answer, stopped after its first pieces; the server
        # counts it cancelled.
        page.js("document.getElementById('max_tokens').value = '3000'")
        page.js("document.getElementById('input').focus()")
        page.call("Input.insertText", text="And then?")
        page.click("#send")
        page.wait("(() => { const a = document.querySelectorAll('.msg.assistant');"
                  " return a.length === 2 && Number(a[1].dataset.chunks) >= 3; })()", 30, "the second answer")
        page.click("#stop")
        page.wait("!!document.querySelectorAll('.msg.assistant')[1].dataset.done", 10, "the stopped answer")
        done = page.js("document.querySelectorAll('.msg.assistant')[1].dataset.done")
        check(done == "stopped", "after Stop the answer ended with %r" % done)
        cancelled = 0
        for _ in range(50):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
            cancelled = float(re.search(r"^clade_requests_cancelled_total (\S+)$", text, re.M).group(1))
            if cancelled >= 1:
                break
            time.sleep(0.1)
        check(cancelled >= 1, "Stop: the server did not cancel the request")

        # The tree view while 8 requests share a system prompt.
        system = ("You are the keeper of the chronicles of the kings. Answer as the scribes of old would, "
                  "with the names of the fathers and the years of their reigns.")
        streams = Streams(port, 8, system)
        page.goto(base + "/tree")
        ok = page.wait("[...document.querySelectorAll('.node')].some(n => n.dataset.seqs === '8' &&"
                       " n.dataset.id !== '0')", 20, "a node with 8 sequences on /tree")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/tree")
        tree = json.loads(c.getresponse().read())
        c.close()
        shared = [n for n in tree["nodes"] if n["id"] != 0 and n["sequences"] == 8]
        check(shared, "/v1/tree has no node with 8 sequences: %s" %
              [(n["id"], n["sequences"]) for n in tree["nodes"]])
        if shared:
            deepest = max(shared, key=lambda n: n["position"] + n["tokens"])
            check("keeper of the chronicles" in "".join(n["text"] for n in shared) or deepest["tokens"] > 0,
                  "the shared node's text: %r" % deepest["text"])
            check(deepest["kv_bytes"] == deepest["tokens"] * tree["kv_token_bytes"] and deepest["kv_bytes"] > 0,
                  "the shared node's KV bytes: %s" % deepest)
            check(len(deepest["children"]) == 8, "the shared node has %d children, not 8" % len(deepest["children"]))
        if ok:
            shown = page.js("(() => { const n = [...document.querySelectorAll('.node')].filter(n =>"
                            " n.dataset.seqs === '8' && n.dataset.id !== '0').pop();"
                            " return n.querySelector('.h').textContent; })()")
            print("tree page: shared node: %s" % shown, flush=True)
            check("8 seqs" in shown and "KV" in shown and "used" in shown, "the shared node shows %r" % shown)
        page.screenshot(os.path.join(OUT, "tree.png"))
        if UPDATE_DOCS:
            dst = os.path.join(ROOT, "docs", "images", "tree-view.png")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(OUT, "tree.png"), dst)
            print("copied to " + dst)
        try:
            page.call("Browser.close")
        except (OSError, RuntimeError):
            pass
    finally:
        if streams:
            streams.close()
        try:
            chrome.wait(10)
        except subprocess.TimeoutExpired:
            chrome.kill()
            chrome.wait()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            fail("the server did not stop on SIGTERM")
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("browser: all checks passed")


main()
