package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShowsTheProgram: the README's first Go block is main.go between
// its markers, so that the example compiles as written.
func TestReadmeShowsTheProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i, j := strings.Index(s, "// README example begins\n"), strings.Index(s, "// README example ends\n")
	if i < 0 || j < i {
		t.Fatal("main.go lost its markers")
	}
	body := strings.TrimSpace(s[i+len("// README example begins\n") : j])
	block := "```go\n" + body + "\n```\n"
	r := string(readme)
	if k := strings.Index(r, "```go\n"); k < 0 || !strings.HasPrefix(r[k:], block) {
		t.Errorf("the README's first Go block is not main.go's example:\n%s", block)
	}
}
