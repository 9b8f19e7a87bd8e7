package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// Container labels. Every container carries labelTest=1; the owner labels
// let a later run remove only containers whose test binary is gone.
const (
	labelTest     = "quorumlock.test"
	labelPid      = "quorumlock.test.pid"
	labelPidStart = "quorumlock.test.pidstart"
	labelHost     = "quorumlock.test.host"
	labelCluster  = "quorumlock.test.cluster"

	// Containers of another host (or without owner labels) are removed
	// once older than this.
	leftoverAge = 10 * time.Minute

	redisOfficialImage = "redis:7"
	pullBound          = 5 * time.Second // bound for trying to pull redis:7
	explicitPullBound  = 2 * time.Minute // bound for pulling QUORUMLOCK_REDIS_IMAGE
	builtRepo          = "quorumlock/redis-test"
)

// runID distinguishes this test binary's container names from any other's.
var runID = fmt.Sprintf("%08x", rand.Uint32())

type dockerEnv struct {
	pool      *dockertest.Pool
	image     string // repository:tag
	repo, tag string
}

var docker struct {
	once   sync.Once
	env    *dockerEnv
	err    error
	mu     sync.Mutex
	broken error // set when containers failed to start in auto mode
}

// dockerEnvironment connects to the daemon, removes leftover containers and
// resolves (pulls or builds) the image, once per process. logf is the
// logger of the first caller.
func dockerEnvironment(logf func(string, ...any)) (*dockerEnv, error) {
	docker.mu.Lock()
	broken := docker.broken
	docker.mu.Unlock()
	if broken != nil {
		return nil, fmt.Errorf("disabled for this run after an earlier failure: %w", broken)
	}
	docker.once.Do(func() {
		docker.env, docker.err = newDockerEnv(logf)
	})
	return docker.env, docker.err
}

func markDockerBroken(err error) {
	docker.mu.Lock()
	defer docker.mu.Unlock()
	if docker.broken == nil {
		docker.broken = err
	}
}

// dockerCleanupIdle closes idle connections to the daemon so that no HTTP
// goroutines outlive a test.
func dockerCleanupIdle() {
	if docker.env != nil && docker.env.pool.Client.HTTPClient != nil {
		docker.env.pool.Client.HTTPClient.CloseIdleConnections()
	}
}

func newDockerEnv(logf func(string, ...any)) (*dockerEnv, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return nil, fmt.Errorf("no Docker daemon answered at %s: %w", pool.Client.Endpoint(), err)
	}
	if n, err := removeLeftovers(pool); err != nil {
		logf("testkit: looking for leftover containers: %v", err)
	} else if n > 0 {
		logf("testkit: removed %d leftover redis container(s) of earlier, interrupted test runs", n)
	}
	image, err := resolveImage(pool, logf)
	if err != nil {
		return nil, err
	}
	repo, tag := splitRef(image)
	return &dockerEnv{pool: pool, image: image, repo: repo, tag: tag}, nil
}

// removeLeftovers removes containers with our label whose owning test
// binary is gone: for this host, its pid is dead or reused; for containers
// of other hosts or without owner labels, they are older than leftoverAge.
func removeLeftovers(pool *dockertest.Pool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := pool.Client.ListContainers(dc.ListContainersOptions{
		All:     true,
		Filters: map[string][]string{"label": {labelTest + "=1"}},
		Context: ctx,
	})
	if err != nil {
		return 0, err
	}
	host, _ := os.Hostname()
	removed := 0
	for _, ct := range list {
		pid, perr := strconv.Atoi(ct.Labels[labelPid])
		var stale bool
		if perr == nil && host != "" && ct.Labels[labelHost] == host {
			stale = !redisproc.ProcessAlive(pid, ct.Labels[labelPidStart])
		} else {
			stale = time.Since(time.Unix(ct.Created, 0)) > leftoverAge
		}
		if !stale {
			continue
		}
		err := pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: ct.ID, Force: true, RemoveVolumes: true, Context: ctx})
		if err == nil {
			removed++
		}
	}
	return removed, nil
}

// ownerLabels returns the labels put on every container of cluster id.
func ownerLabels(clusterID string) map[string]string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return map[string]string{
		labelTest:     "1",
		labelPid:      strconv.Itoa(pid),
		labelPidStart: redisproc.ProcessStartTime(pid),
		labelHost:     host,
		labelCluster:  runID + "-" + clusterID,
	}
}

