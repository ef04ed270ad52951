package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/cmd/threadbox/logging"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// errUsage means the usage text was already printed.
var errUsage = errors.New("usage")

// exitCode ends the process with a code and no further message (the command printed its own).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Main is the program: parsed flags, loaded config, and the subcommand to run.
type Main struct {
	Stdout, Stderr io.Writer
	Environ        []string

	ConfigPath string
	Config     config.Loaded
	Logger     *zap.Logger

	// OnListen, when set, is told the HTTP address once serve is listening (tests use :0).
	OnListen func(addr string)
	// httpTimeouts replaces defaultHTTPTimeouts where set (tests make them short).
	httpTimeouts httpTimeouts

	cmd  string
	args []string
	// closers run in reverse order on Close.
	closers []func() error
	// rdbOnce makes the Redis client (redis.url) that the chat adapters share.
	rdbOnce sync.Once
	rdb     *redis.Client
	rdbErr  error
}

// NewMain returns a Main writing to the given streams and reading the given environment.
func NewMain(stdout, stderr io.Writer, environ []string) *Main {
	return &Main{Stdout: stdout, Stderr: stderr, Environ: environ, Logger: zap.NewNop()}
}

const usage = `usage: threadbox [--config FILE] <command> [args]

commands:
  serve     run the bot (HTTP on http.addr, background loops, chat adapters)
  migrate   apply database migrations and exit
  doctor    check Docker, the database and Redis; print one line per problem
  admin     operator commands (sessions, inspect, pause, resume, destroy, reap, drain, stats)
  version   print the version
  forward   the model gateway's in-sandbox forwarder (run by Docker sandboxes, not by hand)

The config file may also be given as THREADBOX_CONFIG. Every key can be overridden with
THREADBOX_<SECTION>_<KEY>, for example THREADBOX_HTTP_ADDR=127.0.0.1:9090.
See deploy/threadbox.example.yaml for every key.
`

// ParseFlags reads global flags and the subcommand, then loads the config.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("threadbox", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() { fmt.Fprint(m.Stderr, usage) }
	fs.StringVar(&m.ConfigPath, "config", m.getenv("THREADBOX_CONFIG"), "config file (YAML)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return errUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	m.cmd, m.args = fs.Arg(0), fs.Args()[1:]
	switch m.cmd {
	case "version", "migrate", "doctor":
		if err := m.strayArgs(m.args); err != nil {
			return err
		}
	}
	switch m.cmd {
	case "version", "help", "-h", "--help", "forward":
		return nil
	}
	loaded, err := config.Load(m.ConfigPath, m.Environ)
	if err != nil {
		return err
	}
	m.Config = loaded
	logger, err := logging.New(m.Stderr, logging.Options{
		Level: loaded.Log.Level, Format: loaded.Log.Format,
		Secrets: m.secrets(),
		Public:  loaded.Public(),
	})
	if err != nil {
		return err
	}
	m.Logger = logger.Named("threadbox")
	m.onClose(func() error { _ = logger.Sync(); return nil })
	for _, w := range loaded.Warnings {
		m.Logger.Warn(w)
	}
	return nil
}

// strayArgs refuses arguments a command does not take. Above all a global flag given after the
// command (`threadbox migrate --config prod.yaml`): ignored, it would run the command on the
// defaults (migrating ./data/threadbox.db) and report success.
func (m *Main) strayArgs(rest []string) error {
	if len(rest) == 0 {
		return nil
	}
	fmt.Fprintf(m.Stderr, "threadbox %s: unexpected argument %q; global flags go before the command: threadbox --config FILE %s\n",
		m.cmd, rest[0], m.cmd)
	return errUsage
}

// Run executes the subcommand.
func (m *Main) Run(ctx context.Context) error {
	switch m.cmd {
	case "version":
		fmt.Fprintf(m.Stdout, "threadbox %s\n", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(m.Stdout, usage)
		return nil
	case "doctor":
		return m.runDoctor(ctx)
	case "migrate":
		return m.runMigrate(ctx)
	case "serve":
		return m.runServe(ctx)
	case "admin":
		return m.runAdmin(ctx, m.args)
	case "forward":
		return m.runForward(ctx)
	}
	fmt.Fprintf(m.Stderr, "threadbox: unknown command %q\n\n%s", m.cmd, usage)
	return errUsage
}

// Close releases what Run opened, newest first.
func (m *Main) Close() error {
	var errs []error
	for i := len(m.closers) - 1; i >= 0; i-- {
		errs = append(errs, m.closers[i]())
	}
	m.closers = nil
	return errors.Join(errs...)
}

func (m *Main) onClose(f func() error) { m.closers = append(m.closers, f) }

func (m *Main) getenv(name string) string {
	for _, kv := range m.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// secrets are the values the log and admin replies never show: the config's and the model keys.
func (m *Main) secrets() []string {
	return append(m.Config.Secrets(), m.getenv(anthropicKeyEnv), m.getenv(openAIKeyEnv))
}

// redactor is the log's redaction, for admin replies.
func (m *Main) redactor() func(string) string {
	return logging.Redactor(logging.SecretsToRedact(m.secrets(), m.Config.Public()))
}
