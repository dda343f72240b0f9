package busapi

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/otad/otad/backoff"
	"github.com/otad/otad/internal/testkit/testtool"
	"github.com/otad/otad/ota"
)

type member struct {
	Name string `xml:"name,attr"`
	Type string `xml:"type,attr"`
	Args []struct {
		Type      string `xml:"type,attr"`
		Direction string `xml:"direction,attr"`
	} `xml:"arg"`
}

type node struct {
	Interfaces []struct {
		Name       string   `xml:"name,attr"`
		Methods    []member `xml:"method"`
		Properties []member `xml:"property"`
		Signals    []member `xml:"signal"`
	} `xml:"interface"`
}

func ours(t *testing.T) (methods, properties, signals []member) {
	t.Helper()
	var n node
	if err := xml.Unmarshal([]byte(introspection()), &n); err != nil {
		t.Fatalf("introspection: %v", err)
	}
	for _, i := range n.Interfaces {
		if i.Name == Iface {
			return i.Methods, i.Properties, i.Signals
		}
	}
	t.Fatalf("introspection has no %s", Iface)
	return
}

func signature(m member) string {
	var b strings.Builder
	for _, a := range m.Args {
		b.WriteString(a.Type)
	}
	return b.String()
}

// What Introspect announces is what is exported: each interface's
// methods with their arguments' types, and every
// property values sets.
func TestIntrospectionMatchesTheObject(t *testing.T) {
	var n node
	if err := xml.Unmarshal([]byte(introspection()), &n); err != nil {
		t.Fatalf("introspection: %v", err)
	}
	tables := New(nil).tables()
	for _, i := range n.Interfaces {
		table := tables[i.Name]
		if i.Name == "org.freedesktop.DBus.Peer" {
			table = tables[peerIface] // redirectPeer sends Peer calls there
		}
		if len(table) != len(i.Methods) {
			t.Errorf("%s: %d methods announced, %d exported", i.Name, len(i.Methods), len(table))
		}
		for _, m := range i.Methods {
			fn, ok := table[m.Name]
			if !ok {
				t.Errorf("%s.%s announced, not exported", i.Name, m.Name)
				continue
			}
			var in, out string
			for _, a := range m.Args {
				if a.Direction == "out" {
					out += a.Type
				} else {
					in += a.Type
				}
			}
			if gotIn, gotOut := funcSignature(reflect.TypeOf(fn)); gotIn != in || gotOut != out {
				t.Errorf("%s.%s takes (%s) and gives (%s), announced (%s) and (%s)", i.Name, m.Name, gotIn, gotOut, in, out)
			}
		}
	}
	_, ps, _ := ours(t)
	vals := values(ota.Status{})
	if len(vals) != len(ps) {
		t.Errorf("introspection has %d properties, the object %d", len(ps), len(vals))
	}
	for _, p := range ps {
		v, ok := vals[p.Name]
		if !ok {
			t.Errorf("property %s announced, not set", p.Name)
			continue
		}
		if got := dbusSignature(v); got != p.Type {
			t.Errorf("property %s is %s, announced %s", p.Name, got, p.Type)
		}
	}
}

// The contract page has a row for each method, property and signal, with
// its type or arguments.
func TestContractNamesEveryMember(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "contract", "dbus.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	for _, s := range []string{Name, string(Path), ErrorPrefix + "Failed", Name + ".conf"} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/contract/dbus.md does not name %s", s)
		}
	}
	ms, ps, ss := ours(t)
	for _, p := range ps {
		if !strings.Contains(doc, fmt.Sprintf("| `%s` | `%s` |", p.Name, p.Type)) {
			t.Errorf("docs/contract/dbus.md has no row | `%s` | `%s` |", p.Name, p.Type)
		}
	}
	for _, m := range append(ms, ss...) {
		row := regexp.MustCompile("(?m)^\\| `" + m.Name + "` \\|.*$").FindString(doc)
		if row == "" {
			t.Errorf("docs/contract/dbus.md has no row for %s", m.Name)
			continue
		}
		for _, a := range m.Args {
			if !strings.Contains(row, "`"+a.Type+" ") {
				t.Errorf("docs/contract/dbus.md's row for %s lacks an argument of type %s: %s", m.Name, a.Type, row)
			}
		}
	}
}

