package scenario

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Progress shows a run's live line: redrawn in place on a terminal, one
// line every 5 s elsewhere (a log or CI).
type Progress struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	shown   bool
	lastLog time.Time
}

// NewProgress writes to w; tty redraws in place.
func NewProgress(w io.Writer, tty bool) *Progress { return &Progress{w: w, tty: tty} }

// IsTerminal tells whether f is a terminal (a character device).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Update shows line.
func (p *Progress) Update(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
		return
	}
	if time.Since(p.lastLog) >= 5*time.Second {
		fmt.Fprintln(p.w, line)
		p.lastLog = time.Now()
	}
}

// Done ends the live line.
func (p *Progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.shown = false
	p.lastLog = time.Time{}
}

// Printf writes a line above the live one.
func (p *Progress) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
	fmt.Fprintf(p.w, format, args...)
}

// bar draws frac (0..1) as [=====>    ] of width cells.
func bar(frac float64, width int) string {
	frac = max(0, min(frac, 1))
	full := int(frac * float64(width))
	var b strings.Builder
	b.WriteByte('[')
	b.WriteString(strings.Repeat("=", full))
	if full < width {
		b.WriteByte('>')
		b.WriteString(strings.Repeat(" ", width-full-1))
	}
	b.WriteByte(']')
	return b.String()
}

// thousands writes n with commas: 12,345.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
