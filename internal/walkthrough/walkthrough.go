// Package walkthrough reads the walkthroughs of a Markdown page (each
// "## Walkthrough:" section, its ```sh blocks, the output block after each
// and the ```log blocks that show what the server logs meanwhile) and judges
// a command's real output against the output the page shows, so a test can
// run the page's commands as written and fail when the page no longer says
// what the code does.
package walkthrough

import (
	"fmt"
	"regexp"
	"strings"
)

// Walkthrough is one "## Walkthrough: ..." section of a page.
type Walkthrough struct {
	Title string
	// Line is the heading's line number (1-based).
	Line   int
	Blocks []Block
}

// Block is one ```sh block and the output block that follows it, if any.
type Block struct {
	// Line is the line number of the block's opening fence (1-based).
	Line int
	// Script is the block's text, run as it is.
	Script string
	// Want is the output the page shows right after the block (a fence
	// other than sh and log, with nothing but blank lines before it); nil
	// when the page shows none.
	Want []string
	// Log is what the page says the server's terminal shows once the
	// block ran: the ```log blocks after it, before the next sh block.
	Log []string
}

const heading = "## Walkthrough:"

var fenceRe = regexp.MustCompile("^```\\s*([A-Za-z0-9_-]*)\\s*$")

// Parse returns the walkthroughs of page in order.
func Parse(page string) []Walkthrough {
	var (
		out   []Walkthrough
		cur   *Walkthrough
		lines = strings.Split(page, "\n")
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "## ") {
			cur = nil
			if strings.HasPrefix(line, heading) {
				out = append(out, Walkthrough{Title: strings.TrimSpace(strings.TrimPrefix(line, heading)), Line: i + 1})
				cur = &out[len(out)-1]
			}
			continue
		}
		m := fenceRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		body, end := fenced(lines, i)
		if cur != nil && m[1] == "log" && len(cur.Blocks) > 0 {
			last := &cur.Blocks[len(cur.Blocks)-1]
			last.Log = append(last.Log, body...)
		}
		if cur == nil || m[1] != "sh" {
			i = end
			continue
		}
		b := Block{Line: i + 1, Script: strings.Join(body, "\n") + "\n"}
		// The output block: the next fence, with only blank lines between.
		j := end + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j < len(lines) {
			if n := fenceRe.FindStringSubmatch(lines[j]); n != nil && n[1] != "sh" && n[1] != "log" {
				want, wend := fenced(lines, j)
				b.Want = want
				end = wend
			}
		}
		cur.Blocks = append(cur.Blocks, b)
		i = end
	}
	return out
}

// fenced returns the lines inside the fence opening at lines[open], and the
// index of its closing fence (the last line if it has none).
func fenced(lines []string, open int) ([]string, int) {
	for k := open + 1; k < len(lines); k++ {
		if strings.TrimSpace(lines[k]) == "```" {
			return lines[open+1 : k], k
		}
	}
	return lines[open+1:], len(lines) - 1
}

// Wildcards are what an expected line may show as an example: a value of
// that shape matches any value of that shape.
var (
	// ids: a withdrawal, purchase or order id, whole (a ULID) or cut short
	// by "…"; sim_ payout ids are "sim_" and a withdrawal id.
	idRe = regexp.MustCompile(`(wd|pu|or)_[0-9A-HJKMNP-TV-Z]+`)
	// RFC 3339 times, with or without fractions, in UTC or with an offset.
	timeRe = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})`)
)

// Pattern is the regular expression one expected line stands for: the line
// as written, where "…" matches anything, and ids and times of the page's
// examples match any id of their kind and any time. It matches a whole line.
func Pattern(want string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for len(want) > 0 {
		loc := firstOf(want)
		if loc == nil {
			b.WriteString(regexp.QuoteMeta(want))
			break
		}
		b.WriteString(regexp.QuoteMeta(want[:loc[0]]))
		b.WriteString(loc2re(want[loc[0]:loc[1]]))
		want = want[loc[1]:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// firstOf finds the first wildcard of want: "…", an id or a time.
func firstOf(want string) []int {
	var best []int
	for _, loc := range [][]int{
		indexOf(want, "…"), idRe.FindStringIndex(want), timeRe.FindStringIndex(want),
	} {
		if loc != nil && (best == nil || loc[0] < best[0]) {
			best = loc
		}
	}
	return best
}

func indexOf(s, sub string) []int {
	if i := strings.Index(s, sub); i >= 0 {
		return []int{i, i + len(sub)}
	}
	return nil
}

// loc2re is the expression of one wildcard.
func loc2re(w string) string {
	switch {
	case w == "…":
		return ".*"
	case idRe.MatchString(w):
		return regexp.QuoteMeta(w[:3]) + `[0-9A-HJKMNP-TV-Z]+`
	default:
		return timeRe.String()
	}
}

// Lines joins an output block's lines as the page wraps them: a line that
// starts with white space continues the one before it (the page wraps a
// long JSON line there), and blank lines are dropped.
func Lines(block []string) []string {
	var out []string
	for _, l := range block {
		switch {
		case strings.TrimSpace(l) == "":
		case (l[0] == ' ' || l[0] == '\t') && len(out) > 0:
			out[len(out)-1] += strings.TrimSpace(l)
		default:
			out = append(out, strings.TrimRight(l, " \t"))
		}
	}
	return out
}

// Match reports whether the output got shows the lines of want (an output
// block, see Lines) in order, each a whole line of got (a subsequence:
// other lines may come between). A line that is only "…" stands for any
// lines. The error names the first expected line not found, after which
// line of got it was looked for.
func Match(want []string, got string) error {
	actual := strings.Split(strings.ReplaceAll(got, "\r", ""), "\n")
	at := 0
	for _, w := range Lines(want) {
		if w == "…" {
			continue
		}
		re := Pattern(w)
		found := false
		for at < len(actual) {
			line := actual[at]
			at++
			if re.MatchString(line) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("expected line not in the output (in order):\n  %s", w)
		}
	}
	return nil
}
