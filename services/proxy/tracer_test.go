// This file holds the tests' packet tracer: it walks a packet through the
// rules a knftables Fake holds, for the rule forms the proxy writes, and
// returns every way it can end (numgen's branches are all followed), so
// that tests assert where packets go rather than how rules are spelled.

package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// packet is what the tracer knows of a packet.
type packet struct {
	Src, Dst           string // addresses
	Proto              string // tcp, udp, sctp
	Port               int
	SrcLocal, DstLocal bool // fib's "type local" of each address
	// Sticky are the affinity sets holding Src.
	Sticky []string
}

// outcome is one way a packet's walk ends.
type outcome struct {
	Verdict string // "dnat", "drop", "reject", "accept" or "none" (fell off the base chain)
	DNAT    string // ip:port, for dnat
	Masq    bool   // marked for masquerading
	Updated []string
}

func (o outcome) String() string {
	if o.Verdict == "dnat" {
		return fmt.Sprintf("dnat %s masq=%v", o.DNAT, o.Masq)
	}
	return fmt.Sprintf("%s masq=%v", o.Verdict, o.Masq)
}

type tracer struct {
	t    *testing.T
	fake *knftables.Fake
}

// trace walks pkt from chain and returns its distinct outcomes, sorted.
func (tr *tracer) trace(chain string, pkt packet) []string {
	tr.t.Helper()
	res := tr.chain(chain, pkt, outcome{}, 0)
	var out []string
	for _, r := range res {
		if !r.cont {
			out = append(out, r.o.String())
		} else {
			r.o.Verdict = "none"
			out = append(out, r.o.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// result is an outcome, or a state to continue with (cont: the chain
// returned or ended).
type result struct {
	o    outcome
	cont bool
}

func (tr *tracer) chain(name string, pkt packet, st outcome, depth int) []result {
	tr.t.Helper()
	if depth > 20 {
		tr.t.Fatalf("tracer: chain loop at %s", name)
	}
	c := tr.fake.Table.Chains[name]
	if c == nil {
		tr.t.Fatalf("tracer: no chain %q", name)
	}
	states := []outcome{st}
	var done []result
	for _, r := range c.Rules {
		var next []outcome
		for _, s := range states {
			for _, res := range tr.rule(r.Rule, pkt, s, depth) {
				if res.cont {
					next = append(next, res.o)
				} else {
					done = append(done, res)
				}
			}
		}
		states = next
	}
	for _, s := range states {
		done = append(done, result{o: s, cont: true})
	}
	return done
}

// rule evaluates one rule; a rule whose matches fail continues unchanged.
func (tr *tracer) rule(rule string, pkt packet, st outcome, depth int) []result {
	tr.t.Helper()
	w := strings.Fields(rule)
	cont := []result{{o: st, cont: true}}
	for len(w) > 0 {
		switch {
		case hasPrefix(w, "ct", "state", "new"):
			w = w[3:]
		case hasPrefix(w, "ip", "daddr", ".", "meta", "l4proto", ".", "th", "dport", "vmap"):
			v := tr.lookup(w[9][1:], pkt.Dst, pkt.Proto, strconv.Itoa(pkt.Port))
			if v == "" {
				return cont
			}
			return tr.verdict(strings.Fields(v), pkt, st, depth)
		case hasPrefix(w, "meta", "l4proto", ".", "th", "dport", "vmap"):
			v := tr.lookup(w[6][1:], pkt.Proto, strconv.Itoa(pkt.Port))
			if v == "" {
				return cont
			}
			return tr.verdict(strings.Fields(v), pkt, st, depth)
		case hasPrefix(w, "fib", "daddr", "type", "local"):
			if !pkt.DstLocal {
				return cont
			}
			w = w[4:]
		case hasPrefix(w, "fib", "saddr", "type", "local"):
			if !pkt.SrcLocal {
				return cont
			}
			w = w[4:]
		case w[0] == "ip" && (w[1] == "saddr" || w[1] == "daddr"):
			addr := pkt.Src
			if w[1] == "daddr" {
				addr = pkt.Dst
			}
			neg := w[2] == "!="
			val := w[2]
			w = w[3:]
			if neg {
				val, w = w[0], w[1:]
			}
			if tr.matchAddr(addr, val, pkt) == neg {
				return cont
			}
		case (w[0] == "tcp" || w[0] == "udp" || w[0] == "sctp") && w[1] == "dport":
			if pkt.Proto != w[0] || strconv.Itoa(pkt.Port) != w[2] {
				return cont
			}
			w = w[3:]
		case hasPrefix(w, "meta", "l4proto") && w[2] != ".":
			if pkt.Proto != w[2] {
				return cont
			}
			w = w[3:]
		case hasPrefix(w, "meta", "mark", "&"):
			// masquerading's test of the mark
			marked := st.Masq
			if (w[4] == "==" && w[5] == "0") != !marked {
				return cont
			}
			w = w[6:]
		case hasPrefix(w, "meta", "mark", "set", "meta", "mark", "|"):
			st.Masq = true
			w = w[7:]
			cont = []result{{o: st, cont: true}}
		case hasPrefix(w, "meta", "mark", "set", "meta", "mark", "^"):
			w = w[7:]
		case hasPrefix(w, "update"):
			st.Updated = append(slices.Clone(st.Updated), w[1][1:])
			w = w[6:]
			cont = []result{{o: st, cont: true}}
		case hasPrefix(w, "dnat", "to"):
			st.Verdict, st.DNAT = "dnat", w[2]
			return []result{{o: st}}
		case hasPrefix(w, "masquerade"):
			return []result{{o: st, cont: true}}
		case hasPrefix(w, "numgen", "random", "mod"):
			body := strings.Join(w[6:len(w)-1], " ")
			var out []result
			for _, e := range strings.Split(body, ",") {
				f := strings.Fields(e)
				out = append(out, tr.verdict(f[2:], pkt, st, depth)...)
			}
			return out
		default:
			return tr.verdict(w, pkt, st, depth)
		}
	}
	return cont
}

func (tr *tracer) verdict(w []string, pkt packet, st outcome, depth int) []result {
	tr.t.Helper()
	switch w[0] {
	case "goto":
		res := tr.chain(w[1], pkt, st, depth+1)
		for i := range res {
			if res[i].cont { // the goto's chain ended: back to the base chain's caller
				res[i].cont = false
				res[i].o.Verdict = "none"
			}
		}
		return res
	case "jump":
		return tr.chain(w[1], pkt, st, depth+1)
	case "return":
		return []result{{o: st, cont: true}} // approximate: the tests never return past a jump
	case "drop", "accept":
		st.Verdict = w[0]
		return []result{{o: st}}
	case "reject":
		st.Verdict = "reject"
		return []result{{o: st}}
	}
	tr.t.Fatalf("tracer: cannot evaluate %q", strings.Join(w, " "))
	return nil
}

func (tr *tracer) matchAddr(addr, val string, pkt packet) bool {
	tr.t.Helper()
	if strings.HasPrefix(val, "@") {
		return slices.Contains(pkt.Sticky, val[1:])
	}
	a := netip.MustParseAddr(addr)
	if strings.Contains(val, "/") {
		return netip.MustParsePrefix(val).Contains(a)
	}
	return netip.MustParseAddr(val) == a
}

// lookup is the value of the map's element with that key, or "".
func (tr *tracer) lookup(m string, key ...string) string {
	fm := tr.fake.Table.Maps[m]
	if fm == nil {
		tr.t.Fatalf("tracer: no map %q", m)
	}
	if e := fm.FindElement(key...); e != nil {
		return strings.Join(e.Value, " ")
	}
	return ""
}

func hasPrefix(w []string, p ...string) bool {
	return len(w) >= len(p) && slices.Equal(w[:len(p)], p)
}
