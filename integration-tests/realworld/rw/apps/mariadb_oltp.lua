#!/usr/bin/sysbench
-- The harness's MariaDB client: oltp_read_write's transaction (10 point selects, 4 range
-- selects, 2 updates, a delete + insert, in BEGIN/COMMIT), but each sysbench thread works on
-- its own table (sbtest<tid+1>) so an internal fault on one table hits one client only, and
-- a closed loop with a random think time keeps the rate moderate and bounded.
--
-- Per-request latency: every transaction writes "B <start_ns> <table>" when it begins and
-- "E <start_ns> <end_ns> <ok> <table>" when it ends (CLOCK_MONOTONIC, the clock of the perf
-- trace) to <lat_dir>/t<tid>.log, flushed at once, so a transaction that never ends still
-- shows up as begun.

local ffi = require("ffi")

-- Own names: sysbench's built-in cdefs declare neither of these.
ffi.cdef[[
typedef struct { int64_t tv_sec; int64_t tv_nsec; } flrw_timespec;
int clock_gettime(int clk_id, flrw_timespec *tp);
int usleep(unsigned int usec);
]]

local CLOCK_MONOTONIC = 1

sysbench.cmdline.options = {
   tables = {"Number of tables (one per thread, sbtest1..N)", 6},
   table_size = {"Rows per table", 40000},
   range_size = {"Rows per range select", 100},
   think_min_ms = {"Minimum think time between transactions (ms)", 100},
   think_max_ms = {"Maximum think time between transactions (ms)", 240},
   lat_dir = {"Directory for the per-thread latency logs", "."},
}

local clock_ts = ffi.new("flrw_timespec")

local function now_ns()
   ffi.C.clock_gettime(CLOCK_MONOTONIC, clock_ts)
   return tonumber(clock_ts.tv_sec) * 1000000000 + tonumber(clock_ts.tv_nsec)
end

local t = sysbench.sql.type
-- name, SQL, parameter types (as in sysbench's oltp_common.lua)
local STATEMENTS = {
   {"point", "SELECT c FROM %s WHERE id=?", {t.INT}},
   {"simple_range", "SELECT c FROM %s WHERE id BETWEEN ? AND ?", {t.INT, t.INT}},
   {"sum_range", "SELECT SUM(k) FROM %s WHERE id BETWEEN ? AND ?", {t.INT, t.INT}},
   {"order_range", "SELECT c FROM %s WHERE id BETWEEN ? AND ? ORDER BY c", {t.INT, t.INT}},
   {"distinct_range", "SELECT DISTINCT c FROM %s WHERE id BETWEEN ? AND ? ORDER BY c", {t.INT, t.INT}},
   {"index_update", "UPDATE %s SET k=k+1 WHERE id=?", {t.INT}},
   {"non_index_update", "UPDATE %s SET c=? WHERE id=?", {{t.CHAR, 120}, t.INT}},
   {"delete", "DELETE FROM %s WHERE id=?", {t.INT}},
   {"insert", "INSERT INTO %s (id, k, c, pad) VALUES (?, ?, ?, ?)", {t.INT, t.INT, {t.CHAR, 120}, {t.CHAR, 60}}},
}

local C_TEMPLATE = "###########-###########-###########-###########-###########-" ..
   "###########-###########-###########-###########-###########"
local PAD_TEMPLATE = "###########-###########-###########-###########-###########"

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   table_name = "sbtest" .. (sysbench.tid % sysbench.opt.tables + 1)
   stmt, param = {}, {}
   for _, def in ipairs(STATEMENTS) do
      local name, sql, types = def[1], def[2], def[3]
      stmt[name] = con:prepare(string.format(sql, table_name))
      param[name] = {}
      for i, ty in ipairs(types) do
         if type(ty) == "table" then
            param[name][i] = stmt[name]:bind_create(ty[1], ty[2])
         else
            param[name][i] = stmt[name]:bind_create(ty)
         end
      end
      stmt[name]:bind_param(unpack(param[name]))
   end
   log = assert(io.open(string.format("%s/t%d.log", sysbench.opt.lat_dir, sysbench.tid), "w"))
end

function thread_done()
   for _, s in pairs(stmt) do
      s:close()
   end
   con:disconnect()
   log:close()
end

local function random_id()
   return sysbench.rand.default(1, sysbench.opt.table_size)
end

-- Sets the given parameters (nil keeps a parameter already set) and executes.
local function run(name, ...)
   for i = 1, select("#", ...) do
      local v = select(i, ...)
      if v ~= nil then
         param[name][i]:set(v)
      end
   end
   stmt[name]:execute()
end

local function range(name)
   local id = random_id()
   run(name, id, id + sysbench.opt.range_size - 1)
end

local function transaction()
   con:query("BEGIN")
   for _ = 1, 10 do
      run("point", random_id())
   end
   range("simple_range")
   range("sum_range")
   range("order_range")
   range("distinct_range")
   run("index_update", random_id())
   param.non_index_update[1]:set_rand_str(C_TEMPLATE)
   run("non_index_update", nil, random_id())
   local id = random_id()
   run("delete", id)
   param.insert[3]:set_rand_str(C_TEMPLATE)
   param.insert[4]:set_rand_str(PAD_TEMPLATE)
   run("insert", id, random_id())
   con:query("COMMIT")
end

function event()
   local start = now_ns()
   log:write(string.format("B %d %s\n", start, table_name))
   log:flush()
   local ok, err = pcall(transaction)
   if not ok then
      -- Only errors sysbench itself would retry (lock wait timeout, deadlock) count as a
      -- failed request; anything else stops the run as in sysbench's own scripts.
      if type(err) ~= "table" or err.errcode ~= sysbench.error.RESTART_EVENT then
         error(err, 0)
      end
      pcall(con.query, con, "ROLLBACK")
   end
   log:write(string.format("E %d %d %d %s\n", start, now_ns(), ok and 1 or 0, table_name))
   log:flush()
   ffi.C.usleep(1000 * sysbench.rand.uniform(sysbench.opt.think_min_ms, sysbench.opt.think_max_ms))
end
