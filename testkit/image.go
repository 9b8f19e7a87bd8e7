package testkit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// The image built from the host's redis-server: the binary, the shared
// libraries ldd lists (at the same paths) and the dynamic loader, nothing
// else. Changing this text changes the image tag.
const dockerfile = `FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /data
EXPOSE 6379
CMD ["redis-server"]
`

type imageFile struct {
	src, dst string // host path, path in the image
	mode     os.FileMode
}

type imageSpec struct {
	bin   string
	ref   string // quorumlock/redis-test:<hash>
	files []imageFile
}

var localSpec struct {
	once sync.Once
	spec *imageSpec
	err  error
}

// localImageSpec lists what goes into the locally built image and derives
// its tag from the content, once per process.
func localImageSpec() (*imageSpec, error) {
	localSpec.once.Do(func() { localSpec.spec, localSpec.err = computeImageSpec() })
	return localSpec.spec, localSpec.err
}

func computeImageSpec() (*imageSpec, error) {
	bin, err := redisproc.FindBinary()
	if err != nil {
		return nil, err
	}
	libs, err := sharedLibs(bin)
	if err != nil {
		return nil, err
	}
	files := []imageFile{{src: bin, dst: "/usr/local/bin/redis-server", mode: 0o755}}
	for _, l := range libs {
		st, err := os.Stat(l)
		if err != nil {
			return nil, err
		}
		files = append(files, imageFile{src: l, dst: l, mode: st.Mode().Perm()})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].dst < files[j].dst })

	h := sha256.New()
	io.WriteString(h, dockerfile)
	for _, f := range files {
		fh, err := fileHash(f.src)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s %o %s\n", f.dst, f.mode, fh)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return &imageSpec{bin: bin, ref: builtRepo + ":" + sum[:12], files: files}, nil
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sharedLibs returns the absolute paths ldd prints for bin, including the
// dynamic loader; none for a static binary.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	text := string(out)
	if err != nil {
		if strings.Contains(text, "not a dynamic executable") || strings.Contains(text, "statically linked") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, strings.TrimSpace(text))
	}
	var libs []string
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.Contains(line, "statically linked") {
			continue
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, line)
		}
		field := line
		if i := strings.Index(line, "=>"); i >= 0 {
			field = strings.TrimSpace(line[i+2:])
		}
		p := strings.Fields(field)
		if len(p) == 0 || !strings.HasPrefix(p[0], "/") {
			continue // linux-vdso.so.1 and the like
		}
		if !seen[p[0]] {
			seen[p[0]] = true
			libs = append(libs, p[0])
		}
	}
	return libs, nil
}

// buildImage builds spec.ref from a temporary context holding copies (not
// links) of the files.
func buildImage(pool *dockertest.Pool, spec *imageSpec) error {
	dir, err := os.MkdirTemp("", "quorumlock-redis-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, f := range spec.files {
		if err := copyFile(f.src, filepath.Join(dir, "rootfs", f.dst), f.mode); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err = pool.Client.BuildImage(dc.BuildImageOptions{
		Context:             ctx,
		Name:                spec.ref,
		Dockerfile:          "Dockerfile",
		ContextDir:          dir,
		OutputStream:        &out,
		RmTmpContainer:      true,
		ForceRmTmpContainer: true,
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, redisproc.Tail(out.String(), 20))
	}
	if !imagePresent(pool, spec.ref) {
		return fmt.Errorf("build reported success but %s is absent\n%s", spec.ref, redisproc.Tail(out.String(), 20))
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
