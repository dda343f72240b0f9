package packaging

import (
	"bufio"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/otad/otad/device/busapi"
)

// The shipped D-Bus policy (docs/contract/dbus.md#policy): named for
// otad's bus name, as otad.yaml installs it; only root owns the name; root
// and the group otad send to it; anyone else is denied. A dbus-daemon
// loads it (the test in device/daemon runs otad behind it).
func TestDBusPolicy(t *testing.T) {
	file := "dbus/" + busapi.Name + ".conf"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	recipe, err := os.ReadFile("otad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(recipe), "src: packaging/"+file+"\n    dst: /usr/share/dbus-1/system.d/"+busapi.Name+".conf\n") {
		t.Errorf("otad.yaml does not install %s in /usr/share/dbus-1/system.d/", file)
	}
	var conf struct {
		Policies []struct {
			User    string `xml:"user,attr"`
			Group   string `xml:"group,attr"`
			Context string `xml:"context,attr"`
			Allow   []rule `xml:"allow"`
			Deny    []rule `xml:"deny"`
		} `xml:"policy"`
	}
	if err := xml.Unmarshal(b, &conf); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var owners, senders, denied []string
	for _, p := range conf.Policies {
		who := p.User + p.Group + p.Context
		for _, a := range p.Allow {
			if a.Own != "" {
				owners = append(owners, who+":"+a.Own)
			}
			if a.SendDestination != "" {
				senders = append(senders, who+":"+a.SendDestination)
			}
		}
		for _, d := range p.Deny {
			if d.SendDestination != "" {
				denied = append(denied, who+":"+d.SendDestination)
			}
		}
	}
	n := busapi.Name
	if !slices.Equal(owners, []string{"root:" + n}) || !slices.Equal(senders, []string{"root:" + n, "otad:" + n}) || !slices.Equal(denied, []string{"default:" + n}) {
		t.Errorf("policy: owners %v, senders %v, denied %v; want root owns, root and otad send, default denied", owners, senders, denied)
	}
	for _, grp := range []string{"groupadd --system otad", "getent group otad"} {
		if post, _ := os.ReadFile("debian/postinst"); !strings.Contains(string(post), grp) {
			t.Errorf("postinst lacks %q: the policy's group would not exist", grp)
		}
	}

	bin := need(t, "dbus-daemon", "dbus-daemon")
	dir := t.TempDir()
	abs, _ := filepath.Abs(file)
	bus := `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path=` + filepath.Join(dir, "bus") + `</listen><auth>EXTERNAL</auth><include>` + abs + `</include></busconfig>`
	conf2 := filepath.Join(dir, "bus.conf")
	os.WriteFile(conf2, []byte(bus), 0o644)
	cmd := exec.Command(bin, "--config-file="+conf2, "--nofork", "--print-address=1", "--nosyslog")
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if addr, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(addr, "unix:") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("dbus-daemon with the policy: %v %q\n%s", err, addr, stderr.String())
	}
}

type rule struct {
	Own             string `xml:"own,attr"`
	SendDestination string `xml:"send_destination,attr"`
}
