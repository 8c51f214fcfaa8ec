//go:build unix

package secretfile

import (
	"io/fs"
	"os"
	"syscall"
)

// owned reports whether the process's effective user owns the file.
func owned(st fs.FileInfo) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == os.Geteuid()
}
