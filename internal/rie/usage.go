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
	pid, err := f.bootstrapPID()
	if err != nil {
		return Usage{}, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("rie: %s: %w", f.Name, err)
	}
	// The command name may hold spaces: the fields follow its ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return Usage{}, fmt.Errorf("rie: %s: /proc/%d/stat has %d fields", f.Name, pid, len(fields))
	}
	var u Usage
	for _, i := range []int{11, 12} { // utime, stime: fields 14 and 15 of stat(5)
		ticks, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("rie: %s: /proc/%d/stat: %w", f.Name, pid, err)
		}
		u.CPU += time.Duration(ticks) * clockTick
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("rie: %s: %w", f.Name, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("rie: %s: VmHWM %q: %w", f.Name, v, err)
			}
			u.PeakRSS = kb << 10
		}
	}
	return u, nil
}

// bootstrapPID is the pid of the emulator's child, the bootstrap.
func (f *Function) bootstrapPID() (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", f.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("rie: %s: %w", f.Name, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", f.cmd.Process.Pid, t.Name()))
		if err != nil {
			continue
		}
		if kids := strings.Fields(string(b)); len(kids) > 0 {
			return strconv.Atoi(kids[0])
		}
	}
	return 0, fmt.Errorf("rie: %s: the emulator has no bootstrap process running", f.Name)
}
