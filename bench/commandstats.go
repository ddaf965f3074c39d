package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one command's line of INFO commandstats: calls and the time
// Redis spent in them. Since Redis 7 the commands a script runs are counted
// too, their time inside the script's.
type cmdStat struct {
	calls int64
	usec  float64
}

func (c cmdStat) perCall() float64 {
	if c.calls == 0 {
		return 0
	}
	return c.usec / float64(c.calls)
}

// commandStats reads INFO commandstats since the last CONFIG RESETSTAT,
// keyed by command ("evalsha", "zadd", "config|resetstat").
func commandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]cmdStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats %s: %w", line, err)
			}
		}
		out[name] = st
	}
	return out, nil
}

// scriptBreakdown explains a script's time per call from commandstats: the
// EVALSHA calls and µs per call, then each data command with its calls per
// script call and µs per call, and what is left of the script's time: Lua
// itself (the interpreter, converting arguments and replies, building
// strings) and the call's overhead. A command called less than once per
// hundred script calls is not the script's (the service reads an item's
// settings about once a second): it is listed by its calls and left out of
// the script's share.
func scriptBreakdown(stats map[string]cmdStat) string {
	ev := stats["evalsha"]
	if ev.calls == 0 {
		return "commandstats: no evalsha"
	}
	names := make([]string, 0, len(stats))
	for name, st := range stats {
		// "eval" is the script's first run, which loads it (go-redis falls
		// back to EVAL on NOSCRIPT).
		if st.calls > 0 && !adminCommand(name) && name != "evalsha" && name != "eval" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	nested := 0.0
	for _, name := range names {
		st := stats[name]
		per := float64(st.calls) / float64(ev.calls)
		if per < 0.01 { // not the script's: the service's own reads
			parts = append(parts, fmt.Sprintf("%s %d calls %.2f µs", name, st.calls, st.perCall()))
			continue
		}
		nested += st.usec
		parts = append(parts, fmt.Sprintf("%s %.2f× %.2f µs", name, per, st.perCall()))
	}
	lua := (ev.usec - nested) / float64(ev.calls)
	return fmt.Sprintf("commandstats: evalsha %d calls %.2f µs each, of which per call: %s; Lua and call overhead %.2f µs",
		ev.calls, ev.perCall(), strings.Join(parts, ", "), lua)
}

// adminCommand tells the benchmark's and the client's own commands (INFO,
// CONFIG, connection set-up) from the data path's.
func adminCommand(name string) bool {
	base, _, _ := strings.Cut(name, "|")
	switch base {
	case "info", "config", "hello", "client", "ping", "select", "auth", "script", "flushall":
		return true
	}
	return false
}
