-- test.lua: tests of the Lua binding of clade (plain Lua 5.4, no framework):
-- every C API group (version, errors, log, model, tokenizer, detokenizer,
-- chat, tree, cache, decode, sampler, generate, speculative, stats,
-- sessions), the token iterator (inside a coroutine), lifetimes and GC
-- order, freed handles, and bad input. Exits 1 when a test fails.
--
--   LUA_CPATH='build/bindings/lua/?.so' CLADE_CLI=build/tools/clade/clade lua5.4 bindings/lua/test.lua
-- Environment: CLADE_CLI (writes the random models), CLADE_VOCAB_DIR
-- (tests/data/vocab), CLADE_LUA_TMP (a scratch folder; default os.tmpname's).
local clade = require("clade")

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/../.."
local CLI = os.getenv("CLADE_CLI") or (root .. "/build/tools/clade/clade")
local VOCAB = (os.getenv("CLADE_VOCAB_DIR") or (root .. "/tests/data/vocab")) .. "/ggml-vocab-llama-spm.gguf"
local TMP = os.getenv("CLADE_LUA_TMP")
local own_tmp = not TMP
if own_tmp then
  TMP = os.tmpname()
  os.remove(TMP)
end
os.execute("mkdir -p '" .. TMP .. "'")

local failures, passed = 0, 0
local function test(name, fn)
  local ok, err = xpcall(fn, function(e) return debug.traceback(tostring(e), 2) end)
  if ok then
    passed = passed + 1
    print("ok   " .. name)
  else
    failures = failures + 1
    print("FAIL " .. name .. ": " .. err)
  end
  collectgarbage()
end

local function check(cond, msg, ...)
  if not cond then error(string.format(msg or "check failed", ...), 2) end
end
local function eq(got, want, what)
  if got ~= want then
    error(string.format("%s: got %s, want %s", what or "value", tostring(got), tostring(want)), 2)
  end
end
local function list_eq(a, b, what)
  if #a ~= #b then error(string.format("%s: %d items, want %d", what or "list", #a, #b), 2) end
  for i = 1, #a do
    if a[i] ~= b[i] then
      error(string.format("%s: item %d is %s, want %s", what or "list", i, tostring(a[i]), tostring(b[i])), 2)
    end
  end
end
-- fn must raise a clade.Error named name; returns it
local function raises(name, fn, ...)
  local ok, e = pcall(fn, ...)
  if ok then error("no error, expected " .. name, 2) end
  if not clade.is_error(e) then error("a plain error, expected clade " .. name .. ": " .. tostring(e), 2) end
  if e.name ~= name then error("error " .. tostring(e) .. ", expected " .. name, 2) end
  check(type(e.message) == "string" and #e.message > 0, "an empty message")
  eq(e.status, clade.status[name], "status number")
  return e
end
local function argmax(row)
  local best, bi = -math.huge, 0
  for i = 1, #row do
    if row[i] > best then best, bi = row[i], i end
  end
  return bi - 1
end
local function close_rows(a, b, rel)
  eq(#a, #b, "row length")
  local scale, worst = 1, 0
  for i = 1, #b do scale = math.max(scale, math.abs(b[i])) end
  for i = 1, #a do worst = math.max(worst, math.abs(a[i] - b[i])) end
  check(worst <= (rel or 1e-4) * scale, "rows differ by %g (scale %g)", worst, scale)
end
local function range(a, b)
  local t = {}
  for i = a, b do t[#t + 1] = i end
  return t
end

-- the random models
local function random_model(name, ...)
  local path = TMP .. "/" .. name
  local cmd = string.format("'%s' model random -o '%s' --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 %s > /dev/null 2>&1",
    CLI, path, table.concat({...}, " "))
  check(os.execute(cmd), "could not write a random model: %s", cmd)
  return path
end
local small = random_model("small.gguf", "--vocab 300 --type f32 --seed 7")
local draft_path = random_model("draft.gguf", "--vocab 300 --type f32 --seed 8")
local short_ctx = random_model("short.gguf", "--vocab 300 --type f32 --seed 9 --ctx 32")
local spm = random_model("spm.gguf", "--type f32 --seed 7 --vocab-from '" .. VOCAB .. "' --chat-template chatml")
local m = clade.load(small, {n_threads = 1})
local ms = clade.load(spm, {n_threads = 1})

test("version", function()
  eq(clade.version(), clade.HEADER_VERSION, "version")
  local a, b, c = clade.HEADER_VERSION:match("(%d+)%.(%d+)%.(%d+)")
  eq(clade.version_number(), a * 10000 + b * 100 + c, "version number")
  eq(clade.status_string(clade.status.E_STATE), "invalid state", "status string")
end)

test("errors: status and message", function()
  local e = raises("E_IO", clade.load, TMP .. "/missing.gguf")
  check(e.message:find("missing.gguf", 1, true), "message names the file: %s", e.message)
  check(tostring(e):find("E_IO", 1, true), "tostring: %s", tostring(e))
  eq(getmetatable(e), clade.Error, "metatable")
  check(clade.is_error(e, "E_IO") and not clade.is_error(e, "E_STATE") and not clade.is_error("x"), "is_error")
  local bad = TMP .. "/bad.gguf"
  local f = assert(io.open(bad, "wb"))
  f:write("not a gguf file at all")
  f:close()
  raises("E_FORMAT", clade.load, bad)
  raises("E_INVALID_ARG", clade.load, small, {n_thread = 1}) -- a misspelt option
  raises("E_INVALID_ARG", clade.load, small, {n_threads = "one"})
  raises("E_INVALID_ARG", clade.load, small, {n_threads = -3})
  check(not pcall(clade.load), "no path")
  check(not pcall(m.tokenize, m, {}), "a table as text")
  eq(clade.last_error(), clade.last_error(), "last_error")
end)

test("log", function()
  local lines = {}
  clade.set_log(function(level, msg) lines[#lines + 1] = msg end, clade.LOG_DEBUG)
  local x = clade.load(small, {n_threads = 1})
  x:free()
  clade.set_log(function() error("a failing log callback is ignored") end, clade.LOG_DEBUG)
  clade.load(small, {n_threads = 1}):free()
  clade.set_log(nil)
  check(#lines >= 1 and lines[1]:find("loaded", 1, true), "no load message logged: %s", lines[1])
  local n = #lines
  clade.load(small, {n_threads = 1}):free()
  eq(#lines, n, "logging off")
end)

test("model: describe, special tokens", function()
  local i = m:describe()
  eq(i.architecture, "llama", "architecture")
  eq(i.n_layers, 2, "n_layers")
  eq(i.n_embd, 64, "n_embd")
  eq(i.n_heads, 4, "n_heads")
  eq(i.n_kv_heads, 2, "n_kv_heads")
  eq(i.head_dim, 16, "head_dim")
  eq(i.n_ff, 128, "n_ff")
  eq(i.n_vocab, 300, "n_vocab")
  eq(i.weight_type_name, "f32", "weight type")
  check(i.n_params > 0 and i.n_ctx > 0, "n_params, n_ctx")
  eq(m:n_vocab(), 300, "n_vocab()")
  local s = ms:special_tokens()
  check(s.bos >= 0 and s.eos >= 0, "bos/eos")
  check(ms:is_eog(s.eos) and not ms:is_eog(s.bos), "is_eog")
  check(tostring(m):find("clade.Model", 1, true), "tostring")
end)

test("tokenizer and detokenizer", function()
  local ids = ms:tokenize("Hello world")
  local sp = ms:special_tokens()
  eq(ids[1], sp.bos, "BOS first")
  local plain = ms:tokenize("Hello world", {add_special = false})
  eq(ms:detokenize(plain), "Hello world", "round trip")
  eq(#plain, #ids - 1, "no BOS")
  local function has(list, x)
    for _, v in ipairs(list) do if v == x then return true end end
    return false
  end
  check(has(ms:tokenize("a</s>b", {add_special = false, parse_special = true}), sp.eos), "parse_special")
  check(not has(ms:tokenize("a</s>b", {add_special = false}), sp.eos), "no parse_special")
  eq(ms:detokenize({sp.eos}, true), "</s>", "special rendered")
  eq(ms:detokenize({sp.eos}), "", "special not rendered")
  local pieces = {}
  for _, t in ipairs(plain) do pieces[#pieces + 1] = ms:token_to_piece(t) end
  eq(table.concat(pieces), " Hello world", "pieces")
  -- streaming: a multi-byte text, one token at a time
  local text = "naïve café – ünïcödé 日本語"
  local toks = ms:tokenize(text, {add_special = false})
  local d <close> = ms:detokenizer()
  local out = {}
  for _, t in ipairs(toks) do
    local s = d:push(t)
    check(utf8.len(s), "a piece splits a character: %q", s)
    out[#out + 1] = s
  end
  out[#out + 1] = d:flush()
  eq(table.concat(out), text, "streamed text")
  raises("E_UTF8", ms.tokenize, ms, "bad \xff byte")
  raises("E_TOKEN", ms.detokenize, ms, {1, 999999})
  raises("E_TOKEN", ms.token_to_piece, ms, -1)
  raises("E_INVALID_ARG", ms.detokenize, ms, {1, "two"})
  raises("E_INVALID_ARG", ms.tokenize, ms, "x", {add_bos = true})
end)

test("chat templates", function()
  local names = clade.chat_templates()
  local has = {}
  for _, n in ipairs(names) do has[n] = true end
  check(has.chatml and has.llama3, "template names")
  local msgs = {{role = "system", content = "S"}, {role = "user", content = "U1"}, {"assistant", "A1"},
    {role = "user", content = "U2"}}
  eq(clade.chat_apply(msgs, "chatml"), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n" ..
    "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n", "chatml")
  eq(ms:chat_template_name(), "chatml", "model's template")
  eq(ms:chat_apply(msgs), clade.chat_apply(msgs, "chatml"), "the model's own")
  raises("E_UNSUPPORTED", m.chat_template_name, m)
  raises("E_UNSUPPORTED", clade.chat_apply, msgs, "no-such-template")
  raises("E_INVALID_ARG", clade.chat_apply, {{role = "user"}}, "chatml")
  raises("E_INVALID_ARG", clade.chat_apply, {{role = "tool", content = "x"}}, "llama2")
end)

test("tree: append, info, batch, prefix, release", function()
  local t <close> = m:tree({kv_type = clade.KV_F32})
  local prompt = {5, 17, 42, 99, 3, 250, 11, 64, 7, 123}
  local node, logits = t:append(0, prompt, true)
  eq(#logits, 300, "logits")
  local info = t:node_info(node)
  eq(info.parent, 0, "parent")
  eq(info.length, #prompt, "length")
  eq(info.path_length, 0, "path_length")
  list_eq(t:node_tokens(node), prompt, "node tokens")
  list_eq(t:children(0), {node}, "children")
  check(t:kv_bytes() > 0 and t:kv_used() >= t:kv_bytes(), "kv bytes")
  -- a batch: a node, a node under it, and a sequence of a cache under the first
  local c <close> = t:cache({max_seqs = 2, max_tokens = 32})
  local r = t:append_batch{
    {parent = node, tokens = {1, 2}, logits = true},
    {parent = clade.item(1), tokens = {3}},
    {parent = clade.item(1), tokens = {4, 5}, cache = c, logits = true},
  }
  eq(t:node_info(r[2].node).parent, r[1].node, "item parent")
  eq(r[3].node, -1, "a sequence item has no node")
  check(r[3].seq >= 0, "a sequence")
  local _, want = t:append(node, {1, 2}, true)
  close_rows(r[1].logits, want)
  -- prefix reuse; released prompts stay cached until trimmed
  local p1, reused = t:append_prefix({5, 17, 42, 99, 3, 250, 8})
  eq(reused, 6, "reused")
  t:release(p1)
  local pc <close> = m:tree({prefix_cache = true})
  local n1 = pc:append_prefix(range(1, 20))
  pc:release(n1)
  local n2, again = pc:append_prefix(range(1, 21))
  eq(again, 20, "cached prompt reused")
  eq(pc:trim(0), 0, "held nodes are not trimmed")
  pc:release(n2)
  check(pc:trim(0) > 0, "released nodes trimmed")
  eq(pc:kv_used(), 0, "all trimmed")
  t:release(r[1].node)
  t:release(r[2].node)
  t:release(node)
  raises("E_STATE", t.release, t, node)
  raises("E_STATE", t.release, t, 0) -- the root
  raises("E_TOKEN", t.append, t, 0, {1, 300})
  raises("E_STATE", t.append, t, 12345, {1})
  raises("E_INVALID_ARG", t.append_batch, t, {{parent = clade.item(2), tokens = {1}}})
  raises("E_INVALID_ARG", t.append, t, 0, {1, 2.5})
  raises("E_INVALID_ARG", m.tree, m, {kv_type = "f16"})
  raises("E_INVALID_ARG", m.tree, m, {prefill = 1})
end)

test("cache and decode: shared prefix equals alone", function()
  local t <close> = m:tree({kv_type = clade.KV_F32})
  local prompt = {5, 17, 42, 99, 3, 250, 11, 64, 7, 123}
  local node, nl = t:append(0, prompt, true)
  local c <close> = t:cache({max_seqs = 4, max_tokens = 64})
  local a, b = c:add(node, {21}), c:add(node, {150, 9})
  local rows = c:decode{{a}, {b}}
  eq(#rows, 2, "rows")
  eq(c:length(b), 2, "length")
  list_eq(c:seq_tokens(b), {150, 9}, "seq tokens")
  eq(c:seq_node(a), node, "seq node")
  local alone <close> = t:cache({max_seqs = 1})
  local s = alone:add(0, {5, 17, 42, 99, 3, 250, 11, 64, 7, 123, 150, 9})
  close_rows(alone:decode{{s}}[1], rows[2], 1e-3)
  -- the node's own logits against the prompt decoded alone
  local s2 = c:add(0, prompt)
  close_rows(c:decode{{seq = s2, tokens = {}}}[1], nl, 1e-3)
  c:remove(s2)
  raises("E_STATE", c.length, c, s2)
  -- all_logits, argmax, truncate, fork
  local all = c:decode({{a, {7, 8}}}, {all_logits = true})
  eq(#all, 2, "all_logits rows")
  c:truncate(a, 1)
  local g = c:decode({{a, {7, 8}}}, {argmax = true})
  eq(g[1], argmax(all[2]), "argmax")
  local f = c:fork(a)
  eq(c:length(f), c:length(a), "fork length")
  local ra, rf = table.unpack(c:decode{{a, {9}}, {f, {9}}})
  close_rows(ra, rf, 1e-5)
  -- promote and move
  local pn = c:promote(f)
  eq(c:seq_node(f), pn, "promoted")
  eq(c:length(f), 0, "no unique tokens after promote")
  c:move(f, node)
  eq(c:seq_node(f), node, "moved")
  t:release(pn)
  -- token trees: two children of one token, keep one path
  local tc <close> = t:cache({max_seqs = 2})
  local q = tc:add(node, {})
  local tr = tc:decode_tree({{q, {30, 31, 32}, {-1, 0, 0}}}, {all_logits = true})
  eq(#tr, 3, "tree rows")
  tc:keep(q, 0, {0, 2})
  eq(tc:length(q), 2, "kept")
  local chain <close> = t:cache({max_seqs = 1})
  local q2 = chain:add(node, {})
  local cr = chain:decode({{q2, {30, 32}}}, {all_logits = true})
  close_rows(tr[3], cr[2], 1e-3)
  -- bad steps, nothing changed
  raises("E_TOKEN", c.decode, c, {{a, {-1}}})
  raises("E_INVALID_ARG", c.decode, c, {{a, {1}}}, {all = true})
  raises("E_INVALID_ARG", c.decode, c, {"x"})
  raises("E_STATE", c.decode, c, {{4242, {1}}})
  raises("E_INVALID_ARG", tc.decode_tree, tc, {{q, {1, 2}, {-1}}})
  local full <close> = t:cache({max_seqs = 1, max_tokens = 4})
  full:add(0, {1})
  raises("CACHE_FULL", full.add, full, 0, {1})
  t:release(node)
end)

test("sampler", function()
  local row = {1.0, 3.0, -2.0, 3.0, 0.5, 2.0, -math.huge, 2.5}
  local g <close> = clade.sampler{temperature = 0}
  eq(g:sample(row), 1, "greedy: lowest id of a tie")
  local b <close> = clade.sampler{temperature = 0, logit_bias = {[2] = 10.0, [1] = -math.huge}}
  eq(b:sample(row), 2, "logit bias map")
  local b2 <close> = clade.sampler{temperature = 0, logit_bias = {{2, 10.0}}}
  eq(b2:sample(row), 2, "logit bias pairs")
  local p <close> = clade.sampler{temperature = 0, frequency_penalty = 1.0, penalize_prompt = false}
  eq(p:sample_ex(row, {history = {1, 3, 3}, n_prompt = 1}), 1, "penalties")
  local s <close> = clade.sampler{temperature = 1.0, top_k = 0, top_p = 1.0, min_p = 0.0, seed = 3}
  local tok, lp, top = s:sample_ex(row, {top = 3})
  local mx, sum = 3.0, 0
  for _, v in ipairs(row) do sum = sum + math.exp(v - mx) end
  check(math.abs(lp - (row[tok + 1] - mx - math.log(sum))) < 1e-5, "logprob")
  eq(#top, 3, "top")
  eq(top[1].token, 1, "top token")
  local first = {}
  for i = 1, 8 do first[i] = s:sample(row, 7) end
  s:forget(7)
  for i = 1, 8 do eq(s:sample(row, 7), first[i], "a forgotten stream restarts") end
  -- a batch equals the same rows one by one, stream by stream
  local rev = {}
  for i = #row, 1, -1 do rev[#rev + 1] = row[i] end
  local rows, streams, hist = {row, rev, row}, {4, 9, 4}, {{0, 1}, {}, {5}}
  local ba <close> = clade.sampler{temperature = 1.0, seed = 8, presence_penalty = 0.5}
  local bb <close> = clade.sampler{temperature = 1.0, seed = 8, presence_penalty = 0.5}
  for _ = 1, 5 do
    local got = ba:sample_batch(rows, {streams = streams, histories = hist, top = 2})
    for i = 1, 3 do
      local t2, l2, top2 = bb:sample_ex(rows[i], {stream = streams[i], history = hist[i], top = 2})
      eq(got[i].token, t2, "batch token")
      eq(got[i].logprob, l2, "batch logprob")
      eq(#got[i].top, #top2, "batch top")
    end
  end
  raises("E_INVALID_ARG", ba.sample_batch, ba, {row, {1, 2}})
  raises("E_TOKEN", ba.sample_batch, ba, {row}, {histories = {{77}}})
  raises("E_INVALID_ARG", g.sample, g, {0 / 0, 1})
  raises("E_TOKEN", g.sample, g, row, 0, {1, 99})
  raises("E_INVALID_ARG", clade.sampler, {temperature = -1})
  raises("E_INVALID_ARG", clade.sampler, {temprature = 1})
  raises("E_TOKEN", clade.sampler, {logit_bias = {{-1, 1.0}}})
  raises("E_INVALID_ARG", g.sample_ex, g, row, {stream = -1})
end)

test("generate: callback streaming, stop, results", function()
  local t <close> = m:tree({kv_type = clade.KV_F32})
  local prompts = {{tokens = range(1, 10)}, {tokens = {30, 31}, parent = 1}, {tokens = {40}, parent = 1}}
  local pieces, finals = {}, {}
  local res = t:generate(prompts, {max_new_tokens = 8, samples = 2, temperature = 0, ignore_eog = true,
    logprobs = true, callback = function(seq, tok, text)
      pieces[seq] = (pieces[seq] or "") .. text
      if tok == nil then finals[seq] = true end
    end})
  eq(#res, 4, "sequences")
  for i, r in ipairs(res) do
    eq(#r.tokens, 8, "tokens")
    eq(r.finish, "length", "finish")
    eq(r.text, pieces[i], "pieces make the text")
    check(finals[i], "a final call")
    eq(#r.logprobs, 8, "logprobs")
  end
  eq(res[1].prompt, 2, "leaf prompt index")
  local tl = t:generate({1, 2, 3}, {max_new_tokens = 3, temperature = 1, top_k = 5, seed = 2, top_logprobs = 3,
    logprobs = true})[1]
  eq(#tl.top, 3, "a top list per token")
  for j = 1, 3 do
    eq(#tl.top[j], 3, "three alternatives")
    check(tl.top[j][1].logprob >= tl.top[j][2].logprob, "likeliest first")
    local seen = false
    for _, alt in ipairs(tl.top[j]) do
      if alt.token == tl.tokens[j] then seen = math.abs(alt.logprob - tl.logprobs[j]) < 1e-5 end
    end
    check(seen or tl.logprobs[j] < tl.top[j][3].logprob, "the drawn token among its alternatives")
  end
  raises("E_INVALID_ARG", t.generate, t, {1}, {top_logprobs = 99})
  eq(res[3].prompt, 3, "leaf prompt index")
  list_eq(res[1].tokens, res[2].tokens, "greedy samples agree")
  check(res.stats.tokens == 32 and res.stats.steps > 0, "stats")
  eq(res.stopped, false, "stopped")
  -- the same as steps by hand (the first sequence)
  local c <close> = t:cache()
  local s = c:add(0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 30, 31})
  local row = c:decode{{s}}[1]
  local out = {}
  for i = 1, 8 do
    out[i] = argmax(row)
    row = c:decode{{s, {out[i]}}}[1]
  end
  local by_gen = t:generate({range(1, 10), {tokens = {30, 31}, parent = 1}}, {max_new_tokens = 8,
    temperature = 0, ignore_eog = true})
  list_eq(by_gen[1].tokens, out, "generate against decode steps")
  -- STOP_ALL, STOP_SEQ
  local n = 0
  local r2 = t:generate(range(1, 5), {max_new_tokens = 20, samples = 2, temperature = 0, ignore_eog = true,
    callback = function(seq, tok) if tok then n = n + 1 end if n == 3 then return clade.STOP_ALL end end})
  check(r2.stopped, "stopped")
  eq(r2[1].finish, "callback", "callback finish")
  local r3 = t:generate(range(1, 5), {max_new_tokens = 20, samples = 2, temperature = 0, ignore_eog = true,
    callback = function(seq, tok) if seq == 1 and tok then return "stop_seq" end end})
  eq(#r3[1].tokens, 1, "stop_seq")
  eq(#r3[2].tokens, 20, "the other goes on")
  -- the callback's error is the call's error; the tree is busy inside it
  local ok, e = pcall(t.generate, t, range(1, 5), {max_new_tokens = 4, callback = function() error("boom") end})
  check(not ok and tostring(e):find("boom"), "callback error: %s", tostring(e))
  local inner
  t:generate(range(1, 5), {max_new_tokens = 2, callback = function()
    local ok2, e2 = pcall(t.append, t, 0, {1})
    inner = inner or e2
    check(not ok2, "busy")
  end})
  eq(inner.name, "E_STATE", "a callback may not use the tree")
  local ok3, e3 = pcall(t.generate, t, range(1, 5), {max_new_tokens = 2, callback = function()
    coroutine.yield()
  end})
  check(not ok3 and tostring(e3):find("yield"), "yield in a callback: %s", tostring(e3))
  -- text prompts, stop strings
  local ts <close> = ms:tree()
  local want = ts:generate("Once upon a time", {max_new_tokens = 12, temperature = 0, ignore_eog = true})[1]
  local cut = want.text:sub(4, 5)
  local st = ts:generate("Once upon a time", {max_new_tokens = 12, temperature = 0, ignore_eog = true,
    stop = {cut}})[1]
  eq(st.finish, "stop_string", "stop string")
  eq(st.text, want.text:sub(1, want.text:find(cut, 1, true) - 1), "cut before the stop string")
  local mg = ms:generate("Once upon a time", {max_new_tokens = 12, temperature = 0, ignore_eog = true,
    kv_type = clade.KV_F16})
  eq(mg[1].text, want.text, "model:generate")
  -- bad input
  raises("E_INVALID_ARG", t.generate, t, {}, {})
  raises("E_INVALID_ARG", t.generate, t, {1}, {max_new_tokens = 0})
  raises("E_INVALID_ARG", t.generate, t, {1}, {max_tokens = 3})
  raises("E_INVALID_ARG", t.generate, t, {{tokens = {1}, parent = 2}})
  raises("E_TOKEN", t.generate, t, {1, 300})
  raises("E_INVALID_ARG", t.generate, t, {1}, {stop = {""}})
  raises("E_INVALID_ARG", t.generate, t, {1}, {callback = 3})
  raises("E_INVALID_ARG", t.generate, t, 42)
end)

test("generator: token iterator, coroutines", function()
  local t <close> = m:tree({kv_type = clade.KV_F32})
  local prompts = {{tokens = range(1, 10)}, {tokens = {30, 31}, parent = 1}, {tokens = {40}, parent = 1}}
  local opts = {max_new_tokens = 10, samples = 2, temperature = 0, ignore_eog = true}
  local want = t:generate(prompts, opts)
  local got, texts = {}, {}
  -- inside a coroutine, yielding from the loop body
  local co = coroutine.wrap(function()
    local gen <close> = t:generator(prompts, opts)
    for tok, text, seq in gen:tokens() do
      got[seq] = got[seq] or {}
      if tok >= 0 then got[seq][#got[seq] + 1] = tok end
      texts[seq] = (texts[seq] or "") .. text
      coroutine.yield(seq)
    end
    check(gen:done(), "done")
    return "end", gen:results()
  end)
  local n, last, res = 0, nil, nil
  repeat
    last, res = co()
    n = n + 1
  until last == "end"
  eq(n, 41, "one resume per token, and the end")
  for i = 1, 4 do
    list_eq(got[i], want[i].tokens, "iterator against generate")
    eq(texts[i], want[i].text, "text")
    eq(res[i].text, want[i].text, "results text")
    eq(res[i].finish, "length", "results finish")
    eq(res[i].prompt, want[i].prompt, "results prompt")
  end
  -- stop strings and eog, with text prompts; sampling reproducible by seed
  local ts <close> = ms:tree()
  local ref = ts:generate("Once upon a time", {max_new_tokens = 12, temperature = 0, ignore_eog = true})[1]
  local cut = ref.text:sub(4, 5)
  local g2 = ts:generator("Once upon a time", {max_new_tokens = 12, temperature = 0, ignore_eog = true,
    stop = cut})
  local text = {}
  for _, piece in g2 do text[#text + 1] = piece end -- __call: the stream is its own iterator
  eq(table.concat(text), ref.text:sub(1, ref.text:find(cut, 1, true) - 1), "stop string")
  eq(g2:results()[1].finish, "stop_string", "finish")
  g2:close()
  raises("E_STATE", g2.results, g2)
  local function sampled()
    local out = {}
    for tok in ts:generator("Once", {max_new_tokens = 6, temperature = 0.9, seed = 5}):tokens() do
      out[#out + 1] = tok
    end
    return out
  end
  list_eq(sampled(), sampled(), "seeded")
  -- sampled: the same streams as clade_generate, so the same tokens
  for _, o in ipairs{{temperature = 0.9, seed = 5}, {temperature = 1, top_k = 0, top_p = 1, min_p = 0, seed = 3,
      repeat_penalty = 1.3}} do
    o.max_new_tokens, o.samples, o.ignore_eog = 12, 3, true
    local a = ts:generate("Once upon", o)
    local b = {{}, {}, {}}
    for tok, _, seq in ts:generator("Once upon", o) do
      if tok >= 0 then b[seq][#b[seq] + 1] = tok end
    end
    for i = 1, 3 do list_eq(b[i], a[i].tokens, "sampled sequence " .. i) end
  end
  -- the end of the context, as clade_generate
  local short <close> = clade.load(short_ctx, {n_threads = 1})
  local st <close> = short:tree()
  local sw = st:generate(range(1, 20), {max_new_tokens = 40, temperature = 0, ignore_eog = true})[1]
  eq(sw.finish, "length", "context end")
  check(#sw.tokens < 40, "ended by the context")
  local sg = {}
  for tok in st:generator(range(1, 20), {max_new_tokens = 40, temperature = 0, ignore_eog = true}):tokens() do
    sg[#sg + 1] = tok
  end
  list_eq(sg, sw.tokens, "iterator at the context's end")
  raises("CONTEXT_FULL", st.append, st, 0, range(1, 40))
  raises("E_INVALID_ARG", t.generator, t, {1}, {callback = print})
  raises("E_INVALID_ARG", t.generator, t, {1}, {samples = 0})
  raises("E_TOKEN", t.generator, t, {1, 300})
  eq(#t:children(0), 0, "a failed generator leaves no node")
end)

test("speculative: lookup, draft model, Lua drafter", function()
  local t <close> = m:tree({kv_type = clade.KV_F32})
  local prompt = {}
  for i = 1, 30 do prompt[i] = (i % 6) + 10 end -- repeats: lookup finds drafts
  local opts = {max_new_tokens = 16, temperature = 0, ignore_eog = true}
  local plain = t:generate(prompt, opts)[1].tokens
  local function with(extra)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    for k, v in pairs(extra) do o[k] = v end
    return t:generate(prompt, o)
  end
  list_eq(with{lookup = 3, tree_width = 2, max_draft = 6}[1].tokens, plain, "lookup token trees")
  local lk = with{lookup = 3, adaptive = false}
  list_eq(lk[1].tokens, plain, "lookup")
  check(lk.stats.drafted > 0, "lookup drafted")
  local dm <close> = clade.load(draft_path, {n_threads = 1})
  local dr = with{draft_model = dm, max_draft = 4, adaptive = false}
  list_eq(dr[1].tokens, plain, "draft model")
  check(dr.stats.draft_steps > 0 and dr.stats.drafted > 0, "draft model steps")
  local calls = 0
  local ld = with{draft = function(seq, history, max_tokens)
    calls = calls + 1
    eq(seq, 1, "seq")
    local d = {history[#history], 11}
    return {table.unpack(d, 1, math.min(#d, max_tokens))}
  end, adaptive = false}
  list_eq(ld[1].tokens, plain, "Lua drafter")
  check(calls > 0 and ld.stats.drafted > 0, "the drafter ran")
  local ok, e = pcall(with, {draft = function() error("draft boom") end})
  check(not ok and tostring(e):find("draft boom"), "drafter error: %s", tostring(e))
  raises("E_TOKEN", with, {draft = function() return {999} end, adaptive = false})
  raises("E_INVALID_ARG", with, {draft_model = "x"})
end)

test("sessions: tree and cache save/load", function()
  local doc = {}
  for i = 1, 40 do doc[i] = (7 * i + 3) % 300 end
  local path = TMP .. "/s.clade"
  local t <close> = m:tree({kv_type = clade.KV_F32, prefix_cache = true})
  local a = t:append(0, doc)
  t:save(a, path)
  local c <close> = t:cache()
  local s = c:add(a, {5, 6})
  c:decode{{s}}
  c:save(s, path .. "2")
  local t2 <close> = m:tree({kv_type = clade.KV_F32})
  local node, n, reused = t2:load(path)
  eq(n, 40, "tokens")
  eq(reused, 0, "reused")
  local n2, n2n, n2r = t2:load(path .. "2")
  eq(n2n, 42, "cache session tokens")
  eq(n2r, 40, "reused from the first")
  local c2 <close> = t2:cache()
  local s2 = c2:add(n2, {11})
  close_rows(c2:decode{{s2}}[1], c:decode{{s, {11}}}[1], 1e-3)
  t2:release(node)
  t2:release(n2)
  local t16 <close> = m:tree()
  raises("E_MISMATCH", t16.load, t16, path)
  raises("E_IO", t16.load, t16, path .. ".missing")
  raises("E_IO", t.save, t, a, TMP .. "/no/such/dir/x")
end)

test("abort callback", function()
  local t <close> = m:tree()
  t:set_abort(function() return true end)
  raises("STOPPED", t.append, t, 0, {1, 2, 3})
  eq(#t:children(0), 0, "nothing added")
  t:set_abort(function() error("abort boom") end)
  local ok, e = pcall(t.append, t, 0, {1, 2})
  check(not ok and tostring(e):find("abort boom"), "abort error: %s", tostring(e))
  t:set_abort(function() return t:kv_used() < 0 end) -- uses the tree: refused inside
  check(not pcall(t.append, t, 0, {1}), "the tree is busy in its abort callback")
  t:set_abort(nil)
  t:release(t:append(0, {1, 2}))
  local r = t:generate({1, 2}, {max_new_tokens = 3})
  eq(#r, 1, "after the abort")
end)

test("lifetimes: freed handles, GC order, <close>", function()
  local x = clade.load(small, {n_threads = 1})
  local t = x:tree({kv_type = clade.KV_F32})
  local c = t:cache({max_seqs = 2, max_tokens = 32})
  local s = c:add(0, {1, 2, 3})
  local want = c:decode{{s, {4}}}[1]
  c:truncate(s, 3)
  x:free() -- the tree and the cache keep the model alive
  x:free() -- twice is fine
  raises("E_STATE", x.describe, x)
  raises("E_STATE", x.tree, x)
  check(tostring(x):find("closed"), "closed tostring")
  check(x:closed(), "closed()")
  local node = t:append(0, {7, 8})
  close_rows(c:decode{{s, {4}}}[1], want, 1e-5)
  eq(#t:generate({1, 2}, {max_new_tokens = 2})[1].tokens, 2, "generate after the model was freed")
  raises("E_STATE", t.generate, t, "text needs the model")
  raises("E_STATE", t.generator, t, {1, 2})
  t:close()
  raises("E_STATE", t.append, t, 0, {1})
  local s2 = c:add(node, {9}) -- the cache keeps the tree's nodes
  eq(#c:decode{{s, {5}}, {s2}}, 2, "decode after the tree closed")
  c:free()
  raises("E_STATE", c.decode, c, {{s, {1}}})
  -- the other way round, left to the collector in any order
  for round = 1, 3 do
    local mm = clade.load(small, {n_threads = 1})
    local tt = mm:tree()
    local cc = tt:cache()
    local ss = cc:add(0, {1})
    local gen = tt:generator({1, 2}, {max_new_tokens = 2})
    mm, tt = nil, nil
    collectgarbage()
    collectgarbage()
    cc:decode{{ss, {2}}}
    for _ in gen:tokens() do end
    if round == 2 then cc = nil gen = nil end
  end
  collectgarbage()
  -- to-be-closed variables free at the end of their block
  local outer
  do
    local mm <close> = clade.load(small, {n_threads = 1})
    local tt <close> = mm:tree()
    outer = tt
  end
  check(outer:closed(), "closed by <close>")
  -- a model in use by a generation cannot be freed from its callback
  local y <close> = clade.load(small, {n_threads = 1})
  local ty <close> = y:tree()
  local e
  ty:generate({1, 2}, {max_new_tokens = 2, callback = function()
    e = e or select(2, pcall(y.free, y))
  end})
  eq(e and e.name, "E_STATE", "free during generation")
end)

test("bad input", function()
  raises("E_INVALID_ARG", clade.tree, m, {flags = "x"})
  raises("E_INVALID_ARG", m.tree(m).cache, m:tree(), {max_seqs = 0})
  raises("E_INVALID_ARG", clade.item, 0)
  raises("E_INVALID_ARG", m.detokenize, m, "abc")
  check(not pcall(clade.tree, "not a model"), "a string as model")
  check(not pcall(m.tree(m).append, m, 0, {1}), "a model as tree")
  raises("E_INVALID_ARG", m.tree(m).append, m:tree(), 2 ^ 40, {1})
  raises("E_INVALID_ARG", m.tree(m).set_kv_budget, m:tree(), -1)
  local bt <close> = m:tree({kv_budget = 1024})
  raises("KV_BUDGET", bt.append, bt, 0, range(1, 50))
  eq(bt:kv_used(), 0, "nothing held after KV_BUDGET")
  raises("E_INVALID_ARG", clade.chat_apply, {"not a message"}, "chatml")
end)

test("same_tokens.lua", function()
  local lua = arg[-1] or "lua5.4"
  local cmd = string.format("'%s' '%s/same_tokens.lua' '%s'", lua, here, small)
  local p = assert(io.popen(cmd))
  local lines = {}
  for l in p:lines() do lines[#lines + 1] = l end
  check(p:close(), "same_tokens.lua failed: %s", cmd)
  eq(#lines, 2, "lines")
  local t <close> = m:tree()
  local want = t:generate({{tokens = range(1, 24)}, {tokens = {30, 31, 32}, parent = 1},
    {tokens = {40, 41}, parent = 1}}, {max_new_tokens = 32, ignore_eog = true, temperature = 0})
  for i = 1, 2 do
    eq(lines[i], table.concat(want[i].tokens, " "), "line " .. i)
    local n = 0
    for _ in lines[i]:gmatch("%d+") do n = n + 1 end
    eq(n, 32, "tokens on line " .. i)
  end
end)

test("examples/adventure.lua", function()
  local lua = arg[-1] or "lua5.4"
  local cmd = string.format("'%s' '%s/examples/adventure.lua' '%s' --script 'look;north;talk who are you?;quit'",
    lua, here, spm)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  check(p:close(), "adventure.lua failed: %s", out)
  check(out:find("An old wizard", 1, true) and out:find("\nWizard: "), "no wizard: %s", out)
end)

m:free()
ms:free()
collectgarbage()
if own_tmp then os.execute("rm -rf '" .. TMP .. "'") end
print(string.format("%d passed, %d failed", passed, failures))
os.exit(failures == 0 and 0 or 1)
