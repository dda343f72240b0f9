package operator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

// The tests never read the config of whoever runs them.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "otactl-config-home")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	os.Unsetenv(configEnv)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// otactl's config gives every fleet command its broker (and TLS files,
// username, prefix); a flag given wins; an unknown key is refused, named;
// $OTACTL_CONFIG must exist, the default file need not.
func TestConfigFile(t *testing.T) {
	b := mosquittotest.Start(t, mosquittotest.Options{Quiet: true})
	dir := t.TempDir()
	write := func(name, body string) string {
		return testtool.WriteFile(t, filepath.Join(dir, name), []byte(body))
	}
	good := write("good.toml", "brokers = [\""+b.URL+"\"]\nprefix = \"elsewhere\"\nusername = \"ops\"\n[tls]\nca = \"ca.pem\"\n[operator]\nkey = \"op.key\"\ntrust = [\"operators.d\"]\n")
	t.Setenv(configEnv, good)
	c, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.CA != filepath.Join(dir, "ca.pem") || c.Operator.Key != filepath.Join(dir, "op.key") || c.Operator.Trust[0] != filepath.Join(dir, "operators.d") {
		t.Errorf("files not relative to the config's directory: %+v", c)
	}
	bf := addBrokerFlags(newFlagSet("x", "", os.Stderr))
	if err := bf.fs.Parse([]string{"--prefix", "ota"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := bf.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Broker != b.URL || cfg.TopicPrefix != "ota" || cfg.Username != "ops" || cfg.CAFile != filepath.Join(dir, "ca.pem") {
		t.Errorf("config %+v: want the file's broker, username and CA, the flag's prefix", cfg)
	}
	// A fleet command with no --broker: the config's.
	plain := write("plain.toml", "brokers = [\""+b.URL+"\"]\n")
	t.Setenv(configEnv, plain)
	if r := otactl(t, "rollout", "list"); r.code != ota.ExitOK || !strings.Contains(r.stderr, "no rollout state retained") {
		t.Errorf("rollout list from the config: exit %d, %q", r.code, r.stderr)
	}
	// --broker wins: the config's is not tried (nothing listens there).
	write("dead.toml", "brokers = [\"mqtt://127.0.0.1:1\"]\n")
	t.Setenv(configEnv, filepath.Join(dir, "dead.toml"))
	if r := otactl(t, "rollout", "list", "--broker", b.URL); r.code != ota.ExitOK {
		t.Errorf("--broker over the config's: exit %d, %q", r.code, r.stderr)
	}
	for _, c := range []struct{ name, body, want string }{
		{"typo.toml", "brokers = [\"mqtt://x:1\"]\nusernme = \"ops\"\n[tls]\ncafile = \"x\"\n", "unknown key usernme (line 2), tls.cafile (line 4)"},
		{"bad.toml", "brokers = \"not a list\"\n", "otactl config"},
	} {
		t.Setenv(configEnv, write(c.name, c.body))
		if r := otactl(t, "rollout", "list"); r.code == ota.ExitOK || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, %q, want %q", c.name, r.code, r.stderr, c.want)
		}
	}
	t.Setenv(configEnv, filepath.Join(dir, "missing.toml"))
	if r := otactl(t, "rollout", "list"); r.code == ota.ExitOK || !strings.Contains(r.stderr, "missing.toml") {
		t.Errorf("a missing $OTACTL_CONFIG: exit %d, %q", r.code, r.stderr)
	}
	// The default file, when there is one.
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv(configEnv, "")
	if err := os.Mkdir(filepath.Join(home, "otactl"), 0o700); err != nil {
		t.Fatal(err)
	}
	testtool.WriteFile(t, filepath.Join(home, "otactl", "config.toml"), []byte("brokers = [\""+b.URL+"\"]\n"))
	if r := otactl(t, "rollout", "list"); r.code != ota.ExitOK {
		t.Errorf("~/.config/otactl/config.toml: exit %d, %q", r.code, r.stderr)
	}
}
