//go:build !linux

package launch

import "errors"

// diagListeners is Linux's inet_diag; elsewhere the tables are tried (and
// are not there either).
func diagListeners() ([]listener, error) {
	return nil, errors.New("netlink sock_diag is Linux only")
}
