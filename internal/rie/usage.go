package rie

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is what the function's bootstrap process has used so far: its CPU
// time (user + system) and its peak resident memory, the two figures
// Lambda bills and sizes by.
type Usage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
}

// clockTick is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTick = 10 * time.Millisecond

// Usage reads the bootstrap's usage from /proc (Linux only): the
// emulator's child process, which runs once the first invocation started
// it.
func (f *Function) Usage() (Usage, error) {
	pid, err := f.Bootstrap()
	if err != nil {
		return Usage{}, err
	}
	u, err := ProcessUsage(pid)
	if err != nil {
		return Usage{}, fmt.Errorf("rie: %s: %w", f.Name, err)
	}
	return u, nil
}

// ProcessUsage reads process pid's usage from /proc (Linux only): CPU in
// clock ticks of 10 ms, so callers measure over many requests.
func ProcessUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, err
	}
	// pid (comm) state ppid ...: the comm may hold spaces and parentheses,
	// so the fields are counted after its last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return Usage{}, fmt.Errorf("/proc/%d/stat has %d fields", pid, len(fields))
	}
	var u Usage
	for _, i := range []int{11, 12} { // utime, stime: fields 14 and 15 of proc(5)
		ticks, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		u.CPU += time.Duration(ticks) * clockTick
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("/proc/%d/status: VmHWM %q: %w", pid, v, err)
			}
			u.PeakRSS = kb << 10
		}
	}
	return u, nil
}