// startDocker runs n containers in parallel.
func (c *Cluster) startDocker(env *dockerEnv, n int, cfg config) error {
	c.backend = BackendDocker
	cmd := append([]string{"redis-server",
		"--port", "6379",
		"--bind", "0.0.0.0",
		"--protected-mode", "no",
		"--dir", "/data",
	}, redisArgs(cfg)...)
	labels := ownerLabels(c.id)
	return c.startNodes(n, func(i, port int) (server, error) {
		return &dockerServer{
			env:    env,
			port:   port,
			cmd:    cmd,
			labels: labels,
			name:   fmt.Sprintf("quorumlock-redis-%s-c%s-n%d-p%d", runID, c.id, i, port),
		}, nil
	})
}

// dockerServer is a node of the docker backend: one container, recreated
// only by Restart(true).
type dockerServer struct {
	env    *dockerEnv
	port   int
	cmd    []string
	labels map[string]string
	name   string // container name prefix

	id  string // current container, "" before the first launch
	gen int    // number of containers created
}

func (s *dockerServer) client() *dc.Client { return s.env.pool.Client }

func (s *dockerServer) Launch(amnesia bool) error {
	if s.id != "" && !amnesia {
		// Same container: its writable layer keeps the append only file.
		return s.client().StartContainer(s.id, nil)
	}
	if s.id != "" {
		if err := s.removeContainer(s.id); err != nil {
			return err
		}
		s.id = ""
	}
	s.gen++
	name := fmt.Sprintf("%s-g%d", s.name, s.gen)
	res, err := s.env.pool.RunWithOptions(&dockertest.RunOptions{
		Name:         name,
		Repository:   s.env.repo,
		Tag:          s.env.tag,
		Cmd:          s.cmd,
		Labels:       s.labels,
		ExposedPorts: []string{"6379/tcp"},
		PortBindings: map[dc.Port][]dc.PortBinding{
			"6379/tcp": {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(s.port)}},
		},
	}, func(hc *dc.HostConfig) {
		hc.PublishAllPorts = false
		hc.AutoRemove = false
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
	})
	if err != nil {
		// RunWithOptions leaves a created-but-unstarted container behind
		// when starting fails (e.g. the port was taken): remove it by name.
		_ = s.removeContainer(name)
		return fmt.Errorf("docker run %s: %w", s.env.image, err)
	}
	s.id = res.Container.ID
	return nil
}

func (s *dockerServer) Exited() error {
	if s.id == "" {
		return errors.New("never started")
	}
	ct, err := s.client().InspectContainer(s.id)
	if err != nil {
		var nsc *dc.NoSuchContainer
		if errors.As(err, &nsc) {
			return err
		}
		return nil // cannot tell
	}
	if !ct.State.Running {
		return fmt.Errorf("container %s: %s, exit code %d %s", s.id[:12], ct.State.Status, ct.State.ExitCode, ct.State.Error)
	}
	return nil
}

func (s *dockerServer) signal(sig dc.Signal) error {
	if s.id == "" {
		return nil
	}
	err := s.client().KillContainer(dc.KillContainerOptions{ID: s.id, Signal: sig})
	var cnr *dc.ContainerNotRunning
	if errors.As(err, &cnr) {
		return nil
	}
	if err != nil && strings.Contains(err.Error(), "is not running") {
		return nil
	}
	return err
}

// waitExit waits up to d for the container to stop running.
func (s *dockerServer) waitExit(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := s.client().WaitContainerWithContext(s.id, ctx)
	return err
}

func (s *dockerServer) Kill() error {
	if s.id == "" {
		return nil
	}
	if err := s.signal(dc.SIGKILL); err != nil {
		return err
	}
	return s.waitExit(redisproc.StopTimeout)
}

func (s *dockerServer) Stop() error {
	if s.id == "" {
		return nil
	}
	// Not "docker stop": dockertest sets the containers' stop signal to
	// SIGWINCH, which Redis ignores.
	if err := s.signal(dc.SIGTERM); err != nil {
		return err
	}
	if s.waitExit(redisproc.StopTimeout) == nil {
		return nil
	}
	return s.Kill()
}

func (s *dockerServer) Pause() error  { return s.client().PauseContainer(s.id) }
func (s *dockerServer) Resume() error { return s.client().UnpauseContainer(s.id) }

func (s *dockerServer) Remove() error {
	if s.id == "" {
		return nil
	}
	err := s.removeContainer(s.id)
	if err == nil {
		s.id = ""
	}
	return err
}

