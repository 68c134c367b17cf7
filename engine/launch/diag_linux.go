package launch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sizes of the inet_diag structures (linux/inet_diag.h).
const (
	inetDiagReqV2Len = 56 // family, protocol, ext, pad, states, sockid
	inetDiagMsgLen   = 72 // family, state, timer, retrans, sockid, expires, rqueue, wqueue, uid, inode
	tcpStateListen   = 10 // TCP_LISTEN
)

// diagListeners asks the kernel for the listening TCP sockets of both
// families through NETLINK_SOCK_DIAG (inet_diag), filtered by state in the
// kernel: it walks the listening hash only, where reading /proc/net/tcp
// walks every socket and takes tens of milliseconds on a busy VM. That
// matters at the first healthy answer, whose check delays the cold request
// and so sits inside the cold window.
func diagListeners() ([]listener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("netlink sock_diag: %w", err)
	}
	defer unix.Close(fd)
	var out []listener
	for seq, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ls, err := diagDump(fd, uint32(seq+1), family)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

// diagDump sends one SOCK_DIAG_BY_FAMILY dump request for family's
// listening TCP sockets and reads the answer to its end.
func diagDump(fd int, seq uint32, family uint8) ([]listener, error) {
	req := make([]byte, unix.NLMSG_HDRLEN+inetDiagReqV2Len)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], seq)
	body := req[unix.NLMSG_HDRLEN:]
	body[0] = family
	body[1] = unix.IPPROTO_TCP
	ne.PutUint32(body[4:], 1<<tcpStateListen)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink sock_diag request: %w", err)
	}
	buf := make([]byte, 64<<10)
	var out []listener
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("netlink sock_diag answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("netlink sock_diag answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if code := int32(ne.Uint32(m.Data)); code != 0 {
						return nil, fmt.Errorf("netlink sock_diag: %w", syscall.Errno(-code))
					}
				}
				return nil, errors.New("netlink sock_diag: error answer")
			}
			l, err := parseDiagMsg(m.Data)
			if err != nil {
				return nil, err
			}
			out = append(out, l)
		}
	}
}

// parseDiagMsg reads one inet_diag_msg: the socket's local address and
// port (network byte order), its owner's uid and its inode.
func parseDiagMsg(b []byte) (listener, error) {
	if len(b) < inetDiagMsgLen {
		return listener{}, fmt.Errorf("netlink sock_diag: a %d-byte socket record, want %d", len(b), inetDiagMsgLen)
	}
	ne := binary.NativeEndian
	var ip net.IP
	switch b[0] {
	case unix.AF_INET:
		ip = net.IP(append([]byte(nil), b[8:12]...))
	case unix.AF_INET6:
		ip = net.IP(append([]byte(nil), b[8:24]...))
	default:
		return listener{}, fmt.Errorf("netlink sock_diag: address family %d", b[0])
	}
	return listener{
		IP:    ip,
		Port:  int(binary.BigEndian.Uint16(b[4:6])),
		UID:   int(ne.Uint32(b[64:68])),
		Inode: uint64(ne.Uint32(b[68:72])),
	}, nil
}
