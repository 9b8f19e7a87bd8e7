package main

import (
	"strings"
	"testing"
)

func TestParseAddrs(t *testing.T) {
	nodes, err := parseAddrs(" 10.0.0.1:6379, redis://:s3cret@db2:6380/1 ,rediss://user:pw@db3:6390,,[::1]:7000 ", "--addrs")
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("%d nodes, want 4", len(nodes))
	}
	want := []struct {
		name, user, password string
		db                   int
		tls                  bool
	}{
		{"10.0.0.1:6379", "", "", 0, false},
		{"db2:6380", "", "s3cret", 1, false},
		{"db3:6390", "user", "pw", 0, true},
		{"[::1]:7000", "", "", 0, false},
	}
	for i, w := range want {
		n := nodes[i]
		if n.name != w.name || n.opt.Addr != w.name || n.opt.Username != w.user || n.opt.Password != w.password || n.opt.DB != w.db || (n.opt.TLSConfig != nil) != w.tls {
			t.Errorf("node %d: %s %+v, want %+v", i, n.name, *n.opt, w)
		}
	}
}

func TestParseAddrsErrors(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"", "lists no Redis nodes"},
		{" , ", "lists no Redis nodes"},
		{"db1", "entry 1 (db1): not host:port"},
		{"db1:6379,db2:http", `entry 2 (db2:http): port "http"`},
		{":6379", "the host is empty"},
		{"db1:6379,db1:6379", "entries 1 and 2 both name db1:6379"},
		{"redis://db1:6379,redis://db1", "entries 1 and 2 both name db1:6379"},
		{"http://u:topsecret@db1:6379", "entry 1 (http://xxxxx@db1:6379): redis: invalid URL scheme"},
		{"redis://u:topsecret@db1:6379/x", "entry 1 (redis://xxxxx@db1:6379/x)"},
		{"redis://u:topsecret@[db1:6379", "entry 1 (redis://xxxxx@[db1:6379)"},
	} {
		_, err := parseAddrs(tc.list, "QUORUMLOCK_ADDRS")
		if err == nil {
			t.Errorf("%q: no error", tc.list)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q lacks %q", tc.list, err, tc.want)
		}
		if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("%q: the password shows in the error: %v", tc.list, err)
		}
	}
}

func TestWithoutPasswords(t *testing.T) {
	for in, want := range map[string]string{
		"h:1,redis://:pw@h:2,rediss://u:pw@h:3/0,redis://u@h:4": "h:1,redis://h:2,rediss://u@h:3/0,redis://u@h:4",
		"unix:///tmp/s": "unix:///tmp/s",
	} {
		if got := withoutPasswords(in); got != want {
			t.Errorf("withoutPasswords(%q) = %q, want %q", in, got, want)
		}
	}
}
