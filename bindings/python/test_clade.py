"""Tests of the Python bindings (unittest, standard library only).

Run from anywhere:
    /usr/bin/python3 bindings/python/test_clade.py -v

Environment:
    CLADE_LIBRARY    libclade.so to load (default: build/libclade.so of this checkout)
    CLADE_CLI        the clade command-line tool, used to write random models
                     (default: build/tools/clade/clade of this checkout)
    CLADE_VOCAB_DIR  folder of reference vocabularies (default: tests/data/vocab of
                     this checkout); the tests that need them fail without it
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import clade  # noqa: E402
from clade import _lib  # noqa: E402

CLI = os.environ.get("CLADE_CLI") or os.path.join(ROOT, "build", "examples", "clade")
VOCAB_DIR = os.environ.get("CLADE_VOCAB_DIR") or os.path.join(ROOT, "tests", "data", "vocab")
SPM_VOCAB = os.path.join(VOCAB_DIR, "ggml-vocab-llama-spm.gguf")

_tmp = None


def setUpModule():
    global _tmp
    _tmp = tempfile.mkdtemp(prefix="clade-py-")


def tearDownModule():
    if _tmp:
        shutil.rmtree(_tmp, ignore_errors=True)


def random_model(name, *extra):
    if not os.access(CLI, os.X_OK):
        raise unittest.SkipTest("clade CLI not found at %s (set CLADE_CLI)" % CLI)
    path = os.path.join(_tmp, name)
    if not os.path.exists(path):
        subprocess.run([CLI, "model", "random", "-o", path, "--layers", "2", "--dim", "64",
                        "--heads", "4", "--kv-heads", "2", "--ff", "128", "--type", "f32",
                        "--seed", "7"] + list(extra),
                       check=True, stdout=subprocess.DEVNULL)
    return path


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)


def assert_close(test, got, want, rel=1e-4):
    """Rows of logits equal to about rel, relative to the row's scale."""
    test.assertEqual(len(got), len(want))
    scale = max(1.0, max(abs(x) for x in want))
    worst = max(abs(a - b) for a, b in zip(got, want))
    test.assertLessEqual(worst, rel * scale, "logits differ by %g (scale %g)" % (worst, scale))


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = random_model("small.gguf", "--vocab", "300")
        cls.model = clade.Model(cls.path, n_threads=1)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_version(self):
        self.assertEqual(clade.version(), _lib.CLADE_VERSION_STRING)
        self.assertEqual(_lib.clade_version_number(), _lib.CLADE_VERSION_NUMBER)

    def test_info(self):
        i = self.model.info()
        self.assertEqual(i["architecture"], "llama")
        self.assertEqual(i["n_layers"], 2)
        self.assertEqual(i["n_embd"], 64)
        self.assertEqual(i["n_heads"], 4)
        self.assertEqual(i["n_kv_heads"], 2)
        self.assertEqual(i["head_dim"], 16)
        self.assertEqual(i["n_ff"], 128)
        self.assertEqual(i["n_vocab"], 300)
        self.assertEqual(i["weight_type_name"], "f32")
        self.assertGreater(i["n_params"], 0)
        self.assertEqual(self.model.n_vocab, 300)

    def test_prefix_reuse_and_sessions(self):
        doc = [(7 * i + 3) % 300 for i in range(40)]
        with clade.Tree(self.model, kv_type=clade.KV_F32, flags=clade.TREE_PREFIX_CACHE) as t:
            a, reused, want = t.append_prefix(doc + [5, 6], want_logits=True)
            self.assertEqual(reused, 0)
            # Another ending after 30 tokens: 30 reused (a node split).
            b, reused, got = t.append_prefix(doc[:30] + [9], want_logits=True)
            self.assertEqual(reused, 30)
            with clade.Tree(self.model, kv_type=clade.KV_F32) as fresh:
                _, ref = fresh.append(0, doc[:30] + [9], want_logits=True)
            assert_close(self, got, ref)
            t.release(b)
            self.assertGreater(t.trim(0), 0)  # b was cached
            path = os.path.join(_tmp, "s.clade")
            t.save(a, path)
        with clade.Tree(self.model, kv_type=clade.KV_F32) as t2:
            node, n, reused = t2.load(path)
            self.assertEqual((n, reused), (42, 0))
            with clade.Cache(t2) as c:  # the next step after the loaded path
                s = c.add(node)
                row = c.decode({s: [11]})[0]
            with clade.Tree(self.model, kv_type=clade.KV_F32) as fresh:
                _, ref = fresh.append(0, doc + [5, 6, 11], want_logits=True)
            assert_close(self, row, ref)
            self.assertEqual(t2.append_prefix(doc + [5, 6, 11])[1], 42)
        with clade.Tree(self.model) as t16:  # F16 KV: the file holds F32
            with self.assertRaises(clade.SessionMismatch):
                t16.load(path)
            with self.assertRaises(clade.CladeError) as e:
                t16.load(path + ".missing")
            self.assertEqual(e.exception.status, _lib.CLADE_E_IO)

    def test_context_manager_and_close(self):
        with clade.Model(self.path, n_threads=1) as m:
            t = clade.Tree(m)
            c = clade.Cache(t)
            self.assertFalse(c.closed)
        # closing the model closes only the model (freeing is deferred)
        self.assertTrue(m.closed)
        self.assertFalse(t.closed or c.closed)
        with self.assertRaises(clade.CladeError) as e:
            m.info()
        self.assertEqual(e.exception.status, _lib.CLADE_E_STATE)
        c.close()
        t.close()
        self.assertTrue(t.closed and c.closed)

    def test_model_freed_first(self):
        m = clade.Model(self.path, n_threads=1)
        tree = clade.Tree(m, kv_type=clade.KV_F32)
        cache = clade.Cache(tree, max_seqs=2, max_tokens=32)
        s = cache.add(0, [1, 2, 3])
        (want,) = cache.decode({s: [4]})
        cache.truncate(s, 3)
        m.close()  # the tree and cache keep the model's memory alive
        del m
        node = tree.append(0, [7, 8])
        (row,) = cache.decode({s: [4]})
        assert_close(self, row, want)
        tree.close()  # the cache keeps the tree's nodes alive
        s2 = cache.add(node, [9])
        self.assertEqual(len(cache.decode({s: [5], s2: []})), 2)
        with self.assertRaises(clade.CladeError) as e:
            tree.release(node)
        self.assertEqual(e.exception.status, _lib.CLADE_E_STATE)
        cache.close()
        # and the other way round, left to the garbage collector
        m = clade.Model(self.path, n_threads=1)
        t = clade.Tree(m)
        c = clade.Cache(t)
        s = c.add(0, [1])
        del t, m
        c.decode({s: [2]})
        del c

    def _greedy(self, cache, seq, first_row, n):
        out, row = [], first_row
        for _ in range(n):
            out.append(argmax(row))
            (row,) = cache.decode({seq: [out[-1]]})
        return out

    def test_shared_prefix_equals_alone(self):
        m = self.model
        prompt = [5, 17, 42, 99, 3, 250, 11, 64, 7, 123]
        suffixes = [[21], [150, 9], [299]]
        n = 8
        with clade.Tree(m, kv_type=clade.KV_F32) as tree:
            node, node_logits = tree.append(clade.Tree.ROOT, prompt, want_logits=True)
            self.assertEqual(len(node_logits), m.n_vocab)
            info = tree.node_info(node)
            self.assertEqual((info["parent"], info["length"], info["path_length"]),
                             (0, len(prompt), 0))
            self.assertEqual(tree.node_tokens(node), prompt)

            # three sequences under the shared prompt, each with its own first tokens
            with clade.Cache(tree, max_seqs=4, max_tokens=64) as cache:
                seqs = [cache.add(node, s) for s in suffixes]
                rows = cache.decode({s: [] for s in seqs})  # evaluates the queued tokens
                self.assertEqual(len(rows), 3)
                for s, suf in zip(seqs, suffixes):
                    self.assertEqual(cache.length(s), len(suf))
                shared = [[argmax(r)] for r in rows]
                for _ in range(n - 1):
                    rows = cache.decode({s: [o[-1]] for s, o in zip(seqs, shared)})
                    for o, r in zip(shared, rows):
                        o.append(argmax(r))
                self.assertEqual(cache.length(seqs[0]), len(suffixes[0]) + n - 1)
                self.assertGreater(cache.kv_bytes, 0)
            tree.release(node)

            # each alone: the whole prompt as the sequence's own tokens, at the root
            for suf, want in zip(suffixes, shared):
                with clade.Cache(tree, max_seqs=1, max_tokens=64) as cache:
                    s = cache.add(clade.Tree.ROOT, prompt + suf)
                    (row,) = cache.decode({s: []})
                    self.assertEqual(self._greedy(cache, s, row, n), want)

            # the node's own logits agree with the prompt decoded alone
            with clade.Cache(tree, max_seqs=1, max_tokens=64) as cache:
                s = cache.add(clade.Tree.ROOT, prompt)
                (row,) = cache.decode({s: []})
                self.assertEqual(argmax(row), argmax(node_logits))
                for a, b in zip(row, node_logits):
                    self.assertAlmostEqual(a, b, delta=1e-3 * (1 + abs(b)))

    def test_sampler_penalties_bias_logprobs_batch(self):
        import math
        row = [1.0, 3.0, -2.0, 3.0, 0.5, 2.0, float("-inf"), 2.5]
        # logit bias: token 2 lifted to the top, token 1 banned; greedy
        with clade.Sampler(temperature=0, logit_bias={2: 10.0, 1: float("-inf")}) as s:
            self.assertEqual(s.sample(row), 2)
        # penalties: token 1 and 3 tie; history [1, 3, 3] with the prompt [1]
        # uncounted: 3 loses 2 * 1.0 (frequency), 1 loses nothing
        with clade.Sampler(temperature=0, frequency_penalty=1.0, penalize_prompt=False) as s:
            self.assertEqual(s.sample_ex(row, history=[1, 3, 3], n_prompt=1).token, 1)
        with clade.Sampler(temperature=0, presence_penalty=5.0) as s:  # prompt counted
            self.assertEqual(s.sample_ex(row, history=[1, 3], n_prompt=1).token, 7)
        # log-probabilities: a direct log-softmax at temperature 1, no truncation
        fin = [v for v in row if v != float("-inf")]
        lse = max(fin) + math.log(sum(math.exp(v - max(fin)) for v in fin))
        with clade.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3) as s:
            r = s.sample_ex(row, top=3)
            self.assertAlmostEqual(r.logprob, row[r.token] - lse, delta=1e-5)
            self.assertEqual([t for t, _ in r.top], [1, 3, 7])
            for t, lp in r.top:
                self.assertAlmostEqual(lp, row[t] - lse, delta=1e-5)
        # a batch equals the same rows one by one, stream by stream
        rows = [row, list(reversed(row)), row]
        streams = [4, 9, 4]
        hist = [[0, 1], [], [5]]
        with clade.Sampler(temperature=1.0, seed=8, presence_penalty=0.5) as a, \
                clade.Sampler(temperature=1.0, seed=8, presence_penalty=0.5) as b:
            for _ in range(5):
                got = a.sample_batch(rows, streams, histories=hist, top=2)
                want = [b.sample_ex(r, stream=st, history=h, top=2)
                        for r, st, h in zip(rows, streams, hist)]
                self.assertEqual(got, want)
        with self.assertRaises(clade.CladeError):
            clade.Sampler(logit_bias=[(-1, 1.0)])

    def test_generate_and_sampler(self):
        m = self.model
        prompt = [1, 2, 3, 4, 5, 6]
        out = clade.generate(m, prompt, 6, samples=3, kv_type=clade.KV_F32)
        self.assertEqual(len(out), 3)
        self.assertTrue(all(o == out[0] for o in out))  # greedy: all samples agree
        with clade.Tree(m, kv_type=clade.KV_F32) as tree, clade.Cache(tree) as cache:
            s = cache.add(clade.Tree.ROOT, prompt)
            (row,) = cache.decode({s: []})
            self.assertEqual(self._greedy(cache, s, row, 6), out[0])
            with clade.Sampler(temperature=0) as greedy:
                self.assertEqual(greedy.sample(row), argmax(row))
            # a forgotten stream starts again from its first draw
            with clade.Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5) as smp:
                first = [smp.sample(row, stream=7) for _ in range(8)]
                smp.forget(7)
                smp.forget(12345)  # never sampled: fine
                self.assertEqual([smp.sample(row, stream=7) for _ in range(8)], first)
        a = clade.generate(m, prompt, 6, samples=3, temperature=1.0, seed=11)
        b = clade.generate(m, prompt, 6, samples=3, temperature=1.0, seed=11)
        self.assertEqual(a, b)  # seeded: reproducible
        for o in a:
            self.assertEqual(len(o), 6)
            self.assertTrue(all(0 <= t < m.n_vocab for t in o))

    def test_truncate_remove(self):
        with clade.Tree(self.model) as tree, clade.Cache(tree, max_seqs=2) as cache:
            s = cache.add(0, [1, 2, 3])
            cache.decode({s: [4, 5]})
            self.assertEqual(cache.length(s), 5)
            cache.truncate(s, 2)
            self.assertEqual(cache.length(s), 2)
            rows = cache.decode({s: [7, 8]}, all_logits=True)
            self.assertEqual(len(rows), 2)
            cache.remove(s)
            with self.assertRaises(clade.CladeError) as e:
                cache.length(s)
            self.assertEqual(e.exception.status, _lib.CLADE_E_STATE)

    def test_decode_greedy(self):
        # Two caches, the same steps: one returns the logits, the other
        # only each row's argmax.
        with clade.Tree(self.model) as tree, clade.Cache(tree, max_seqs=2) as c1, \
                clade.Cache(tree, max_seqs=2) as c2:
            a1, b1 = c1.add(0, [1, 2, 3]), c1.add(0, [4])
            a2, b2 = c2.add(0, [1, 2, 3]), c2.add(0, [4])
            for step in range(3):
                rows = c1.decode({a1: [5 + step], b1: [6]}, all_logits=step == 0)
                got = c2.decode_greedy({a2: [5 + step], b2: [6]}, all_logits=step == 0)
                want = [max(range(len(r)), key=lambda i, r=r: (r[i], -i)) for r in rows]
                self.assertEqual(len(got), 6 if step == 0 else 2)
                self.assertEqual(got, want)

    def test_bad_token(self):
        bad = self.model.n_vocab + 5
        with clade.Tree(self.model) as tree:
            with self.assertRaises(clade.CladeError) as e:
                tree.append(0, [1, bad])
            self.assertEqual(e.exception.status, _lib.CLADE_E_TOKEN)
            self.assertTrue(e.exception.message)
            with clade.Cache(tree) as cache:
                with self.assertRaises(clade.CladeError) as e:
                    cache.add(0, [bad])
                self.assertEqual(e.exception.status, _lib.CLADE_E_TOKEN)
                s = cache.add(0, [1])
                with self.assertRaises(clade.CladeError) as e:
                    cache.decode({s: [-1]})
                self.assertEqual(e.exception.status, _lib.CLADE_E_TOKEN)
                self.assertEqual(cache.length(s), 0)  # nothing changed
            with self.assertRaises(clade.CladeError) as e:
                tree.release(0)  # the root
            self.assertEqual(e.exception.status, _lib.CLADE_E_STATE)

    def test_cache_full(self):
        with clade.Tree(self.model) as tree, clade.Cache(tree, max_seqs=1, max_tokens=4) as c:
            s = c.add(0, [1, 2])
            with self.assertRaises(clade.CladeError) as e:
                c.decode({s: [3, 4, 5]})
            self.assertEqual(e.exception.status, _lib.CLADE_CACHE_FULL)
            self.assertEqual(len(c.decode({s: [3, 4]})), 1)

    def test_children(self):
        with clade.Tree(self.model) as tree:
            self.assertEqual(tree.children(0), [])
            a = tree.append(0, [1, 2])
            b = tree.append(0, [3])
            c = tree.append(a, [4])
            many = [tree.append(b, [i]) for i in range(12)]  # more than one buffer's worth
            self.assertEqual(tree.children(0), [a, b])
            self.assertEqual(tree.children(a), [c])
            self.assertEqual(tree.children(b), many)
            self.assertEqual(tree.children(c), [])
            for n in many:
                tree.release(n)
            tree.release(b)
            self.assertEqual(tree.children(0), [a])
            with self.assertRaises(clade.CladeError):
                tree.children(b)  # released: not a live node

    def _all_nodes(self, tree):
        """Every live node below the root, found through children listings."""
        out, todo = [], [clade.Tree.ROOT]
        while todo:
            kids = tree.children(todo.pop())
            out += kids
            todo += kids
        return sorted(out)

    # A at the root; B and C under A (ItemNode(0)); two sequences of a cache
    # under B (ItemNode(1)); every item with logits
    BATCH_A = [5, 17, 42, 99, 3, 250, 11]
    BATCH_B = [64, 7, 123]
    BATCH_C = [8, 1]
    BATCH_S = [[21, 150, 9], [299]]

    def test_append_batch(self):
        m = self.model
        A, B, C, S = self.BATCH_A, self.BATCH_B, self.BATCH_C, self.BATCH_S
        with clade.Tree(m, kv_type=clade.KV_F32) as tree, \
                clade.Cache(tree, max_seqs=4, max_tokens=64) as cache:
            # the three spellings of an item
            got = tree.append_batch([
                clade.AppendItem(clade.Tree.ROOT, A, want_logits=True),
                {"parent": clade.ItemNode(0), "tokens": B, "want_logits": True},
                (clade.ItemNode(0), C, None, True),
                (clade.ItemNode(1), S[0], cache, True),
                clade.AppendItem(clade.ItemNode(1), S[1], cache=cache, want_logits=True),
            ])
            self.assertEqual(len(got), 5)
            na, nb, nc = (r.node for r in got[:3])
            for r in got[:3]:
                self.assertIsNone(r.seq)
                self.assertGreater(r.node, 0)
            self.assertEqual(len({na, nb, nc}), 3)
            for n, toks, parent, path in ((na, A, 0, 0), (nb, B, na, len(A)),
                                          (nc, C, na, len(A))):
                self.assertEqual(tree.node_tokens(n), toks)
                i = tree.node_info(n)
                self.assertEqual((i["parent"], i["length"], i["path_length"]),
                                 (parent, len(toks), path))
            self.assertEqual(tree.children(na), [nb, nc])
            self.assertEqual(self._all_nodes(tree), sorted([na, nb, nc]))
            s0, s1 = got[3].seq, got[4].seq
            for r in got[3:]:
                self.assertIsNone(r.node)
                self.assertIsNotNone(r.seq)
            self.assertNotEqual(s0, s1)
            for s, toks in ((s0, S[0]), (s1, S[1])):
                self.assertEqual(cache.seq_node(s), nb)
                self.assertEqual(cache.seq_tokens(s), toks)  # evaluated, not queued
                self.assertEqual(cache.length(s), len(toks))
            for r in got:
                self.assertEqual(len(r.logits), m.n_vocab)

            # the same, one item at a time with the single-item calls
            with clade.Tree(m, kv_type=clade.KV_F32) as t1, \
                    clade.Cache(t1, max_seqs=4, max_tokens=64) as c1:
                a, la = t1.append(0, A, want_logits=True)
                b, lb = t1.append(a, B, want_logits=True)
                c, lc = t1.append(a, C, want_logits=True)
                want, seqs1 = [la, lb, lc], []
                for toks in S:
                    q = c1.add(b, toks)
                    (row,) = c1.decode({q: []})
                    want.append(row)
                    seqs1.append(q)
                for k, (r, w) in enumerate(zip(got, want)):
                    with self.subTest(item=k):
                        assert_close(self, r.logits, w)
                # the batch's sequences go on as the one-at-a-time ones
                x = cache.decode({s0: [33], s1: [44]})
                y = c1.decode({seqs1[0]: [33], seqs1[1]: [44]})
                for r, w in zip(x, y):
                    assert_close(self, r, w)
            for n in (na, nb, nc):
                tree.release(n)

    def test_append_batch_atomic(self):
        m = self.model
        bad = m.n_vocab  # one past the vocabulary
        with clade.Tree(m, kv_type=clade.KV_F32) as tree, \
                clade.Cache(tree, max_seqs=4, max_tokens=64) as cache:
            keep = tree.append(0, [1, 2, 3])
            before, used = self._all_nodes(tree), tree.kv_used()
            # a bad token in the last item: nothing added, by any item
            for last in ((clade.ItemNode(1), [4, bad], cache, True),
                         (clade.ItemNode(0), [bad], None, False)):
                with self.subTest(last=last):
                    with self.assertRaises(clade.CladeError) as e:
                        tree.append_batch([
                            (keep, self.BATCH_A, None, True),
                            (clade.ItemNode(0), self.BATCH_B),
                            (clade.ItemNode(1), [7, 8], cache, True),
                            last,
                        ])
                    self.assertEqual(e.exception.status, _lib.CLADE_E_TOKEN)
                    self.assertTrue(e.exception.message)
                    self.assertEqual(self._all_nodes(tree), before)
                    self.assertEqual(tree.kv_used(), used)
                    self.assertEqual(tree.node_info(keep)["n_children"], 0)
            # a parent that is no earlier item, or not a node item
            for items in ([(clade.ItemNode(0), [1])],
                          [(keep, [1]), (clade.ItemNode(5), [2])],
                          [(keep, [1], cache), (clade.ItemNode(0), [2])]):
                with self.subTest(items=items):
                    n_before = self._all_nodes(tree)
                    with self.assertRaises(clade.CladeError):
                        tree.append_batch(items)
                    self.assertEqual(self._all_nodes(tree), n_before)
            # a cache of another tree is refused (the C side checks)
            with clade.Tree(m) as other, clade.Cache(other) as foreign:
                with self.assertRaises(clade.CladeError):
                    tree.append_batch([(keep, [1], foreign)])
                self.assertEqual(foreign.kv_bytes, 0)
            # the cache has no sequence from the failed calls: all its slots
            # are free
            got = tree.append_batch([(keep, [9], cache)] * 4)
            self.assertEqual(len(set(r.seq for r in got)), 4)
            with self.assertRaises(clade.CacheFull):
                cache.add(keep, [1])
            # and one more is CacheFull, with nothing added
            n_before = self._all_nodes(tree)
            with self.assertRaises(clade.CacheFull):
                tree.append_batch([(keep, [1]), (clade.ItemNode(0), [2], cache)])
            self.assertEqual(self._all_nodes(tree), n_before)
            # bad items in Python itself
            with self.assertRaises(TypeError):
                tree.append_batch([(keep,)])
            with self.assertRaises(TypeError):
                tree.append_batch([{"parent": keep, "tokens": [1], "colour": 1}])
            with self.assertRaises(ValueError):
                clade.ItemNode(-1)
            tree.release(keep)

    def test_append_batch_empty(self):
        # the ctypes struct has the library's layout size, and its defaults
        it = _lib.clade_append_item()
        _lib.clade_append_item_init(it)
        self.assertEqual(it.size, ctypes.sizeof(_lib.clade_append_item))
        self.assertEqual((it.parent, it.n_tokens, it.node, it.seq), (0, 0, -1, -1))
        self.assertEqual(_lib.CLADE_ITEM_NODE(3), -5)
        with clade.Tree(self.model) as tree:
            self.assertEqual(tree.append_batch([]), [])
            self.assertEqual(tree.append_batch(iter(())), [])
            self.assertEqual(self._all_nodes(tree), [])
            # items without logits, an empty node item among them
            got = tree.append_batch([(0, []), (clade.ItemNode(0), [1, 2])])
            self.assertEqual([r.logits for r in got], [None, None])
            self.assertEqual(tree.node_info(got[1].node)["parent"], got[0].node)
            self.assertEqual(tree.node_info(got[0].node)["length"], 0)

    def test_fork(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree, \
                clade.Cache(tree, max_seqs=4, max_tokens=64) as cache:
            node = tree.append(0, [5, 6, 7, 8])
            s = cache.add(node, [9, 10])
            cache.decode({s: [11]})
            f = cache.fork(s)
            self.assertNotEqual(f, s)
            self.assertEqual(cache.seq_node(f), node)
            self.assertEqual(cache.seq_tokens(f), [9, 10, 11])
            self.assertEqual(cache.seq_tokens(s), [9, 10, 11])
            a, b = cache.decode({s: [12], f: [12]})
            assert_close(self, a, b)
            # a fork copies the queued tokens too
            q = cache.add(node, [13, 14])
            g = cache.fork(q)
            a, b = cache.decode({q: [], g: []})
            assert_close(self, a, b)
            self.assertEqual(cache.seq_tokens(g), [13, 14])
            tree.release(node)
            with clade.Cache(tree, max_seqs=1) as one:
                t = one.add(0)
                with self.assertRaises(clade.CacheFull):
                    one.fork(t)

    def test_decode_tree_and_keep(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree, \
                clade.Cache(tree, max_seqs=3, max_tokens=64) as cache:
            node = tree.append(0, [5, 6, 7, 8])
            s = cache.add(node, [9, 10])
            cache.decode({s: []})
            c, d = cache.fork(s), cache.fork(s)
            # 21 and 30 after the history, 31 under 30, 22 under 21
            rows = cache.decode_tree({s: [21, 30, 31, 22]}, {s: [-1, -1, 1, 0]}, all_logits=True)
            self.assertEqual(len(rows), 4)
            self.assertEqual(cache.length(s), 6)
            # each branch as the chain decoded alone; d is a chain (no parents)
            a = cache.decode({c: [30, 31]}, all_logits=True)
            b = cache.decode_tree({d: [21, 22]}, {}, all_logits=True)
            for got, want in zip(rows, [b[0], a[0], a[1], b[1]]):
                assert_close(self, got, want)
            # keep the path 30, 31: as if only it was decoded
            cache.keep(s, 2, [1, 2])
            self.assertEqual(cache.length(s), 4)
            self.assertEqual(cache.seq_tokens(s), cache.seq_tokens(c))
            a, b = cache.decode({s: [40], c: [40]})
            assert_close(self, a, b)
            # bad parents, a parents list of the wrong length, a bad keep:
            # CLADE_E_INVALID_ARG, nothing changed
            for step, parents in [({s: [1, 2]}, {s: [0, -1]}), ({s: [1, 2]}, {s: [-1, 5]}),
                                  ({s: [1, 2]}, {s: [-1]}), ({s: [1]}, {c: [-1]})]:
                with self.assertRaises(clade.CladeError) as e:
                    cache.decode_tree(step, parents)
                self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG, parents)
            with self.assertRaises(clade.CladeError) as e:
                cache.keep(s, 2, [1, 0])
            self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG)
            self.assertEqual(cache.length(s), 5)
            tree.release(node)

    def test_promote_and_move(self):
        prompt = [5, 17, 42, 99]
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree, \
                clade.Cache(tree, max_seqs=6, max_tokens=64) as cache:
            node = tree.append(0, prompt)
            a = cache.add(node, [21, 22])
            cache.decode({a: [23]})
            b = cache.fork(a)  # B shares A's unique tokens, then goes on
            cache.decode({b: [31, 32]})
            self.assertEqual(cache.length(b), 5)
            probe = cache.fork(b)  # B's next logits before the move
            (want,) = cache.decode({probe: [40]})

            unique = cache.seq_tokens(a)
            self.assertEqual(unique, [21, 22, 23])
            p = cache.promote(a)
            self.assertIn(p, tree.children(node))
            self.assertEqual(tree.node_tokens(p), unique)
            info = tree.node_info(p)
            self.assertEqual((info["parent"], info["length"], info["path_length"]),
                             (node, 3, len(prompt)))
            self.assertEqual(cache.seq_node(a), p)
            self.assertEqual(cache.length(a), 0)
            self.assertEqual(cache.seq_tokens(a), [])
            # a second sequence under the new node decodes as the promoted one
            c = cache.add(p)
            ra, rc = cache.decode({a: [50], c: [50]})
            assert_close(self, ra, rc)

            # move B under the new node: its logits stay, its unique part shrinks
            cache.move(b, p)
            self.assertEqual(cache.seq_node(b), p)
            self.assertEqual(cache.length(b), 2)
            self.assertEqual(cache.seq_tokens(b), [31, 32])
            (got,) = cache.decode({b: [40]})
            assert_close(self, got, want)
            # a node that is not a prefix of the history
            other = tree.append(0, [1, 2, 3])
            with self.assertRaises(clade.CladeError) as e:
                cache.move(b, other)
            self.assertEqual(e.exception.status, _lib.CLADE_E_STATE)
            for n in (other, p, node):
                tree.release(n)

    def test_kv_budget(self):
        with clade.Tree(self.model, kv_budget=0) as tree, \
                clade.Cache(tree, max_seqs=2, max_tokens=64) as cache:
            s = cache.add(0)
            used = tree.kv_used()
            tree.set_kv_budget(max(used, 1))
            with self.assertRaises(clade.KVBudgetExceeded) as e:
                tree.append(0, [1, 2, 3])
            self.assertEqual(e.exception.status, _lib.CLADE_KV_BUDGET)
            self.assertEqual(tree.children(0), [])
            with self.assertRaises(clade.KVBudgetExceeded):
                cache.decode({s: list(range(1, 41))})
            self.assertEqual(cache.length(s), 0)
            self.assertEqual(tree.kv_used(), used)
            tree.set_kv_budget(0)  # no limit: the same calls succeed
            node = tree.append(0, [1, 2, 3])
            self.assertEqual(len(cache.decode({s: list(range(1, 41))})), 1)
            self.assertGreater(tree.kv_used(), used)
            tree.release(node)
        # the budget as a tree parameter
        with clade.Tree(self.model, kv_budget=1) as tree:
            with self.assertRaises(clade.KVBudgetExceeded):
                tree.append(0, [1, 2, 3])

    def test_abort(self):
        calls = []
        with clade.Tree(self.model) as tree, clade.Cache(tree, max_seqs=2) as cache:
            s = cache.add(0, [1, 2, 3])
            tree.set_abort(lambda: calls.append(1) or True)
            with self.assertRaises(clade.Stopped) as e:
                cache.decode({s: [4]})
            self.assertEqual(e.exception.status, _lib.CLADE_STOPPED)
            self.assertTrue(calls)
            self.assertEqual(cache.length(s), 0)  # nothing changed, tokens still queued
            with self.assertRaises(clade.Stopped):
                tree.append(0, [5, 6])
            self.assertEqual(tree.children(0), [])

            def boom():
                raise KeyError("from the callback")
            tree.set_abort(boom)
            with self.assertRaises(KeyError):
                cache.decode({s: [4]})
            self.assertEqual(cache.length(s), 0)

            n = len(calls)
            tree.set_abort(lambda: calls.append(1) and False)  # runs, never stops
            self.assertEqual(len(cache.decode({s: [4]})), 1)
            self.assertGreater(len(calls), n)
            tree.set_abort(None)
            self.assertEqual(cache.length(s), 4)
            self.assertEqual(len(cache.decode({s: [5]})), 1)

    def test_log(self):
        got = []
        clade.set_log(lambda level, msg: got.append((level, msg)), clade.LOG_INFO)
        try:
            clade.Model(self.path, n_threads=1).close()
        finally:
            clade.set_log(None)
        self.assertTrue(got, "no log message for a model load")
        for level, msg in got:
            self.assertIn(level, (clade.LOG_INFO, clade.LOG_WARN, clade.LOG_ERROR))
            self.assertIsInstance(msg, str)
        n = len(got)
        clade.Model(self.path, n_threads=1).close()
        self.assertEqual(len(got), n)  # off again

    def test_bad_path(self):
        with self.assertRaises(clade.CladeError) as e:
            clade.Model(os.path.join(_tmp, "does-not-exist.gguf"))
        self.assertEqual(e.exception.status, _lib.CLADE_E_IO)
        self.assertIn("does-not-exist", e.exception.message)
        junk = os.path.join(_tmp, "junk.gguf")
        with open(junk, "wb") as f:
            f.write(b"this is not a gguf file at all" * 4)
        with self.assertRaises(clade.CladeError) as e:
            clade.Model(junk)
        self.assertEqual(e.exception.status, _lib.CLADE_E_FORMAT)


class TokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(SPM_VOCAB):
            raise AssertionError("no reference vocabulary at %s (set CLADE_VOCAB_DIR)" % SPM_VOCAB)
        cls.model = clade.Model(random_model("spm.gguf", "--vocab-from", SPM_VOCAB), n_threads=1)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_round_trip(self):
        m = self.model
        sp = m.special_tokens()
        for text in ["Hello world", "héllo, wörld! 日本語 🙂", "  two  spaces\nand a line",
                     "x = f(y) + 42;"]:
            ids = m.tokenize(text)
            self.assertTrue(ids)
            if sp["add_bos"]:
                self.assertEqual(ids[0], sp["bos"])
            self.assertEqual(m.detokenize(ids), text)
            self.assertEqual("".join(m.stream(ids)), text)
            no_bos = m.tokenize(text, add_special=False)
            self.assertNotIn(sp["bos"], no_bos)
        self.assertEqual(m.tokenize("", add_special=False), [])
        self.assertEqual(m.token_to_piece(m.tokenize("Hello", add_special=False)[0]).strip(),
                         b"Hello")

    def test_detokenizer_outlives_model(self):
        m = clade.Model(self.model.path, n_threads=1)
        ids = m.tokenize("Hello world", add_special=False)
        d = clade.Detokenizer(m)
        m.close()  # the detokenizer keeps the model alive
        self.assertEqual("".join([d.push(t) for t in ids]) + d.flush(), "Hello world")
        d.close()

    def test_bad_utf8(self):
        with self.assertRaises(clade.CladeError) as e:
            self.model.tokenize(b"ok \xff\xfe")
        self.assertEqual(e.exception.status, _lib.CLADE_E_UTF8)

    def test_chat_apply(self):
        m = self.model
        self.assertIn("chatml", clade.chat_templates())
        conv = [("system", "Be brief."), {"role": "user", "content": "Hi"},
                ("assistant", "Hello."), ("user", "Bye")]
        text = m.chat_apply(conv, "chatml")
        self.assertEqual(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                               "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                               "<|im_start|>assistant\n")
        self.assertEqual(clade.chat_apply(conv[1:2], "llama2"), "[INST] Hi [/INST]")
        ids = m.tokenize(m.chat_apply(conv, "llama2"), add_special=True, parse_special=True)
        sp = m.special_tokens()
        self.assertEqual(ids[0], sp["bos"])
        self.assertEqual(ids.count(sp["eos"]), 1)
        # the random model has no template: unsupported, as is an unknown name
        for call in (lambda: m.chat_apply(conv), lambda: m.chat_template_name(),
                     lambda: m.chat_apply(conv, "vicuna")):
            with self.assertRaises(clade.CladeError) as e:
                call()
            self.assertEqual(e.exception.status, _lib.CLADE_E_UNSUPPORTED)
        with self.assertRaises(clade.CladeError) as e:
            m.chat_apply([("user", "a"), ("user", "b")], "gemma")
        self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG)


