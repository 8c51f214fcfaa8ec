package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPermissions: a secret file the process owns is read only when no
// group or other bit is set; one anyone may write never is. The error
// names the file and the chmod.
func TestPermissions(t *testing.T) {
	dir := t.TempDir()
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o640: false, 0o644: false, 0o604: false, 0o660: false, 0o666: false} {
		f := filepath.Join(dir, "tokens")
		os.Remove(f)
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		b, err := Read(f)
		if ok && (err != nil || string(b) != "x") {
			t.Errorf("mode %04o: %q %v, want read", mode, b, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+f)) {
			t.Errorf("mode %04o: %v, want refused naming chmod 600 %s", mode, err, f)
		}
		if cerr := Check(f); (cerr == nil) != ok {
			t.Errorf("mode %04o: Check %v", mode, cerr)
		}
	}
}

// TestAFileOfAnotherUser: a mount's file, owned by another user and read
// through its other bits, is accepted, unless anyone may write it. Only
// root can give a file away: skipped otherwise.
func TestAFileOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown a file to another user")
	}
	f := filepath.Join(t.TempDir(), "mounted")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	os.Chmod(f, 0o444)
	if _, err := Read(f); err != nil {
		t.Errorf("a 0444 file of another user: %v", err)
	}
	os.Chmod(f, 0o646)
	if _, err := Read(f); err == nil || !strings.Contains(err.Error(), "written by anyone") {
		t.Errorf("a world-writable file of another user: %v", err)
	}
}
