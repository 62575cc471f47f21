package localcluster

import "testing"

// TestPortsGiveEachOnce: a port picker never hands out a port twice, though
// the kernel may return a just-closed port again.
func TestPortsGiveEachOnce(t *testing.T) {
	p := newPorts("127.0.0.1")
	seen := map[int]bool{}
	for range 300 {
		n, err := p.free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("port %d given twice", n)
		}
		seen[n] = true
	}
}
