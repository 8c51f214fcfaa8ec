package callback

import (
	"log/slog"
	"sync"
)

// SecretsFile is a secrets file (ReadSecrets) re-read before each use, so
// that a rotation needs no restart, keeping its last good set: a content
// that does not read (the file gone, emptied, with a short secret, or open
// to others) is logged, once per distinct error, and the last good set
// signs on. A half-written or emptied file must neither stop the
// callbacks nor send them unsigned.
type SecretsFile struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	good    [][]byte
	refused string // the last refusal logged ("": none since the last good read)
}

// OpenSecrets reads path once, where an error should stop the part (its
// error names the file, never a secret), and keeps it for Current.
func OpenSecrets(path string, log *slog.Logger) (*SecretsFile, error) {
	good, err := ReadSecrets(path)
	if err != nil {
		return nil, err
	}
	return &SecretsFile{path: path, log: log, good: good}, nil
}

// Current re-reads the file and returns its secrets, or the last good
// ones when it does not read.
func (s *SecretsFile) Current() [][]byte {
	got, err := ReadSecrets(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if msg := err.Error(); msg != s.refused {
			s.refused = msg
			s.log.Error("reload: the callback secrets file's new content is refused; the last good secrets stay in force",
				"file", s.path, "err", err)
		}
		return s.good
	}
	if s.refused != "" {
		s.log.Info("reload: the callback secrets file reads again; its secrets are in force", "file", s.path)
		s.refused = ""
	}
	s.good = got
	return got
}
