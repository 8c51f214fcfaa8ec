// Package secretfile reads the files a part checks credentials against or
// signs with (the gate's tokens, the console's admin tokens, the
// coordinator's callback secrets) and those holding a credential it
// presents (cli.Secret's files), refusing one whose permissions let others
// read or change it, as ssh refuses a private key that others can read.
//
// The rule (docs/security.md#secret-files):
//   - a file anyone may write (o+w) is refused: anyone could plant a token;
//   - a file owned by the part's own user must be readable by that user
//     only (no group or other bits: chmod 600), since that user can fix it;
//   - a file owned by another user (a Docker or Kubernetes secret mount,
//     root's, read through its group or other bits) is accepted: the part
//     cannot change it, and the mount decides who sees it.
package secretfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Read opens file, checks its permissions (Check) on the open file, so
// that a swap between the check and the read cannot slip one in, and
// returns its content.
func Read(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := check(file, st); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// Check reports whether file's permissions are tight enough; its error
// names the file and the chmod that fixes it.
func Check(file string) error {
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	return check(file, st)
}

func check(file string, st fs.FileInfo) error {
	mode := st.Mode().Perm()
	if mode&0o002 != 0 {
		return fmt.Errorf("%s may be written by anyone (mode %04o): a secret file must not be; chmod 600 %s (or o-w)", file, mode, file)
	}
	if owned(st) && mode&0o077 != 0 {
		return fmt.Errorf("%s is open to group or others (mode %04o): a secret file the part's own user owns must be readable by that user only, as ssh asks of a key; chmod 600 %s", file, mode, file)
	}
	return nil
}
