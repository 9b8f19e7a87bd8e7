package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// applyTLS sets the TLS configuration of the TLS flags on every node:
// host:port entries and rediss:// URLs; a redis:// URL (plain text, said
// explicitly) with a TLS flag is an error.
func (f *nodeFlags) applyTLS(nodes []node) error {
	if f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" {
		return nil
	}
	base, err := f.tlsConfig()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.plain || n.opt.Network == "unix" {
			return fmt.Errorf("node %s is a redis:// or unix:// URL (no TLS) but TLS flags are given: write it as rediss://, or as host:port", n.name)
		}
		cfg := base.Clone()
		if n.opt.TLSConfig != nil && n.opt.TLSConfig.ServerName != "" {
			cfg.ServerName = n.opt.TLSConfig.ServerName
		} else if host, _, err := net.SplitHostPort(n.opt.Addr); err == nil {
			cfg.ServerName = host
		}
		n.opt.TLSConfig = cfg
	}
	return nil
}

// tlsConfig reads the TLS flags' files.
func (f *nodeFlags) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.tlsCA)
		}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both, or neither")
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// plainURL reports whether entry is a redis:// URL (TLS off, said so).
func plainURL(entry string) bool { return strings.HasPrefix(strings.ToLower(entry), "redis://") }
