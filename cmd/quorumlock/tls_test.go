package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestTLSFlags: 3 servers that speak TLS only on their TLS port and demand
// a client certificate. exec reaches them with --tls-ca, --tls-cert and
// --tls-key; without the client certificate, or with a CA that did not
// sign the servers' certificates, it cannot (exit 5), and a redis:// URL
// with TLS flags is bad usage.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writeCert(t, dir, "ca", nil, nil)
	writeCert(t, dir, "server", ca, caKey)
	writeCert(t, dir, "client", ca, caKey)
	writeCert(t, dir, "other-ca", nil, nil)
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, startTLSServer(t, dir, i))
	}
	list := strings.Join(addrs, ",")
	pemOf := func(name string) string { return filepath.Join(dir, name+".pem") }
	keyOf := func(name string) string { return filepath.Join(dir, name+".key") }
	for _, tc := range []struct {
		name  string
		flags []string
		want  int
	}{
		{"CA and client certificate", []string{"--tls-ca", pemOf("ca"), "--tls-cert", pemOf("client"), "--tls-key", keyOf("client")}, 0},
		{"no client certificate", []string{"--tls-ca", pemOf("ca")}, exitUnavailable},
		{"another CA", []string{"--tls-ca", pemOf("other-ca"), "--tls-cert", pemOf("client"), "--tls-key", keyOf("client")}, exitUnavailable},
		{"a certificate without its key", []string{"--tls-ca", pemOf("ca"), "--tls-cert", pemOf("client")}, exitUsage},
	} {
		p := startCLI(t, nil, append(append([]string{"exec", nodeTimeout, freshServers, "--addrs", list}, tc.flags...), "tls-1", "--", "true")...)
		if code := p.wait(t); code != tc.want {
			t.Errorf("%s: exit %d, want %d\n%s", tc.name, code, tc.want, p.stderr.String())
		}
	}
	p := startCLI(t, nil, "exec", nodeTimeout, "--addrs", "redis://"+addrs[0], "--tls-ca", pemOf("ca"), "tls-2", "--", "true")
	if code := p.wait(t); code != exitUsage {
		t.Errorf("a redis:// URL with --tls-ca: exit %d, want %d\n%s", code, exitUsage, p.stderr.String())
	}
}

// startTLSServer starts redis-server i with a TLS port that demands client
// certificates (its plain port answers the readiness check only), and
// returns the TLS port's address.
func startTLSServer(t *testing.T, dir string, i int) string {
	t.Helper()
	bin, err := redisproc.FindBinary()
	if err != nil {
		t.Skip(err)
	}
	tlsPort, err := redisproc.PickPort()
	if err != nil {
		t.Fatal(err)
	}
	args := redisproc.Args("", []string{"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "yes"})
	srv, _, err := redisproc.StartOnFreePort(func(port int) (*redisproc.Server, error) {
		return redisproc.New(bin, filepath.Join(dir, fmt.Sprintf("node%d", i)), port, args)
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Remove() })
	return redisproc.Addr(tlsPort)
}

// writeCert writes name.pem and name.key: a CA when parent is nil, else a
// certificate for 127.0.0.1 signed by parent. It returns the certificate
// and its key.
func writeCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+".key", "EC PRIVATE KEY", kb)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
