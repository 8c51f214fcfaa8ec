package cli

import "testing"

func TestRedactURLDropsWhatMayCarryACredential(t *testing.T) {
	for raw, want := range map[string]string{
		"https://bob:s3cret@hooks.example.com:8443/run?token=s3cret#s3cret": "https://hooks.example.com:8443/run?...",
		"http://127.0.0.1:9000/jobs":                                        "http://127.0.0.1:9000/jobs",
		"hooks.example.com/x?key=s3cret":                                    "hooks.example.com/x?...",
		"http://[::1:80/":                                                   "(invalid URL)",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
