// Package packaging checks kplane's deployment artifacts — the
// docker-compose file and the Helm chart — against the kplane binary
// itself: every command line they run must parse with the real
// subcommand's flag set, and their topology must match `kplane up`'s.
// Its tests load docker-compose.yml with the compose-spec loader and render
// charts/kplane with helm, decoding each manifest strictly into the
// Kubernetes API types.
package packaging

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Flag is one flag of a kplane subcommand, as its --help lists it.
type Flag struct {
	Name, Shorthand string
	// Type is pflag's type name ("string", "int", "duration", ...); empty
	// for a boolean flag, which takes no separate value.
	Type    string
	Default string
}

// Kplane is a kplane binary; it remembers the subcommands' flag sets.
type Kplane struct {
	Bin string

	mu       sync.Mutex
	commands map[string]*Command
}

// Command returns the flag set of subcommand name (LoadCommand, once).
func (k *Kplane) Command(ctx context.Context, name string) (*Command, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.commands[name]; ok {
		return c, nil
	}
	c, err := LoadCommand(ctx, k.Bin, name)
	if err != nil {
		return nil, err
	}
	if k.commands == nil {
		k.commands = map[string]*Command{}
	}
	k.commands[name] = c
	return c, nil
}

// Command is the flag set of one kplane subcommand.
type Command struct {
	Name  string
	Flags map[string]Flag
}

var (
	usageLine = regexp.MustCompile(`^\s+kplane (\S+)(?: \[flags\])?$`)
	flagLine  = regexp.MustCompile(`^\s+(?:-(\w), )?--([\w-]+)(?: (\w+))?\s{2,}(.*)$`)
	defaultRe = regexp.MustCompile(`\(default (.*)\)$`)
)

// LoadCommand runs `bin name --help` and reads the subcommand's flags. It
// fails for a name that is not a kplane subcommand.
func LoadCommand(ctx context.Context, bin, name string) (*Command, error) {
	out, err := exec.CommandContext(ctx, bin, name, "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s %s --help: %w: %s", bin, name, err, out)
	}
	c := &Command{Name: name, Flags: map[string]Flag{}}
	section, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
			section = line
			continue
		case section == "Usage:":
			if m := usageLine.FindStringSubmatch(line); m != nil && m[1] == name {
				found = true
			}
		case section == "Flags:" || section == "Global Flags:":
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			f := Flag{Shorthand: m[1], Name: m[2], Type: m[3]}
			if d := defaultRe.FindStringSubmatch(m[4]); d != nil {
				f.Default = strings.Trim(d[1], `"`)
			}
			c.Flags[f.Name] = f
		}
	}
	if !found {
		return nil, fmt.Errorf("%q is not a kplane subcommand (its --help shows:\n%s)", name, out)
	}
	return c, nil
}

// CheckArgs checks one kplane command line (args[0] is the subcommand):
// every flag must be one the subcommand defines, every non-boolean flag
// must have a value, and there must be no positional arguments (no kplane
// subcommand takes any). Finally the real binary parses the whole line
// (with --help, so nothing starts), which rejects values of the wrong type.
func (k *Kplane) CheckArgs(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("empty kplane command line")
	}
	c, err := k.Command(ctx, args[0])
	if err != nil {
		return err
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			return fmt.Errorf("kplane %s: unexpected argument %q", c.Name, a)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f Flag
		var ok bool
		if strings.HasPrefix(a, "--") {
			f, ok = c.Flags[name]
		} else {
			for _, g := range c.Flags {
				if g.Shorthand == name {
					f, ok = g, true
				}
			}
		}
		if !ok {
			return fmt.Errorf("kplane %s: unknown flag %s", c.Name, a)
		}
		if f.Type != "" && !hasValue {
			if i+1 >= len(args) {
				return fmt.Errorf("kplane %s: flag --%s needs a value", c.Name, f.Name)
			}
			i++
		}
	}
	full := append(append([]string(nil), args...), "--help")
	if out, err := exec.CommandContext(ctx, k.Bin, full...).CombinedOutput(); err != nil {
		return fmt.Errorf("kplane %s does not parse: %w: %s", strings.Join(args, " "), err, firstLine(out))
	}
	return nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// Topology is how many processes of each component a deployment runs, and
// how many simulated nodes its node agents carry in all.
type Topology struct {
	Processes map[string]int
	Nodes     int
}

