-- examples/adventure.lua: a tiny text adventure in LÖVE's shape
-- (love.load / love.update / love.draw / love.textinput / love.keypressed)
-- whose wizard answers by generating text with clade. The answer streams
-- through tree:generator's token iterator a few tokens per frame, so the
-- game loop never blocks on the model.
--
-- Under LÖVE (a main.lua requiring this file):  love . MODEL.gguf
-- Without LÖVE a small fake loop drives the same callbacks, reading
-- commands from stdin, or from --script "look;north;talk hello;quit":
--   LUA_CPATH='build/bindings/lua/?.so' lua5.4 bindings/lua/examples/adventure.lua MODEL.gguf
-- Commands: look, north/south/east/west (or n/s/e/w), talk TEXT, help, quit.
local clade = require("clade")

local rooms = {
  hall = {text = "A cold stone hall. Doors lead north and east.", exits = {north = "library", east = "garden"}},
  library = {text = "Dusty shelves. An old wizard squints at you.", exits = {south = "hall"}, npc = "wizard"},
  garden = {text = "Overgrown roses around a dry fountain.", exits = {west = "hall"}},
}
local short = {n = "north", s = "south", e = "east", w = "west"}

local game = {
  room = "hall",
  log = {},            -- finished lines
  speech = nil,        -- the wizard's line being generated
  gen = nil,           -- its clade.Stream
  input = "",
  quit = false,
  tokens_per_frame = 4,
}

local function say(line) game.log[#game.log + 1] = line end

local function describe()
  local r = rooms[game.room]
  say(r.text)
  local ex = {}
  for dir in pairs(r.exits) do ex[#ex + 1] = dir end
  table.sort(ex)
  say("Exits: " .. table.concat(ex, ", "))
end

-- The wizard's prompt: the model's chat template when it has one, else plain text.
local function wizard_prompt(question)
  local msgs = {
    {role = "system", content = "You are an old wizard in a dusty library. Answer in one sentence."},
    {role = "user", content = question},
  }
  local ok, text = pcall(game.model.chat_apply, game.model, msgs)
  if ok then
    return game.model:tokenize(text, {parse_special = true})
  end
  return game.model:tokenize("The traveller asks: " .. question .. "\nThe old wizard answers:")
end

local function talk(question)
  if not rooms[game.room].npc then
    say("Nobody here answers.")
    return
  end
  if game.gen then game.gen:close() end
  game.gen = game.tree:generator({wizard_prompt(question)},
    {max_new_tokens = 40, temperature = 0.8, seed = #game.log, stop = {"\n"}})
  game.next = game.gen:tokens()
  game.speech = ""
end

local function command(line)
  line = line:gsub("^%s+", ""):gsub("%s+$", "")
  if line == "" then return end
  say("> " .. line)
  local verb, rest = line:match("^(%S+)%s*(.*)$")
  verb = short[verb] or verb
  if verb == "quit" then
    game.quit = true
  elseif verb == "help" then
    say("look, north/south/east/west, talk TEXT, quit")
  elseif verb == "look" then
    describe()
  elseif verb == "talk" then
    talk(rest ~= "" and rest or "Hello?")
  elseif rooms[game.room].exits[verb] then
    game.room = rooms[game.room].exits[verb]
    describe()
  elseif verb == "north" or verb == "south" or verb == "east" or verb == "west" then
    say("You cannot go " .. verb .. ".")
  else
    say("You do not know how to '" .. verb .. "'.")
  end
end

-- ---- the LÖVE callbacks ----

local love = love or {}
_G.love = love

function love.load(args)
  local path = args and args[1]
  if not path then error("usage: adventure.lua MODEL.gguf [--script \"cmd;cmd\"]") end
  game.model = clade.load(path)
  game.tree = game.model:tree()
  say("You wake up in a strange place. (type help)")
  describe()
end

function love.update(dt)
  if not game.gen then return end
  -- a few tokens per frame: generation never stalls the loop
  for _ = 1, game.tokens_per_frame do
    local tok, text = game.next(game.gen)
    if tok == nil then
      say("Wizard: " .. game.speech)
      game.gen:close()
      game.gen, game.speech = nil, nil
      return
    end
    game.speech = game.speech .. text
  end
end

function love.draw()
  local g = love.graphics
  local first = math.max(1, #game.log - 20)
  local y = 10
  for i = first, #game.log do
    g.print(game.log[i], 10, y)
    y = y + 16
  end
  if game.speech then g.print("Wizard: " .. game.speech .. "_", 10, y) end
  g.print("> " .. game.input, 10, y + 24)
end

function love.textinput(t) game.input = game.input .. t end

function love.keypressed(key)
  if key == "return" then
    command(game.input)
    game.input = ""
    if game.quit and love.event then love.event.quit() end
  elseif key == "backspace" then
    game.input = game.input:sub(1, -2)
  end
end

function love.quit()
  if game.gen then game.gen:close() end
  if game.tree then game.tree:close() end
  if game.model then game.model:close() end
end

-- ---- a tiny fake loop when LÖVE is not running ----

if not love.graphics then
  local shown = 0
  love.graphics = {print = function() end} -- the terminal shows the log instead
  local function present()
    for i = shown + 1, #game.log do print(game.log[i]) end
    shown = #game.log
  end
  local script
  local args = {}
  local i = 1
  while i <= #arg do
    if arg[i] == "--script" then
      script = {}
      for c in (arg[i + 1] or ""):gmatch("[^;]+") do script[#script + 1] = c end
      i = i + 2
    else
      args[#args + 1] = arg[i]
      i = i + 1
    end
  end
  love.load(args)
  present()
  while not game.quit do
    local line
    if script then
      line = table.remove(script, 1) or "quit"
    else
      io.write("> ")
      io.flush()
      line = io.read("l")
      if not line then line = "quit" end
    end
    for c in line:gmatch(utf8.charpattern) do love.textinput(c) end
    love.keypressed("return")
    repeat -- frames until the wizard has finished
      love.update(1 / 60)
      love.draw()
    until not game.gen
    present()
  end
  love.quit()
end
