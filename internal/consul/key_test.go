package consul

import "testing"

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		stage string
		parts []string
		want  string // "" for an error
	}{
		{"dev", []string{"relay", "jobs", "lock"}, "sluice/dev/relay/jobs/lock"},
		{"prod", []string{"scaling"}, "sluice/prod/scaling"},
		{"dev", []string{"limits", "api.example.com"}, "sluice/dev/limits/api.example.com"},
		{"", []string{"scaling"}, ""},
		{"dev", nil, ""},
		{"dev", []string{"relay", "", "lock"}, ""},
		{"a/b", []string{"scaling"}, ""},
		{"dev", []string{"relay", "jobs/x", "lock"}, ""},
		{"dev", []string{"relay", "..", "lock"}, ""},
		{".", []string{"scaling"}, ""},
	} {
		got, err := Key(tc.stage, tc.parts...)
		if tc.want == "" {
			if err == nil {
				t.Errorf("Key(%q, %q) = %q, want an error", tc.stage, tc.parts, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Key(%q, %q) = %q, %v; want %q", tc.stage, tc.parts, got, err, tc.want)
		}
	}
}
