// This file holds the writing of a ruleset into the proxy's table in one
// nftables transaction: every wanted chain and map rewritten, affinity
// sets kept with their clients, and whatever the table holds that is no
// longer wanted deleted.

package proxy

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// tableComment says who owns the table.
const tableComment = "kplane proxy: Service cluster IPs and node ports"

// existing are the names of the chains, maps and sets the table holds.
type existing struct {
	chains, maps, sets []string
}

// listExisting lists what the table holds; a table that does not exist
// holds nothing.
func listExisting(ctx context.Context, nft knftables.Interface) (existing, error) {
	var ex existing
	for _, x := range []struct {
		kind string
		into *[]string
	}{{"chains", &ex.chains}, {"maps", &ex.maps}, {"sets", &ex.sets}} {
		names, err := nft.List(ctx, x.kind)
		if err != nil {
			if knftables.IsNotFound(err) {
				return existing{}, nil
			}
			return existing{}, fmt.Errorf("proxy: list %s: %w", x.kind, err)
		}
		*x.into = names
	}
	return ex, nil
}

// fillTransaction writes rs into tx. With fresh, the table is deleted and
// made again first (within the same transaction, so traffic never sees
// it missing): what an earlier run left, affinity included, goes. Else
// ex, what the table holds now, says what to delete.
func fillTransaction(tx *knftables.Transaction, rs *ruleset, fresh bool, ex existing) {
	table := &knftables.Table{Comment: knftables.PtrTo(tableComment)}
	tx.Add(table)
	if fresh {
		tx.Delete(table)
		tx.Add(table)
		ex = existing{}
	}
	wantChains := map[string]bool{}
	wantMaps := map[string]bool{}
	wantSets := map[string]bool{}
	// Objects first, so rules may name any of them; then flush what is
	// rewritten (stale chains too: their rules may hold others).
	for _, c := range rs.chains {
		wantChains[c.chain.Name] = true
		tx.Add(c.chain)
	}
	for _, m := range rs.maps {
		wantMaps[m.m.Name] = true
		tx.Add(m.m)
	}
	for _, s := range rs.sets {
		wantSets[s.Name] = true
		tx.Add(s)
	}
	for _, c := range rs.chains {
		tx.Flush(c.chain)
	}
	for _, name := range ex.chains {
		if !wantChains[name] {
			tx.Flush(&knftables.Chain{Name: name})
		}
	}
	for _, m := range rs.maps {
		tx.Flush(m.m)
	}
	for _, name := range ex.maps {
		if !wantMaps[name] {
			tx.Flush(&knftables.Map{Name: name})
		}
	}
	for _, c := range rs.chains {
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.chain.Name, Rule: r})
		}
	}
	for _, m := range rs.maps {
		for _, e := range m.elements {
			e.Map = m.m.Name
			tx.Add(e)
		}
	}
	for _, name := range ex.chains {
		if !wantChains[name] {
			tx.Delete(&knftables.Chain{Name: name})
		}
	}
	for _, name := range ex.maps {
		if !wantMaps[name] {
			tx.Delete(&knftables.Map{Name: name})
		}
	}
	for _, name := range ex.sets {
		if !wantSets[name] {
			tx.Delete(&knftables.Set{Name: name})
		}
	}
}

// DeleteTable removes the proxy's table, if there is one: `kplane proxy
// --cleanup` and a shutdown that was asked to clean up.
func DeleteTable(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	table := &knftables.Table{}
	tx.Add(table)
	tx.Delete(table)
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("proxy: delete table: %w", err)
	}
	return nil
}