// Errors are named by their ota code, which must make a valid D-Bus error
// name, or Failed.
func TestErrorNames(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)
	for _, c := range []struct {
		err  error
		want string
	}{
		{ota.Errorf(ota.CodeRootVersion, "root 3 is not newer than 4"), ErrorPrefix + "root_version"},
		{fmt.Errorf("trust: %w", ota.Errorf(ota.CodeNotYetValid, "later")), ErrorPrefix + "not_yet_valid"},
		{errors.New("cancel refused: no install is running"), ErrorPrefix + "Failed"},
	} {
		e := busError(c.err)
		if e.Name != c.want || !valid.MatchString(e.Name) || len(e.Body) != 1 || e.Body[0] != c.err.Error() {
			t.Errorf("busError(%v) = %s %v, want %s with the message", c.err, e.Name, e.Body, c.want)
		}
	}
}

// The properties read the status; what it lacks is empty.
func TestValues(t *testing.T) {
	st := ota.Status{
		State: ota.Downloading, BootedSlot: ota.SlotA, AgentVersion: "1.2",
		Slots:      map[ota.Slot]ota.SlotStatus{ota.SlotA: {Version: "1.0", SHA256: "aa", Status: ota.SlotGood}, ota.SlotB: {}},
		Target:     &ota.TargetStatus{ID: "rel-2", Version: "2.0", SHA256: "bb", BytesDone: 10, BytesTotal: 100},
		LastResult: &ota.Outcome{Result: ota.ResultFailed, Code: ota.CodeCancelled, Message: "stopped", ID: "rel-1", SHA256: "cc"},
	}
	got := values(st)
	want := map[string]any{
		"State": "downloading", "BootedSlot": "A", "AgentVersion": "1.2",
		"Slots":      map[string]slotInfo{"A": {"1.0", "good", "aa"}, "B": {}},
		"Target":     target{"rel-2", "2.0", "bb", 10, 100},
		"Pending":    offer{},
		"LastResult": result{"failed", "cancelled", "stopped", "rel-1", "cc"},
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s = %#v, want %#v", k, got[k], w)
		}
	}
	if s := got[statusProp].(string); !strings.Contains(s, `"state":"downloading"`) {
		t.Errorf("Status = %s, want the snapshot's JSON", s)
	}
	// A second update with the same status changes nothing; Status is
	// announced by name only.
	var p props
	p.update(got)
	st.Target.BytesDone = 20
	changed, invalidated := p.update(values(st))
	if len(changed) != 1 || !slices.Equal(invalidated, []string{statusProp}) {
		t.Errorf("after progress: changed %v, invalidated %v; want Target, and Status by name", changed, invalidated)
	}
	if changed, invalidated := p.update(values(st)); len(changed) != 0 || len(invalidated) != 0 {
		t.Errorf("nothing new: changed %v, invalidated %v", changed, invalidated)
	}
}

// No bus at the address is ErrNoBus: otad goes on without it.
func TestNoBus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "none"))
	if _, err := New(nil).Start(t.Context(), nil); !errors.Is(err, ErrNoBus) {
		t.Fatalf("Start without a bus: %v, want ErrNoBus", err)
	}
}

func dbusSignature(v any) string { return dbus.SignatureOf(v).String() }

// funcSignature is the D-Bus signature of a method's arguments and
// results, the trailing *dbus.Error left out.
func funcSignature(f reflect.Type) (in, out string) {
	for i := range f.NumIn() {
		in += dbus.SignatureOfType(f.In(i)).String()
	}
	for i := range f.NumOut() - 1 {
		out += dbus.SignatureOfType(f.Out(i)).String()
	}
	return in, out
}

// The XML written from the interfaces' data is, byte for byte, what otad
// announced when it was a literal (testdata/introspect.xml): tools that
// read it, and the contract page, see no change.
func TestIntrospectionXML(t *testing.T) {
	want, err := os.ReadFile("testdata/introspect.xml")
	if err != nil {
		t.Fatal(err)
	}
	if got := introspection(); got != string(want) {
		t.Errorf("introspection differs from testdata/introspect.xml:\n%s", got)
	}
}

