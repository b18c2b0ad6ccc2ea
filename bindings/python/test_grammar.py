"""Tests of the Python bindings' structured output (clade 1.5): Grammar from a
dict schema, GBNF and regex, generate(grammar=...) output valid JSON with the
required keys, a bad schema's error naming the keyword, and the Matcher.

Run as test_clade.py (the same environment variables):
    /usr/bin/python3 bindings/python/test_grammar.py -v
"""
import json
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

CLI = os.environ.get("CLADE_CLI") or os.path.join(ROOT, "build", "tools", "clade", "clade")
VOCAB_DIR = os.environ.get("CLADE_VOCAB_DIR") or os.path.join(ROOT, "tests", "data", "vocab")
SPM_VOCAB = os.path.join(VOCAB_DIR, "ggml-vocab-llama-spm.gguf")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


class GrammarTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(CLI, os.X_OK):
            raise unittest.SkipTest("clade CLI not found at %s (set CLADE_CLI)" % CLI)
        cls.tmp = tempfile.mkdtemp(prefix="clade-py-grammar-")
        path = os.path.join(cls.tmp, "spm.gguf")
        subprocess.run([CLI, "model", "random", "-o", path, "--layers", "1", "--dim", "32", "--heads", "2",
                        "--kv-heads", "1", "--ff", "64", "--type", "f32", "--seed", "3",
                        "--vocab-from", SPM_VOCAB], check=True, stdout=subprocess.DEVNULL)
        cls.model = clade.Model(path, n_threads=1)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def prompt(self):
        return self.model.tokenize("The record as JSON:")

    def test_dict_schema_generate(self):
        with clade.Tree(self.model) as tree:
            for temp in (0.0, 0.9):
                res = tree.generate([self.prompt()], max_new_tokens=120, samples=4, temperature=temp,
                                    seed=5, grammar=SCHEMA)
                self.assertEqual(len(res), 4)
                for g in res:
                    if g.finish != "stop_token":
                        continue
                    v = json.loads(g.text)
                    self.assertEqual(set(v), {"name", "age", "tags"}, g.text)
                    self.assertTrue(0 <= v["age"] <= 120)
                    self.assertTrue(all(t in "abc" for t in v["tags"]))
                self.assertTrue(any(g.finish == "stop_token" for g in res), [g.text for g in res])

    def test_grammar_objects(self):
        g = clade.Grammar(self.model, json_schema=json.dumps(SCHEMA), jump_forward=False)
        r = clade.Grammar(self.model, regex="(yes|no)")
        gb = clade.Grammar(self.model, gbnf='root ::= "x" [0-9]')
        with clade.Tree(self.model) as tree:
            res = tree.generate([self.prompt(), self.prompt()], max_new_tokens=20, temperature=0.9,
                                grammar=[r, gb])
            self.assertIn(res[0].text, ("yes", "no"))
            self.assertRegex(res[1].text, r"^x[0-9]$")
            res = tree.generate([self.prompt()], max_new_tokens=120, temperature=0, grammar=g)
            if res[0].finish == "stop_token":
                json.loads(res[0].text)
        for gr in (g, r, gb):
            gr.close()

    def test_bad_schema(self):
        with self.assertRaises(clade.CladeError) as e:
            clade.Grammar(self.model, json_schema={"type": "array", "uniqueItems": True})
        self.assertEqual(e.exception.status, _lib.CLADE_E_INVALID_ARG)
        self.assertIn("uniqueItems", str(e.exception))
        with self.assertRaises(clade.CladeError):
            clade.Grammar(self.model, gbnf="root ::= (")
        with self.assertRaises(ValueError):
            clade.Grammar(self.model)
        # lenient: the keyword is dropped
        clade.Grammar(self.model, json_schema={"type": "array", "uniqueItems": True}, lenient=True).close()

    def test_matcher(self):
        g = clade.Grammar(self.model, gbnf='root ::= "{\\"k\\":" [0-9] "}"')
        m = g.matcher()
        self.assertEqual(m.forced_text(), '{"k":')
        self.assertFalse(m.complete)
        self.assertFalse(m.can_end)
        allowed = m.allowed(self.model.n_vocab)
        self.assertTrue(allowed)
        m.accept(allowed[0])
        m.rollback(1)
        with self.assertRaises(clade.CladeError):
            m.rollback(5)
        m.close()
        g.close()


if __name__ == "__main__":
    unittest.main()
