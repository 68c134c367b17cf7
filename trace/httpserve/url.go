package httpserve

import "net/url"

// ParseHTTPURL parses raw and reports whether it is an absolute http or
// https URL with a host: what a bench or attach target and an OTLP
// collector must be. Callers say what was wrong in their own words.
func ParseHTTPURL(raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, false
	}
	return u, true
}