// Get and GetAll answer for the interface's name and for "", which the
// D-Bus specification lets a caller give for any interface; another
// interface is unknown.
func TestPropertiesInterfaceName(t *testing.T) {
	var p props
	p.update(values(ota.Status{State: ota.Idle}))
	for _, c := range []struct {
		iface   string
		wantErr string
	}{
		{Iface, ""},
		{"", ""},
		{"org.example.Other", "org.freedesktop.DBus.Error.UnknownInterface"},
	} {
		v, err := p.Get(c.iface, "State")
		all, allErr := p.GetAll(c.iface)
		if c.wantErr != "" {
			if err == nil || err.Name != c.wantErr || allErr == nil || allErr.Name != c.wantErr {
				t.Errorf("Get/GetAll(%q): %v, %v; want %s", c.iface, err, allErr, c.wantErr)
			}
			continue
		}
		if err != nil || v.Value() != "idle" {
			t.Errorf("Get(%q, State) = %v, %v; want idle", c.iface, v, err)
		}
		if allErr != nil || all["State"].Value() != "idle" || len(all) != len(values(ota.Status{})) {
			t.Errorf("GetAll(%q) = %v, %v; want every property", c.iface, all, allErr)
		}
	}
	if _, err := p.Get("", "Nothing"); err == nil || err.Name != "org.freedesktop.DBus.Error.UnknownProperty" {
		t.Errorf("Get(\"\", Nothing): %v, want UnknownProperty", err)
	}
}

// The machine ID is the first file's that holds one.
func TestMachineID(t *testing.T) {
	dir := t.TempDir()
	const id = "3d1219c7c4c5404aaa1f6d2a48adfda4"
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(id+"\n"), 0o644)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("uninitialized\n"), 0o644)
	none := filepath.Join(dir, "none")
	for _, c := range []struct {
		files []string
		want  string // "" for an error
	}{
		{[]string{good, none}, id},
		{[]string{none, good}, id},
		{[]string{bad, good}, id},
		{[]string{bad, none}, ""},
		{nil, ""},
	} {
		got, err := machineID(c.files)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("machineID(%q) = %q, %v; want %q", c.files, got, err, c.want)
		}
	}
}

// On a real bus, Peer answers as the D-Bus specification says, on any
// path: Ping, and GetMachineId with the machine's ID (not the bus's GUID,
// which godbus would give).
func TestPeer(t *testing.T) {
	bus := newTestBus(t)
	const id = "0123456789abcdef0123456789abcdef"
	o := New(nil)
	file := testtool.WriteFile(t, filepath.Join(t.TempDir(), "machine-id"), []byte(id+"\n"))
	o.machineIDFiles = []string{filepath.Join(t.TempDir(), "none"), file}
	stop, err := o.Start(t.Context(), stubHandler{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := bus.client()
	for _, path := range []dbus.ObjectPath{Path, "/"} {
		var got string
		if err := c.Object(Name, path).CallWithContext(t.Context(), "org.freedesktop.DBus.Peer.GetMachineId", 0).Store(&got); err != nil || got != id {
			t.Errorf("GetMachineId on %s = %q, %v; want %s", path, got, err, id)
		}
		if err := c.Object(Name, path).CallWithContext(t.Context(), "org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
			t.Errorf("Ping on %s: %v", path, err)
		}
	}
	os.Remove(file)
	if err := c.Object(Name, Path).CallWithContext(t.Context(), "org.freedesktop.DBus.Peer.GetMachineId", 0).Err; err == nil {
		t.Errorf("GetMachineId with no machine ID: no error")
	}
}

// When the bus goes away and comes back (dbus-daemon killed and started
// again), otad says so once and joins again: the name is owned and the
// object answers on the new bus.
func TestRejoinsAfterTheBusRestarts(t *testing.T) {
	bus := newTestBus(t)
	var log testtool.Buffer
	o := New(slog.New(slog.NewTextHandler(&log, nil)))
	o.rejoinPolicy = backoff.Policy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	stop, err := o.Start(t.Context(), stubHandler{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	state := func() (string, error) {
		c, err := dbus.Connect(bus.addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		var v dbus.Variant
		err = c.Object(Name, Path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, Iface, "State").Store(&v)
		s, _ := v.Value().(string)
		return s, err
	}
	if s, err := state(); err != nil || s != "idle" {
		t.Fatalf("State before the restart: %q, %v", s, err)
	}
	for round := 1; round <= 2; round++ {
		bus.kill()
		waitFor(t, "the loss logged", func() bool { return strings.Count(log.String(), "left D-Bus") == round })
		time.Sleep(300 * time.Millisecond) // several rejoin attempts fail meanwhile
		bus.start()
		waitFor(t, "State on the restarted bus", func() bool { s, err := state(); return err == nil && s == "idle" })
		waitFor(t, "the rejoin logged", func() bool { return strings.Count(log.String(), "on D-Bus again") == round })
		if n := strings.Count(log.String(), "left D-Bus"); n != round {
			t.Errorf("after %d restarts the loss is logged %d times:\n%s", round, n, log.String())
		}
	}
}

// waitFor polls cond for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in 10 s", what)
		}
	}
}
