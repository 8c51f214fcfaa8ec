//go:build !unix

package secretfile

import "io/fs"

// owned: without Unix owners the group and other bits mean nothing.
func owned(fs.FileInfo) bool { return false }