// removeContainer force-removes a container by id or name; a missing
// container is not an error.
func (s *dockerServer) removeContainer(idOrName string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.client().RemoveContainer(dc.RemoveContainerOptions{ID: idOrName, Force: true, RemoveVolumes: true, Context: ctx})
	var nsc *dc.NoSuchContainer
	if errors.As(err, &nsc) {
		return nil
	}
	return err
}

func (s *dockerServer) LogTail() string {
	if s.id == "" {
		return "(no container)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var buf bytes.Buffer
	err := s.client().Logs(dc.LogsOptions{
		Context: ctx, Container: s.id, OutputStream: &buf, ErrorStream: &buf,
		Stdout: true, Stderr: true, Tail: "20",
	})
	if err != nil {
		return fmt.Sprintf("(docker logs: %v)\n%s", err, buf.String())
	}
	return redisproc.Tail(buf.String(), 20)
}

// splitRef splits "repo[:tag]" (the repo may contain a registry host:port).
func splitRef(ref string) (repo, tag string) {
	slash := strings.LastIndexByte(ref, '/')
	if colon := strings.LastIndexByte(ref, ':'); colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, "latest"
}

func imagePresent(pool *dockertest.Pool, ref string) bool {
	_, err := pool.Client.InspectImage(ref)
	return err == nil
}

func pullImage(pool *dockertest.Pool, ref string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	repo, tag := splitRef(ref)
	err := pool.Client.PullImage(dc.PullImageOptions{
		Repository: repo, Tag: tag, OutputStream: io.Discard, Context: ctx,
	}, dc.AuthConfiguration{})
	if err != nil {
		return err
	}
	if !imagePresent(pool, ref) { // some daemons report pull errors only in the stream
		return fmt.Errorf("pull of %s reported success but the image is absent", ref)
	}
	return nil
}

// resolveImage picks the image: $QUORUMLOCK_REDIS_IMAGE; else the locally
// built image if present; else redis:7 if present or pullable within
// pullBound; else it builds the local image.
func resolveImage(pool *dockertest.Pool, logf func(string, ...any)) (string, error) {
	if ref := strings.TrimSpace(os.Getenv(EnvImage)); ref != "" {
		if strings.Contains(ref, "@") {
			return "", fmt.Errorf("%s=%q: digest references are not supported, use repository:tag", EnvImage, ref)
		}
		if imagePresent(pool, ref) {
			return ref, nil
		}
		if err := pullImage(pool, ref, explicitPullBound); err != nil {
			return "", fmt.Errorf("%s=%q is not present locally and could not be pulled: %w", EnvImage, ref, err)
		}
		return ref, nil
	}
	spec, specErr := localImageSpec()
	if specErr == nil && imagePresent(pool, spec.ref) {
		return spec.ref, nil
	}
	if server := redisproc.ServerName(); server != "redis-server" { // Valkey, say: never the official Redis image
		if specErr != nil {
			return "", fmt.Errorf("no image can be built from the local %s (%s): %w", server, redisproc.EnvServer, specErr)
		}
		return buildLocal(pool, spec, "another server than Redis is chosen", logf)
	}
	if imagePresent(pool, redisOfficialImage) {
		return redisOfficialImage, nil
	}
	pullErr := pullImage(pool, redisOfficialImage, pullBound)
	if pullErr == nil {
		return redisOfficialImage, nil
	}
	if specErr != nil {
		return "", fmt.Errorf("%s cannot be pulled (%v) and no image can be built from a local redis-server: %v",
			redisOfficialImage, pullErr, specErr)
	}
	return buildLocal(pool, spec, fmt.Sprintf("%s cannot be pulled (%v)", redisOfficialImage, pullErr), logf)
}

// buildLocal builds spec's image from the local server binary, for why.
func buildLocal(pool *dockertest.Pool, spec *imageSpec, why string, logf func(string, ...any)) (string, error) {
	begin := time.Now()
	if err := buildImage(pool, spec); err != nil {
		return "", fmt.Errorf("%s; building %s from %s failed: %w", why, spec.ref, spec.bin, err)
	}
	size := ""
	if img, err := pool.Client.InspectImage(spec.ref); err == nil {
		size = fmt.Sprintf(", %.1f MB", float64(img.Size)/1e6)
	}
	logf("testkit: %s; built %s from %s in %v%s", why, spec.ref, spec.bin, time.Since(begin).Round(time.Millisecond), size)
	return spec.ref, nil
}
