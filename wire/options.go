package wire

import (
	"crypto/tls"
	"fmt"
	"time"
)

// Default limits.
const (
	// DefaultMaxBody is the default largest body: values are up to 1 MiB
	// (MaxValueSize) and range replies carry many.
	DefaultMaxBody = 4 << 20
	// DefaultMaxFrameSize is the default Options.MaxFrameSize.
	DefaultMaxFrameSize = HeaderSize + DefaultMaxBody
	// MaxValueSize is the largest value Cell stores (docs/design.md §2); servers
	// answer StatusValueTooLarge above it.
	MaxValueSize = 1 << 20
)

// Options configure a Conn, a Reader and a ReplyWriter. The zero value of
// every field means its default.
type Options struct {
	// MaxFrameSize bounds every frame, header included, in both
	// directions: Call refuses larger requests and Reader skips larger
	// frames, both with ErrFrameTooLarge. Default DefaultMaxFrameSize
	// (4 MiB + 32). Both ends should agree; at least HeaderSize.
	MaxFrameSize int
	// MaxInFlight bounds the calls awaiting a reply on one Conn; further
	// calls wait (honouring their context). Default 4096.
	MaxInFlight int
	// ReadBufferSize is the bufio.Reader size. Default 32 KiB.
	ReadBufferSize int
	// WriteBufferSize is the bufio.Writer size; frames are batched in it
	// and flushed when no more are queued. Default 32 KiB.
	WriteBufferSize int
	// WriteTimeout, if positive, bounds each write to a net.Conn; a write
	// that times out breaks the connection. Default 0: no timeout (TCP
	// keepalive still detects dead peers).
	WriteTimeout time.Duration
	// TLS, if set, makes Dial connect over TLS with this client
	// configuration (its ServerName, when empty, is the dialled host:
	// tlsconf.ForAddr). Nil: plain TCP. Readers, reply writers and
	// NewConn ignore it: they run over whatever net.Conn they are given.
	TLS *tls.Config
}

// EnsureDefaults fills zero fields with their defaults and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = DefaultMaxFrameSize
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 4096
	}
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = 32 << 10
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = 32 << 10
	}
	return o
}

// Validate reports whether the options are usable.
func (o *Options) Validate() error {
	if o.MaxFrameSize < HeaderSize || int64(o.MaxFrameSize) > 1<<32-1 {
		return fmt.Errorf("wire: MaxFrameSize %d not in [%d, 2^32)", o.MaxFrameSize, HeaderSize)
	}
	if o.MaxInFlight < 1 {
		return fmt.Errorf("wire: MaxInFlight %d < 1", o.MaxInFlight)
	}
	if o.ReadBufferSize < HeaderSize || o.WriteBufferSize < HeaderSize {
		return fmt.Errorf("wire: buffer sizes %d/%d below %d", o.ReadBufferSize, o.WriteBufferSize, HeaderSize)
	}
	if o.WriteTimeout < 0 {
		return fmt.Errorf("wire: negative WriteTimeout %v", o.WriteTimeout)
	}
	return nil
}

// resolve returns a copy of opts (nil allowed) with defaults filled in, or
// an error if it is invalid.
func resolve(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	return o, o.Validate()
}
