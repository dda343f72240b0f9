package operator

import (
	"crypto"
	"github.com/otad/otad/rollout"
	"github.com/otad/otad/verify"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/mosquittotest"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

// testHomeEnv hands the tests' config home to the otactl processes a test
// starts from its own binary (TestHelperOtactl): they sign with the same
// operator key.
const testHomeEnv = "OTACTL_TEST_CONFIG_HOME"

// The tests never read the config of whoever runs them.
func TestMain(m *testing.M) {
	dir, inherited := os.Getenv(testHomeEnv), true
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "otactl-config-home"); err != nil {
			panic(err)
		}
		inherited = false
		os.Setenv(testHomeEnv, dir)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	os.Unsetenv(configEnv)
	// Every rollout command of the tests signs and verifies with one
	// operator key, from the user's config (docs/contract/rollouts.md).
	if err := operatorConfig(filepath.Join(dir, "otactl"), inherited); err != nil {
		panic(err)
	}
	code := m.Run()
	if !inherited {
		os.RemoveAll(dir)
	}
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
	good := write("good.toml", "brokers = [\""+b.URL+"\"]\nprefix = \"elsewhere\"\nusername = \"ops\"\n[tls]\nca = \"ca.pem\"\n[operator]\nkey = \"op.key\"\ntrust = [\"operators.d\"]\nstate_dir = \"state\"\n")
	t.Setenv(configEnv, good)
	c, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.CA != filepath.Join(dir, "ca.pem") || c.Operator.Key != filepath.Join(dir, "op.key") || c.Operator.Trust[0] != filepath.Join(dir, "operators.d") ||
		c.Operator.StateDir != filepath.Join(dir, "state") {
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
	// The operator keys trusted come from the config too.
	trusted := "[operator]\ntrust = [\"" + testOperator.trustDir + "\"]\n"
	plain := write("plain.toml", "brokers = [\""+b.URL+"\"]\n"+trusted)
	t.Setenv(configEnv, plain)
	if r := otactl(t, "rollout", "list"); r.code != ota.ExitOK || !strings.Contains(r.stderr, "no rollout state retained") {
		t.Errorf("rollout list from the config: exit %d, %q", r.code, r.stderr)
	}
	// --broker wins: the config's is not tried (nothing listens there).
	write("dead.toml", "brokers = [\"mqtt://127.0.0.1:1\"]\n"+trusted)
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
	testtool.WriteFile(t, filepath.Join(home, "otactl", "config.toml"), []byte("brokers = [\""+b.URL+"\"]\n"+trusted))
	if r := otactl(t, "rollout", "list"); r.code != ota.ExitOK {
		t.Errorf("~/.config/otactl/config.toml: exit %d, %q", r.code, r.stderr)
	}
}

// testOperator is the operator key of the tests' config, and the trust in
// it (TestMain).
var testOperator struct {
	key      crypto.Signer
	trust    rollout.Trust
	trustDir string
}

// operatorConfig writes an operator key pair in dir, and the config
// naming them; inherited, it reads the key the parent process wrote.
func operatorConfig(dir string, inherited bool) error {
	if inherited {
		key, err := verify.LoadPrivateKeyFile(filepath.Join(dir, "op.key"))
		if err != nil {
			return err
		}
		testOperator.key, testOperator.trustDir = key, filepath.Join(dir, "operators.d")
		testOperator.trust = rollout.Trust{Keys: verify.NewKeyring(verify.Key{Public: key.Public()})}
		return nil
	}
	key, err := verify.GenerateKey(verify.KeyEd25519)
	if err != nil {
		return err
	}
	priv, err := verify.MarshalPrivateKeyPEM(key)
	if err != nil {
		return err
	}
	pub, err := verify.MarshalPublicKeyPEM(key.Public())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "operators.d"), 0o755); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"op.key": priv, "operators.d/op.pub": pub, "config.toml": []byte("[operator]\nkey = \"op.key\"\ntrust = [\"operators.d\"]\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	testOperator.key, testOperator.trustDir = key, filepath.Join(dir, "operators.d")
	testOperator.trust = rollout.Trust{Keys: verify.NewKeyring(verify.Key{Public: key.Public()})}
	return nil
}

// sealState is s signed with the tests' operator key for topic, as a
// controller publishes it.
func sealState(t testing.TB, topic string, s rollout.State) []byte {
	t.Helper()
	b, err := s.Encode()
	if err == nil {
		b, err = rollout.Seal(testOperator.key, topic, s.Counter(), b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openState is the state a controller published on topic, verified.
func openState(topic string, msg []byte) (rollout.State, error) {
	s, _, err := testOperator.trust.OpenState(topic, msg)
	return s, err
}
