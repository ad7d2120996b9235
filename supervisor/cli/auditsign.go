package cli

import (
	"fmt"
	"log/slog"
	"log/syslog"
	"sync"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/supervisor/config"
)

// signingOptions are the audit store's options that sign its chain head
// with the config's audit.signing_key (made on the first start) and, when
// audit.syslog is set, send each signed head there.
func signingOptions(cfg config.Config, configPath string, log *slog.Logger) ([]auditstore.Option, error) {
	if err := cfg.CheckSigningKeyPath(configPath); err != nil {
		return nil, err
	}
	path := cfg.SigningKeyPath(configPath)
	signer, err := auditstore.LoadSigningKey(path, true)
	if err != nil {
		return nil, fmt.Errorf("%w: audit.signing_key: %w", config.ErrConfig, err)
	}
	log.Info("audit checkpoints signed", "key", path, "public_key", signer.PublicKey())
	opts := []auditstore.Option{auditstore.WithSigner(signer)}
	if cfg.Audit.Syslog != "" {
		opts = append(opts, auditstore.WithSink(syslogSink(cfg.Audit.Syslog, log)))
	}
	return opts, nil
}

// syslogSink sends every signed chain head to the local syslog socket at
// addr, as a line `audit verify --anchor` takes. A syslog that is down is
// warned about once and dialled again at the next head.
func syslogSink(addr string, log *slog.Logger) auditstore.Sink {
	var (
		mu     sync.Mutex
		w      *syslog.Writer
		warned bool
	)
	return func(c audit.Checkpoint) {
		mu.Lock()
		defer mu.Unlock()
		msg := fmt.Sprintf("audit head anchor=%d:%s public_key=%s signature=%s", c.Seq, c.RowHash, c.PublicKey, c.Signature)
		var err error
		for range 2 {
			if w == nil {
				if w, err = syslog.Dial("unixgram", addr, syslog.LOG_NOTICE|syslog.LOG_DAEMON, "cyberos-audit"); err != nil {
					w = nil
					continue
				}
			}
			if err = w.Notice(msg); err == nil {
				warned = false
				return
			}
			_ = w.Close()
			w = nil
		}
		if !warned {
			log.Warn("audit.syslog: the signed head was not sent", "addr", addr, "seq", c.Seq, "err", err)
			warned = true
		}
	}
}
