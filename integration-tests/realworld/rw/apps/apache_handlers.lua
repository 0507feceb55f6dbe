-- mod_lua handlers of the Apache test site: a normal dynamic page and three endpoints whose
-- bugs stand in for real ones (a hung backend call, a busy retry loop, a runaway loop).
-- apache.py substitutes @STATE@ and @DOCROOT@ when it installs this file.

local STATE = "@STATE@"
local TEMPLATE = "@DOCROOT@/template.html"
-- A safety net (os.time is a vDSO call, no syscall): a fault handler never outlives a lost harness.
local MAX_SECONDS = 600
-- Records ranked by the dynamic page: sets its CPU cost per request.
local ORDERS = @ORDERS@

local function exists(path)
  local f = io.open(path, "r")
  if f then
    f:close()
    return true
  end
  return false
end

local function reply(r, text)
  r.content_type = "text/plain"
  r:puts(text)
  return apache2.OK
end

-- The normal dynamic page: reads a small template file, ranks a few thousand order records
-- and renders the top of the list (a few milliseconds of CPU, like a typical scripted page).
function app(r)
  local f = io.open(TEMPLATE, "r")
  local tpl = ""
  if f then
    tpl = f:read("a") or ""
    f:close()
  end
  local orders, seed = {}, 12345
  for i = 1, ORDERS do
    seed = (seed * 1103515245 + 12345) % 2147483648
    orders[i] = {id = i, total = seed % 100000}
  end
  table.sort(orders, function(a, b) return a.total > b.total end)
  local rows = {}
  for i = 1, 100 do
    rows[i] = string.format("<tr><td>%d</td><td>%d.%02d</td></tr>", orders[i].id, orders[i].total // 100, orders[i].total % 100)
  end
  r.content_type = "text/html"
  r:puts((tpl:gsub("{{rows}}", table.concat(rows))))
  return apache2.OK
end

-- The "request threads that hang" bug: the handler waits for a backend's answer on a FIFO
-- that nobody writes, so its worker thread blocks in open() until the harness releases it.
function hang(r)
  if not exists(STATE .. "/hang.release") then
    local f = io.open(STATE .. "/backend.fifo", "r")
    if f then
      f:read("a")
      f:close()
    end
  end
  return reply(r, "backend answered\n")
end

-- The busy retry loop (stand-in for Apache bug 37680): retries opening a spool file that is
-- not there yet, with no back-off, so the worker spins on failing openat() calls.
function busy_retry(r)
  local deadline = os.time() + MAX_SECONDS
  local tries = 0
  while os.time() < deadline do
    tries = tries + 1
    local f = io.open(STATE .. "/spool.ready", "r")
    if f then
      f:close()
      break
    end
  end
  return reply(r, string.format("spool ready after %d tries\n", tries))
end

-- The runaway loop: pure CPU work in one worker; it looks at the stop file only every few
-- million iterations (tenths of a second), so it makes almost no syscalls.
function runaway(r)
  local deadline = os.time() + MAX_SECONDS
  local x, i = 1, 0
  while true do
    i = i + 1
    x = (x * 1103515245 + 12345) % 2147483648
    if i % 4000000 == 0 and (exists(STATE .. "/runaway.stop") or os.time() >= deadline) then
      break
    end
  end
  return reply(r, string.format("stopped after %d iterations (%d)\n", i, x))
end
