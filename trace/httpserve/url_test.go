package httpserve

import "testing"

func TestParseHTTPURL(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://127.0.0.1:8000": true, "https://h/v1": true, "HTTP://h": true,
		"127.0.0.1:8000": false, "ftp://h": false, "http://": false, "http://[::1": false, "": false, "/v1/traces": false,
	} {
		u, ok := ParseHTTPURL(raw)
		if ok != want || ok != (u != nil) {
			t.Errorf("ParseHTTPURL(%q) = %v, %v; want ok %v", raw, u, ok, want)
		}
	}
}