// UpTopology is the topology `kplane up` starts by default, read from the
// defaults of its flags: --store-members store members, --apiservers API
// services, one gateway, --schedulers schedulers, --controller-managers
// controller managers and one node agent with --nodes nodes.
func (k *Kplane) UpTopology(ctx context.Context) (Topology, error) {
	up, err := k.Command(ctx, "up")
	if err != nil {
		return Topology{}, err
	}
	n := func(flag string) (int, error) {
		f, ok := up.Flags[flag]
		if !ok {
			return 0, fmt.Errorf("kplane up has no --%s", flag)
		}
		var v int
		if _, err := fmt.Sscan(f.Default, &v); err != nil {
			return 0, fmt.Errorf("kplane up --%s default %q: %w", flag, f.Default, err)
		}
		return v, nil
	}
	t := Topology{Processes: map[string]int{"gateway": 1, "nodeagent": 1}}
	for comp, flag := range map[string]string{"store": "store-members", "apiserver": "apiservers",
		"scheduler": "schedulers", "controllers": "controller-managers"} {
		if t.Processes[comp], err = n(flag); err != nil {
			return Topology{}, err
		}
	}
	if t.Nodes, err = n("nodes"); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// FlagValue returns the value of --name in a command line (the last one
// given), and whether it is there.
func FlagValue(args []string, name string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			val, found = v, true
		} else if a == "--"+name && i+1 < len(args) {
			val, found = args[i+1], true
			i++
		}
	}
	return val, found
}

// PKIDir is where the image's components find their certificates (the
// compose volume, the chart's Secret).
const PKIDir = "/var/lib/kplane/pki"

// PKIFiles returns the files under PKIDir a command line names, relative
// to it (e.g. "apiserver-1.crt", "nodes").
func PKIFiles(args []string) []string {
	var out []string
	for _, a := range args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
			a = v
		}
		if rel, ok := strings.CutPrefix(a, PKIDir+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}

// StoreCAFile is the store's own CA in PKIDir: it signs the store members'
// certificates and the API services' store client certificate, nothing
// else, and is the only CA the store trusts.
const StoreCAFile = PKIDir + "/store-ca.crt"

// StoreTrust returns what is wrong with who may reach the store in a
// deployment, given each store member's command line (with their names,
// as the peer certificates' common names, in members) and each API
// service's: both store ports must require client certificates from the
// store CA, the peer port only members' names, and the API services must
// verify the members with the store CA while their own clients stay on
// another CA.
func StoreTrust(stores [][]string, members []string, apiservers [][]string) []string {
	var problems []string
	want := slices.Sorted(slices.Values(members))
	for _, args := range stores {
		name, _ := FlagValue(args, "name")
		for _, f := range []string{"trusted-ca-file", "peer-trusted-ca-file"} {
			if v, _ := FlagValue(args, f); v != StoreCAFile {
				problems = append(problems, fmt.Sprintf("store %s: --%s %q, want %s", name, f, v, StoreCAFile))
			}
		}
		for _, f := range []string{"client-cert-auth", "peer-client-cert-auth"} {
			if !slices.Contains(args, "--"+f) {
				problems = append(problems, fmt.Sprintf("store %s: no --%s", name, f))
			}
		}
		cns, _ := FlagValue(args, "peer-cert-allowed-cn")
		if got := slices.Sorted(slices.Values(strings.Split(cns, ","))); !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("store %s: --peer-cert-allowed-cn %q, want the members %s", name, cns, strings.Join(want, ",")))
		}
	}
	for i, args := range apiservers {
		if v, _ := FlagValue(args, "store-cafile"); v != StoreCAFile {
			problems = append(problems, fmt.Sprintf("apiserver %d: --store-cafile %q, want %s", i+1, v, StoreCAFile))
		}
		if v, _ := FlagValue(args, "client-ca-file"); v == StoreCAFile {
			problems = append(problems, fmt.Sprintf("apiserver %d: --client-ca-file is the store CA, which signs no component's certificate", i+1))
		}
	}
	return problems
}

// SignedBy reports whether the PEM certificate in certFile chains to the
// CA certificate in caFile.
func SignedBy(certFile, caFile string) (bool, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return false, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return false, fmt.Errorf("%s: no certificate", caFile)
	}
	b, err := os.ReadFile(certFile)
	if err != nil {
		return false, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return false, fmt.Errorf("%s: no PEM block", certFile)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false, fmt.Errorf("%s: %w", certFile, err)
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil, nil
}