class GenerateTest(unittest.TestCase):
    """Tree.generate / generate_stream over clade_generate, on a random model
    with a real tokenizer (stop strings need text)."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(SPM_VOCAB):
            raise AssertionError("no reference vocabulary at %s (set CLADE_VOCAB_DIR)" % SPM_VOCAB)
        cls.model = clade.Model(random_model("spm.gguf", "--vocab-from", SPM_VOCAB), n_threads=1)
        cls.a = cls.model.tokenize("Once upon a time")
        cls.b = cls.model.tokenize(" there was", add_special=False)
        cls.prompts = [cls.a, (cls.b, 0)]  # b under a: one leaf

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def gen(self, tree, **kw):
        kw.setdefault("max_new_tokens", 5)
        kw.setdefault("samples", 2)
        kw.setdefault("temperature", 0)
        return tree.generate(self.prompts, **kw)

    def test_greedy_tree_matches_step_loop(self):
        m = self.model
        with clade.Tree(m, kv_type=clade.KV_F32) as tree:
            res = self.gen(tree)
            self.assertEqual(res, self.gen(tree))  # deterministic
            # the same by hand: the prompt tree, then greedy decode steps
            na = tree.append(clade.Tree.ROOT, self.a)
            nb, row = tree.append(na, self.b, want_logits=True)
            with clade.Cache(tree, kv_type=clade.KV_F32) as cache:
                s = cache.add(nb)
                want = []
                while len(want) < 5:
                    t = argmax(row)
                    if m.is_eog(t):
                        break
                    want.append(t)
                    (row,) = cache.decode({s: [t]})
            tree.release(nb)
            tree.release(na)
            self.assertEqual(tree.children(clade.Tree.ROOT), [])  # generate left no node
        self.assertEqual(len(res), 2)
        for g in res:
            self.assertEqual(g.tokens, want)
            self.assertEqual(g.prompt, 1)
            self.assertEqual(g.finish, "length" if len(want) == 5 else "stop_token")
            self.assertIsNone(g.logprobs)

    def test_stop_string_cuts_the_text(self):
        with clade.Tree(self.model) as tree:
            full = self.gen(tree)[0]
            self.assertGreaterEqual(len(full.text), 4, full)
            stop = full.text[2:4]
            cut = self.gen(tree, stop=["\x01never", stop])
        for g in cut:
            self.assertEqual(g.text, full.text[:full.text.find(stop)])
            self.assertEqual(g.finish, "stop_string")
            self.assertEqual(g.tokens, full.tokens[:len(g.tokens)])

    def test_stream_pieces_make_the_text(self):
        kw = dict(max_new_tokens=8, samples=2, temperature=0.9, seed=3, logprobs=True)
        with clade.Tree(self.model) as tree:
            res = tree.generate(self.prompts, **kw)
            for g in res:
                self.assertEqual(len(g.logprobs), len(g.tokens))
                self.assertTrue(all(lp <= 0 for lp in g.logprobs))
            texts = ["", ""]
            calls = []

            def cb(seq, token, piece):
                texts[seq] += piece
                calls.append((seq, token))

            self.assertEqual(tree.generate(self.prompts, callback=cb, **kw), res)
            self.assertEqual(texts, [g.text for g in res])
            self.assertEqual(sorted(c for c in calls if c[1] is None), [(0, None), (1, None)])
            self.assertEqual(len(calls), sum(len(g.tokens) + 1 for g in res))
            stream = tree.generate_stream(self.prompts, **kw)
            texts = ["", ""]
            for seq, piece in stream:
                self.assertTrue(piece)
                texts[seq] += piece
            self.assertEqual(stream.results, res)
            self.assertFalse(stream.stopped)
            self.assertEqual(texts, [g.text for g in res])
        got = self.model.generate(self.prompts, **kw)  # on a tree of its own
        self.assertEqual([g.tokens for g in got], [g.tokens for g in res])

    def test_callback_stops_one_sequence(self):
        with clade.Tree(self.model) as tree:
            res = self.gen(tree, callback=lambda seq, tok, piece: clade.STOP_SEQ if seq == 1 else None,
                           ignore_eog=True)
            self.assertEqual(res[1].finish, "callback")
            self.assertEqual(len(res[1].tokens), 1)
            self.assertEqual((res[0].finish, len(res[0].tokens)), ("length", 5))
            self.assertEqual(res[1].tokens, res[0].tokens[:1])
            # STOP_ALL: results still come back
            res = self.gen(tree, callback=lambda seq, tok, piece: clade.STOP_ALL, ignore_eog=True)
            self.assertEqual([g.finish for g in res], ["callback", "callback"])
            # breaking out of a stream stops the generation
            stream = tree.generate_stream(self.prompts, max_new_tokens=50, samples=2,
                                          temperature=0, ignore_eog=True)
            next(stream)
            stream.close()
            self.assertTrue(stream.stopped)
            self.assertIn("callback", [g.finish for g in stream.results])
            self.assertEqual(len(self.gen(tree)), 2)  # the tree works on

    def test_callback_exception_stops_and_is_raised(self):
        seen = []

        def cb(seq, token, piece):
            seen.append(seq)
            if len(seen) == 2:
                raise KeyError("boom")

        with clade.Tree(self.model) as tree:
            with self.assertRaises(KeyError):
                self.gen(tree, callback=cb, max_new_tokens=50, ignore_eog=True)
            self.assertLess(len(seen), 20)
            self.assertEqual(tree.children(clade.Tree.ROOT), [])
            stream = tree.generate_stream(self.prompts, max_new_tokens=5, callback=cb)
            with self.assertRaises(TypeError):  # generate_stream takes no callback
                list(stream)
            self.assertEqual(len(self.gen(tree)), 2)

    def test_errors(self):
        nv = self.model.n_vocab
        with clade.Tree(self.model) as tree:
            for prompts, kw, status in [
                    ([[1, nv + 3]], {}, _lib.CLADE_E_TOKEN),
                    ([[1, 2], ([], 0)], {}, _lib.CLADE_E_INVALID_ARG),  # an empty leaf
                    ([[1, 2]], {"max_new_tokens": 0}, _lib.CLADE_E_INVALID_ARG),
                    ([[1, 2], ([3], 1)], {}, _lib.CLADE_E_INVALID_ARG),  # not an earlier prompt
                    ([[1, 2]], {"top_p": 2.0, "temperature": 1.0}, _lib.CLADE_E_INVALID_ARG)]:
                with self.assertRaises(clade.CladeError, msg=repr((prompts, kw))) as e:
                    tree.generate(prompts, **kw)
                self.assertEqual(e.exception.status, status, e.exception)
            stream = tree.generate_stream([[nv + 1]])
            with self.assertRaises(clade.CladeError):
                list(stream)
        with self.assertRaises(clade.CladeError):  # no tokenizer: no stop strings
            with clade.Model(random_model("small.gguf", "--vocab", "300"), n_threads=1) as m:
                m.generate([[1, 2]], stop=["x"], max_new_tokens=2)


class SpeculativeTest(unittest.TestCase):
    """generate with draft=, draft_model= and lookup= (clade_generate_speculative):
    greedy output equals plain greedy output, token for token."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(SPM_VOCAB):
            raise AssertionError("no reference vocabulary at %s (set CLADE_VOCAB_DIR)" % SPM_VOCAB)
        cls.model = clade.Model(random_model("spm.gguf", "--vocab-from", SPM_VOCAB), n_threads=1)
        # another random model of the same vocabulary: a (useless but valid) draft model
        cls.draft = clade.Model(random_model("spm-draft.gguf", "--vocab-from", SPM_VOCAB,
                                             "--layers", "1", "--seed", "11"), n_threads=1)
        a = cls.model.tokenize("Once upon a time there was a cat. Once upon a time")
        b = cls.model.tokenize(" there was", add_special=False)
        cls.prompts = [a, (b, 0), [1, 5, 9, 5, 9, 5]]  # two leaves
        cls.kw = dict(max_new_tokens=12, samples=2, temperature=0, ignore_eog=True)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()
        cls.draft.close()

    def plain(self, tree):
        res = tree.generate(self.prompts, **self.kw)
        self.assertEqual(len(res), 4)
        self.assertEqual(res.stats.drafted, 0)
        self.assertEqual(res.stats.tokens, sum(len(g.tokens) for g in res))
        return res

    def check_same(self, want, got):
        self.assertEqual([g.tokens for g in got], [g.tokens for g in want])
        self.assertEqual([g.text for g in got], [g.text for g in want])
        self.assertEqual([g.finish for g in got], [g.finish for g in want])
        st = got.stats
        self.assertIsInstance(st, clade.GenerationStats)
        self.assertEqual(st.tokens, sum(len(g.tokens) for g in got))
        self.assertLessEqual(st.accepted, st.drafted)
        self.assertLessEqual(st.spec_steps, st.steps)

    def test_lookup(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            for adaptive in (True, False):
                got = tree.generate(self.prompts, lookup=3, max_draft=4, adaptive=adaptive, **self.kw)
                self.check_same(want, got)
                self.assertEqual(got.stats.draft_steps, 0)
            self.assertEqual(tree.children(clade.Tree.ROOT), [])
        # a 300-token vocabulary: greedy output soon repeats itself, and
        # lookup drafts (and gets some accepted)
        prompts = [[1, 5, 9, 5, 9, 5], [7, 8, 9]]
        kw = dict(max_new_tokens=40, temperature=0, ignore_eog=True)
        with clade.Model(random_model("small.gguf", "--vocab", "300"), n_threads=1) as m, \
                clade.Tree(m, kv_type=clade.KV_F32) as tree:
            want = tree.generate(prompts, **kw)
            for width in (1, 3):  # chains, and lookup trees (clade 1.2)
                got = tree.generate(prompts, lookup=3, adaptive=False, tree_width=width, **kw)
                self.check_same(want, got)
                self.assertGreater(got.stats.accepted, 0)
                self.assertGreater(got.stats.spec_steps, 0)
                self.assertLess(got.stats.steps, want.stats.steps)
            # sampling: another draw of the same distribution, as many tokens
            kw.update(temperature=0.9, seed=5, samples=2)
            got = tree.generate(prompts, lookup=3, **kw)
            self.assertEqual([len(g.tokens) for g in got], [40] * 4)
            self.assertEqual(got.stats.tokens, 160)
            self.assertTrue(all(0 <= t < 300 for g in got for t in g.tokens))

    def test_draft_model(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            got = tree.generate(self.prompts, draft_model=self.draft, adaptive=False, max_draft=3,
                                **self.kw)
            self.check_same(want, got)
            self.assertGreater(got.stats.draft_steps, 0)
            self.assertGreater(got.stats.drafted, 0)
            # the target as its own draft model: every draft token is accepted
            got = tree.generate(self.prompts, draft_model=self.model, adaptive=False, **self.kw)
            self.check_same(want, got)
            self.assertEqual(got.stats.accepted, got.stats.drafted)
            self.assertLess(got.stats.steps, got.stats.tokens)
        # Model.generate passes the options through
        self.check_same(want, self.model.generate(self.prompts, draft_model=self.draft, **self.kw))

    def test_python_drafter(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            calls = []

            def fixed(seq, history, max_tokens):
                calls.append((seq, len(history), max_tokens))
                return [3, 4, 5, 6][:max_tokens]

            got = tree.generate(self.prompts, draft=fixed, adaptive=False, max_draft=4, **self.kw)
            self.check_same(want, got)
            self.assertTrue(calls)
            self.assertEqual({c[0] for c in calls}, {0, 1, 2, 3})
            self.assertTrue(all(c[2] <= 4 for c in calls))
            self.assertEqual(got.stats.draft_steps, 0)

            # an oracle: the plain output's continuation, from the history
            lens = [len(self.prompts[0]) + len(self.prompts[1][0])] * 2 + [len(self.prompts[2])] * 2
            hist = {}

            def oracle(seq, history, max_tokens):
                self.assertIsInstance(history, list)
                hist[seq] = history
                done = len(history) - lens[seq]  # output tokens so far
                return want[seq].tokens[done:done + max_tokens]

            got = tree.generate(self.prompts, draft=oracle, adaptive=False, **self.kw)
            self.check_same(want, got)
            self.assertEqual(got.stats.accepted, got.stats.drafted)
            self.assertGreater(got.stats.accepted, 0)
            self.assertLess(got.stats.steps, got.stats.tokens)
            self.assertEqual(hist[2][:len(self.prompts[2])], self.prompts[2])
            self.assertEqual(hist[0][:lens[0]], self.prompts[0] + self.prompts[1][0])

            # None or [] are no draft; generate_stream takes the options too
            got = tree.generate(self.prompts, draft=lambda s, h, m: None, adaptive=False, **self.kw)
            self.check_same(want, got)
            self.assertEqual(got.stats.drafted, 0)
            stream = tree.generate_stream(self.prompts, draft=oracle, adaptive=False, **self.kw)
            texts = [""] * 4
            for seq, piece in stream:
                texts[seq] += piece
            self.check_same(want, stream.results)
            self.assertEqual(texts, [g.text for g in want])

    def test_tree_width(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            for kw in [dict(lookup=3), dict(draft_model=self.draft), dict(draft_model=self.model)]:
                for adaptive in (True, False):
                    got = tree.generate(self.prompts, tree_width=2, max_draft=6, adaptive=adaptive,
                                        **dict(self.kw, **kw))
                    self.check_same(want, got)
            # its own draft model: the likeliest chain of each tree is accepted
            self.assertGreater(got.stats.accepted, 0)
            self.assertLess(got.stats.steps, got.stats.tokens)
            self.assertEqual(tree.children(clade.Tree.ROOT), [])
        # (test_lookup runs lookup trees where they get accepted)

    def test_python_tree_drafter(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            lens = [len(self.prompts[0]) + len(self.prompts[1][0])] * 2 + [len(self.prompts[2])] * 2
            widths, trees = [], [0]

            def oracle_tree(seq, history, max_tokens):
                # a wrong token, then the right one beside it (two siblings
                # under the pending token) and the right chain under that
                done = len(history) - lens[seq]
                right = want[seq].tokens[done:done + max_tokens - 1]
                if not right:
                    return None
                wrong = (right[0] + 1) % self.model.n_vocab
                trees[0] += 1
                return [wrong] + right, [-1, -1] + list(range(1, len(right)))

            for width in (2, 8):
                trees[0] = 0
                got = tree.generate(self.prompts, draft=oracle_tree, tree_width=width, adaptive=False,
                                    **self.kw)
                self.check_same(want, got)
                self.assertGreater(got.stats.accepted, 0)
                self.assertLess(got.stats.steps, got.stats.tokens)
                # every node but the wrong sibling accepted
                self.assertEqual(got.stats.drafted - got.stats.accepted, trees[0])

            def fixed(seq, history, max_tokens):
                widths.append(max_tokens)
                return ([3, 4, 5, 6], [-1, -1, 0, 1]) if max_tokens >= 4 else None

            got = tree.generate(self.prompts, draft=fixed, tree_width=2, max_draft=4, adaptive=False,
                                **self.kw)
            self.check_same(want, got)
            self.assertTrue(widths)
            # a chain as a pair, or with parents None, with tree_width 1
            for answer in [([3, 4], [-1, 0]), ([3, 4], None), (3, 4)]:
                got = tree.generate(self.prompts, draft=lambda s, h, m: answer if m >= 2 else None,
                                    adaptive=False, **self.kw)
                self.check_same(want, got)
                self.assertGreater(got.stats.drafted, 0)
            self.assertEqual(tree.children(clade.Tree.ROOT), [])

    def test_tree_drafter_errors(self):
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            for answer, width in [(([3, 4], [0, -1]), 2),       # a parent not before its child
                                  (([3, 4], [-1, 7]), 2),
                                  (([3, 4], [-1, -2]), 2),
                                  (([3, 4], [-1, 2 ** 40]), 2),  # no silent wrap to int32
                                  (([3, 4, 5], [-1, -1, -1]), 2),  # too many children
                                  (([3, 4], [-1, -1]), 1),       # a tree with tree_width 1
                                  (([3, 4], [-1]), 2)]:          # one parent per token
                with self.assertRaises(clade.CladeError) as e:
                    tree.generate(self.prompts, draft=lambda s, h, m: answer, tree_width=width,
                                  adaptive=False, **self.kw)
                self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG, answer)
                self.assertEqual(tree.children(clade.Tree.ROOT), [])
            with self.assertRaises(TypeError):  # not a parent
                tree.generate(self.prompts, draft=lambda s, h, m: ([3], [None]), tree_width=2,
                              adaptive=False, **self.kw)
            for width in (0, 9):
                with self.assertRaises(clade.CladeError) as e:
                    tree.generate(self.prompts, lookup=2, tree_width=width, **self.kw)
                self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG)
            self.check_same(want, tree.generate(self.prompts, lookup=2, tree_width=2, **self.kw))

    def test_drafter_errors(self):
        nv = self.model.n_vocab
        with clade.Tree(self.model, kv_type=clade.KV_F32) as tree:
            want = self.plain(tree)
            for bad, status in [
                    (lambda s, h, m: [nv], _lib.CLADE_E_TOKEN),
                    (lambda s, h, m: [1, -5], _lib.CLADE_E_TOKEN),
                    (lambda s, h, m: [2 ** 40], _lib.CLADE_E_TOKEN),  # no silent wrap to int32
                    (lambda s, h, m: [1] * (m + 1), _lib.CLADE_E_INVALID_ARG)]:
                with self.assertRaises(clade.CladeError) as e:  # fixed length: the whole budget asked
                    tree.generate(self.prompts, draft=bad, adaptive=False, **self.kw)
                self.assertEqual(e.exception.status, status, e.exception)
                self.assertEqual(tree.children(clade.Tree.ROOT), [])
                self.check_same(want, tree.generate(self.prompts, lookup=2, **self.kw))
            # an exception in the drafter stops the call and comes out as itself
            n = [0]

            def boom(seq, history, max_tokens):
                n[0] += 1
                if n[0] == 3:
                    raise KeyError("drafter")
                return []

            with self.assertRaises(KeyError):
                tree.generate(self.prompts, draft=boom, adaptive=False, **self.kw)
            self.assertEqual(n[0], 3)
            with self.assertRaises(TypeError):  # not a token
                tree.generate(self.prompts, draft=lambda s, h, m: [1.5], adaptive=False, **self.kw)
            with self.assertRaises(ZeroDivisionError):
                list(tree.generate_stream(self.prompts, draft=lambda s, h, m: [1 // 0], adaptive=False, **self.kw))
            self.assertEqual(tree.children(clade.Tree.ROOT), [])
            self.check_same(want, self.plain(tree))
            # the library's own argument checks
            for kw in [dict(lookup=2, draft_model=self.draft), dict(lookup=2, max_draft=0),
                       dict(lookup=65), dict(lookup=-1)]:
                with self.assertRaises(clade.CladeError) as e:
                    tree.generate(self.prompts, **dict(self.kw, **kw))
                self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG, kw)
            with clade.Model(random_model("small.gguf", "--vocab", "300"), n_threads=1) as other:
                with self.assertRaises(clade.CladeError) as e:  # another vocabulary
                    tree.generate(self.prompts, draft_model=other, **self.kw)
                self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG)
            with self.assertRaises(TypeError):
                tree.generate(self.prompts, draft_model="model.gguf", **self.kw)
            self.check_same(want, self.plain(tree))


if __name__ == "__main__":
    unittest.main()
