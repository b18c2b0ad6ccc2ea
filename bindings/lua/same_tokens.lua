-- same_tokens.lua: the cross-language check of the Lua binding. Loads the
-- model given as arg[1], generates greedily (temperature 0, ignore_eog,
-- 32 new tokens) from three prompts in one tree call: prompt 0 = token ids
-- 1..24 under the root, prompts 1 = {30, 31, 32} and 2 = {40, 41} under
-- prompt 0; prints one line per sequence (the two leaves), the generated
-- token ids separated by single spaces.
--   LUA_CPATH='build/bindings/lua/?.so' lua5.4 bindings/lua/same_tokens.lua MODEL
local clade = require("clade")

local path = arg[1]
if not path then
  io.stderr:write("usage: lua5.4 same_tokens.lua MODEL\n")
  os.exit(2)
end
local model <close> = clade.load(path)
local tree <close> = model:tree()
local first = {}
for i = 1, 24 do first[i] = i end
-- Lua lists are 1-based: parent = 1 is prompt 0 of the C call
local results = tree:generate({
  {tokens = first},
  {tokens = {30, 31, 32}, parent = 1},
  {tokens = {40, 41}, parent = 1},
}, {max_new_tokens = 32, ignore_eog = true, temperature = 0})
for _, r in ipairs(results) do
  print(table.concat(r.tokens, " "))
end
